"""Cutting a body too large to hold into pieces, as it passes (the tee's, past its budget).

A piece is `size` bytes (the last one fewer) named by its sha256, the time its first byte
arrived, and its size; its bytes leave as a `Blob` the moment it fills, so what is held is at
most one piece. The same bytes cut at the same place give the same pieces: a replay that
serves stored pieces names them again (`name`) instead of storing them twice.
"""

from __future__ import annotations

import hashlib

from forkpoint.models import Blob, Piece


class Cutter:
    def __init__(self, size: int):
        self._size = max(size, 1)
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
        blob = Blob(hashlib.sha256(data).hexdigest(), data)
        self.pieces.append(Piece(blob.digest, len(data), self._pending_at))
        return blob
