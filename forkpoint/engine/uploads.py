"""A request body too large to hold (an upload), as it passes: what the record keeps of it, its
pieces and its fingerprint, worked out as its bytes arrive, with memory flat.

A door reads a request body whole up to its hold limit (`engine.pieces.hold_limit`); past
it, it hands every byte to an `Upload` as it reads it, and (`Reading.STREAM`) the upstream
gets the same bytes as they come. The first REQUEST_HOLD bytes are held, masked as a body held
whole is (`Redaction.body`): they are the exchange's `request_body`. The rest is cut into
pieces of PIECE_SIZE, each masked on its own (a value cut across two pieces is not found; a
file's bytes are never changed) and handed on as a blob. The fingerprint reads the held part
and each piece as recorded (`matching.Digest`), so a body read whole (from a file) gets the
same one.

    upload = Upload("POST", route, headers, redaction)
    for data in arriving:
        spill(upload.add(data, at))
    spill(upload.close())
    upload.fingerprint, upload.pieces
"""

from __future__ import annotations

from enum import StrEnum

from forkpoint.engine.config import PIECE_SIZE, EngineConfig, OnDivergence
from forkpoint.engine.dialects import GENERIC, dialect_for
from forkpoint.engine.matching import Digest
from forkpoint.engine.mocks import MockKind, first_match
from forkpoint.engine.pieces import REQUEST_HOLD, Cutter
from forkpoint.engine.redaction import Redaction
from forkpoint.engine.session import Session
from forkpoint.models import Blob, Headers, Mode, Piece


class Upload:
    """One request body in pieces. `route` is as recorded (credentials masked)."""

    def __init__(
        self,
        method: str,
        route: str,
        headers: Headers,
        redaction: Redaction,
        *,
        hold: int = REQUEST_HOLD,
        piece: int = PIECE_SIZE,
    ):
        self._headers = headers
        self._redaction = redaction
        self._hold = hold
        self._head = bytearray()  # the held part as sent, while it fills
        self._held: bytes | None = None  # then as recorded
        self._digest = Digest(method, route, headers)
        self._cutter = Cutter(piece, mask=self._recorded)
        self.size = 0  # bytes taken, as sent
        self.ended = False
        self.fingerprint = ""  # once ended

    @property
    def held(self) -> bytes:
        """The held part as recorded: the exchange's `request_body`. Known once it is full (a
        door hands over an upload past its hold limit) or the body ended."""
        assert self._held is not None, "the held part is not full yet"
        return self._held

    @property
    def pieces(self) -> tuple[Piece, ...]:
        return tuple(self._cutter.pieces)

    def add(self, data: bytes, at: float) -> list[Blob]:
        """Take `data`, arrived `at` ms after the request; the pieces it fills."""
        self.size += len(data)
        if self._held is None:
            room = self._hold - len(self._head)
            self._head += data[:room]
            data = data[room:]
            if len(self._head) < self._hold:
                return []
            self._keep_held()
        return self._cutter.add(data, at) if data else []

    def close(self) -> list[Blob]:
        """The body ended (or broke off where it did): its last piece, and its fingerprint
        known."""
        if self._held is None:
            self._keep_held()
        last = self._cutter.close()
        self.fingerprint = self._digest.hexdigest()
        self.ended = True
        return last

    def _keep_held(self) -> None:
        self._held = self._recorded(bytes(self._head))
        self._head = bytearray()

    def _recorded(self, data: bytes) -> bytes:
        """A part of the body as the record keeps it (masked), read for the fingerprint."""
        kept = self._redaction.body(data, self._headers)
        self._digest.update(kept)
        return kept


class Reading(StrEnum):
    """How a door reads a request body past its hold limit, for its session.

    `stream`: decided at once, the upstream getting the body as it arrives (a live session).
    `drain`: read to its end in pieces, then decided by its fingerprint (a replay, which serves
    it or refuses it). `spool`: the same, a copy kept aside (on disk, not in memory) for the
    upstream, should the session go live on it (a fork before its step, a resume, a replay
    that goes live on a divergence). `hold`: read whole into memory, as a small body is (a
    fork's change rewrites it, a mock reads it).
    """

    STREAM = "stream"
    DRAIN = "drain"
    SPOOL = "spool"
    HOLD = "hold"


def reading(session: Session, method: str, route: str, config: EngineConfig) -> Reading:
    """How a body in pieces to `route` is read before it is decided."""
    change = session.change
    rule = first_match(change.mocks, method, route, config.routes.resolve(route))
    if rule is not None and rule.kind is not MockKind.LIVE:
        return Reading.HOLD
    if change.rewrites() and dialect_for(method, route.partition("?")[0]) is not GENERIC:
        return Reading.HOLD
    if session.live:
        return Reading.STREAM
    if session.mode is Mode.REPLAY and session.on_divergence is OnDivergence.FAIL:
        return Reading.DRAIN  # never live
    return Reading.SPOOL
