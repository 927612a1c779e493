"""The cassette's records: plain dataclasses shared by the engine, the front doors and the stores.

They carry bytes and numbers only, so the engine can be tested with plain data and every store
(SQLite, text files) reads and writes the same shapes.
"""

from __future__ import annotations

import operator
import os
import time
from dataclasses import dataclass, field, fields
from enum import StrEnum

Headers = tuple[tuple[str, str], ...]

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_run_id() -> str:
    """A run id that sorts by creation time: a ULID, 48 bits of milliseconds then 80 random,
    in Crockford's base32. Made here, not by python-ulid, whose import (it reads its own
    package metadata) cost every command 20 ms before it could start the agent."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10))
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))


class RunStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    CRASHED = "crashed"
    DIVERGED = "diverged"


class Mode(StrEnum):
    """How a session serves its run's traffic (see `forkpoint.engine.session`).

    A run keeps the mode it was made in (record, replay, fork); `resume` is only ever a
    session's: a resumed run goes on in its own mode.
    """

    RECORD = "record"
    REPLAY = "replay"
    FORK = "fork"
    RESUME = "resume"


class Origin(StrEnum):
    """Where an exchange's response came from."""

    LIVE = "live"
    REPLAYED = "replayed"
    MOCKED = "mocked"
    DIVERGED = "diverged"


class Kind(StrEnum):
    LLM = "llm"
    TOOL = "tool"
    OTHER = "other"


def _pickled_by_fields[T](cls: type[T]) -> type[T]:
    """Pickle `cls` as its constructor and its fields' values, read in one C call: the journal
    pickles every exchange on the event loop, and dataclasses' own `__getstate__` is Python
    (17 -> 9 us for an exchange with its summary). Values go by position, so fields are only
    ever added at the end (tests/test_models.py holds the order); an older pickle, short of
    the newest fields, gets their defaults."""
    values = operator.attrgetter(*(spec.name for spec in fields(cls)))  # type: ignore[arg-type]

    def __reduce__(self: T) -> tuple[type[T], tuple[object, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment, method-assign]
    return cls


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider reported them; `cached` and `reasoning` are subsets."""

    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cached + other.cached,
            self.reasoning + other.reasoning,
        )


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    id: str | None = None


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Summary:
    """What a dialect reads off one exchange: enough to list, diff and price it."""

    kind: Kind
    dialect: str
    model: str | None = None
    usage: Usage | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    text: str | None = None


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a streamed response, as it arrived, `offset_ms` after the request was sent."""

    offset_ms: float
    data: bytes


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a response body too large to hold in memory, stored on its own as a blob: its
    sha256, its size, and when its first byte arrived (a replay serves it then)."""

    digest: str
    size: int
    offset_ms: float


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Blob:
    """The bytes of one `Piece`, handed to the recorder before the exchange that names it, so
    a body is never held whole; writing one twice is harmless (content-addressed)."""

    digest: str
    data: bytes


@_pickled_by_fields
@dataclass(slots=True)
class Exchange:
    """One HTTP request and its response inside a run.

    `chunks` is None for a response that was not streamed; for a stream, `response_body` is the
    concatenation of the chunks. Headers are already redacted when an exchange leaves a front door.
    `note` says how a served answer was chosen when it was not an exact match (the request's
    fields a replay set aside), or why forkpoint answered it itself (an optional route).
    A body too large to hold is `response_body` (its first part, held) then `pieces`, whose
    bytes are in the store (`Store.piece`), never in the exchange; a stream's `chunks` then
    cover the held part, and each piece is served as one chunk at its offset.
    """

    run_id: str
    step: int
    method: str
    route: str
    request_headers: Headers
    request_body: bytes
    fingerprint: str
    status: int | None = None
    response_headers: Headers = ()
    response_body: bytes = b""
    chunks: list[Chunk] | None = None
    complete: bool = True
    error: str | None = None
    origin: Origin = Origin.LIVE
    upstream: str | None = None
    started_at: float = field(default_factory=time.time)
    ttfb_ms: float | None = None
    duration_ms: float | None = None
    summary: Summary | None = None
    # The model a fork's change put in the request, where the agent asked for another: the
    # record keeps the agent's body, and a summary with no model in the answer names this one.
    model_sent: str | None = None
    note: str | None = None
    pieces: tuple[Piece, ...] = ()

    @property
    def body_size(self) -> int:
        """The whole response body's length, held part and pieces."""
        return len(self.response_body) + sum(piece.size for piece in self.pieces)

    @property
    def streamed(self) -> bool:
        return self.chunks is not None

    @property
    def content_encoding(self) -> str | None:
        """The request body's encoding (rare, but some clients gzip large requests)."""
        return next((v for k, v in self.request_headers if k.lower() == "content-encoding"), None)


@_pickled_by_fields
@dataclass(slots=True)
class Snapshot:
    """Agent state an adapter gave at a step boundary: the state as the agent held it when
    request `step` arrived (so after steps < `step` completed). A failed pull keeps its error."""

    run_id: str
    step: int
    adapter: str
    content_type: str = "application/octet-stream"
    data: bytes = b""
    error: str | None = None
    taken_at: float = field(default_factory=time.time)
    duration_ms: float | None = None
    size: int = 0

    def __post_init__(self) -> None:
        self.size = self.size or len(self.data)

    @property
    def ok(self) -> bool:
        return self.error is None


@_pickled_by_fields
@dataclass(slots=True)
class Run:
    id: str
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    status: RunStatus = RunStatus.RUNNING
    mode: Mode = Mode.RECORD
    parent_id: str | None = None
    fork_step: int | None = None
    change: dict[str, object] | None = None
    created_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    error: str | None = None
