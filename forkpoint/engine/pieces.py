"""Cutting a body too large to hold into pieces, as it passes (the tee's, past its budget; a
request's, past `hold_limit`).

A piece is `size` bytes (the last one fewer) named by its sha256, the time its first byte
arrived, and its size; its bytes leave as a `Blob` the moment it fills, so what is held is at
most one piece. The same bytes cut at the same place give the same pieces: a replay that
serves stored pieces names them again (`name`) instead of storing them twice. A request's
pieces are masked before they are named (`mask`), so what is stored holds no secret.

Which request bodies go in pieces is one rule (`in_pieces`), for the doors that read them as
they come and for whatever reads one whole (matching a file's body, an import): JSON, which
matching, a fork's change and masking read as a value, is held whole up to the decode limit;
any other body (a file, a multipart upload) past 4 MiB.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

from forkpoint.engine.encoding import DECODE_LIMIT, header
from forkpoint.models import Blob, Headers, Piece

# The most of a request body held whole (bytes): JSON up to the decode limit, else 4 MiB (as
# the tee holds of a response). Past it the body is held to REQUEST_HOLD, the rest in pieces.
REQUEST_HOLD = 4 * 1024 * 1024
JSON_HOLD = DECODE_LIMIT
_JSON_START = re.compile(rb"\s*[\[{]")


def hold_limit(headers: Headers, start: bytes) -> int:
    """How much of a request body is held whole, by its type (`start`: its first bytes, read
    when it names none): JSON up to JSON_HOLD, any other body up to REQUEST_HOLD."""
    kind = (header(headers, "content-type") or "").partition(";")[0].strip().lower()
    if kind:
        return JSON_HOLD if kind.endswith(("/json", "+json")) else REQUEST_HOLD
    return JSON_HOLD if _JSON_START.match(start) else REQUEST_HOLD


def in_pieces(headers: Headers, body: bytes) -> bool:
    """Whether a request body goes in pieces, past what is held of it whole (most bodies are
    told apart by their size alone)."""
    return len(body) > REQUEST_HOLD and len(body) > hold_limit(headers, body)


class Eraser:
    """A body with every `mark` taken out, as it passes (a multipart body's boundary, which a
    client draws anew for each request): the same as `body.replace(mark, b"")` on the whole,
    however the body arrives."""

    def __init__(self, mark: bytes):
        self._mark = mark
        self._tail = b""  # what might begin a mark the next bytes end

    def feed(self, data: bytes) -> bytes:
        data = self._tail + data
        kept, at = [], 0
        while (found := data.find(self._mark, at)) != -1:
            kept.append(data[at:found])
            at = found + len(self._mark)
        safe = max(at, len(data) - len(self._mark) + 1)
        kept.append(data[at:safe])
        self._tail = data[safe:]
        return b"".join(kept)

    def close(self) -> bytes:
        tail, self._tail = self._tail, b""
        return tail


class Cutter:
    def __init__(self, size: int, *, mask: Callable[[bytes], bytes] | None = None):
        """`mask`: what a piece's bytes become before they are named and stored."""
        self._size = max(size, 1)
        self._mask = mask
        self._pending = bytearray()  # the next piece, as it fills
        self._pending_at = 0.0  # when its first byte arrived (ms)
        self.pieces: list[Piece] = []

    def add(self, data: bytes, at: float) -> list[Blob]:
        """Take `data`, arrived at `at`; the pieces it fills."""
        if not self._pending:
            self._pending_at = at
        self._pending += data
        filled = []
        while len(self._pending) >= self._size:
            filled.append(self._cut(bytes(self._pending[: self._size])))
            del self._pending[: self._size]
            self._pending_at = at  # what is left arrived now
        return filled

    def name(self, piece: Piece, data: bytes, at: float) -> bool:
        """Name a stored piece as it is, when it falls where a piece begins (nothing pending);
        False when it must be cut like any bytes."""
        if self._pending or piece.size != len(data):
            return False
        self.pieces.append(Piece(piece.digest, piece.size, at))
        return True

    def close(self) -> list[Blob]:
        """The last piece, partly filled, if any."""
        last = [self._cut(bytes(self._pending))] if self._pending else []
        self._pending = bytearray()
        return last

    def _cut(self, data: bytes) -> Blob:
        if self._mask is not None:
            data = self._mask(data)
        blob = Blob(hashlib.sha256(data).hexdigest(), data)
        self.pieces.append(Piece(blob.digest, len(data), self._pending_at))
        return blob
