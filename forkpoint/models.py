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
from typing import SupportsIndex

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
    # its agent waits on an answer with no process: see `Park`
    PARKED = "parked"


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
    # a parked request's answer delivered to forkpoint (a person, a deadline, `wake`), not
    # its upstream's
    ANSWERED = "answered"


class Kind(StrEnum):
    LLM = "llm"
    TOOL = "tool"
    OTHER = "other"


def _pickled_by_fields[T](cls: type[T]) -> type[T]:
    """Pickle `cls` as its constructor and its fields' values, read in one C call: the journal
    pickles every exchange on the event loop, and dataclasses' own `__getstate__` is Python
    (17 -> 9 us for an exchange with its summary; 6 since it is `__reduce_ex__` itself). Values
    go by position, so fields are only ever added at the end (tests/test_models.py holds the
    order); an older pickle, short of the newest fields, gets their defaults."""
    values = operator.attrgetter(*(spec.name for spec in fields(cls)))  # type: ignore[arg-type]

    def __reduce_ex__(self: T, protocol: SupportsIndex) -> tuple[type[T], tuple[object, ...]]:
        return cls, values(self)

    # pickle asks for `__reduce_ex__`: object's own, finding a `__reduce__` of ours to call,
    # cost 2.5 us an exchange more
    cls.__reduce_ex__ = __reduce_ex__  # type: ignore[assignment, method-assign]
    return cls


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the provider reported them. `input` is the whole prompt: `cached` (read
    from a prompt cache), `cache_write` (written to one, priced apart by Anthropic) and `audio`
    (audio tokens, as a transcription's) are parts of it; `reasoning` is a part of `output`.
    `audio_seconds` is what a model billed by the minute (whisper-1) heard."""

    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0
    cache_write: int = 0
    audio: int = 0
    audio_seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cached + other.cached,
            self.reasoning + other.reasoning,
            self.cache_write + other.cache_write,
            self.audio + other.audio,
            self.audio_seconds + other.audio_seconds,
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
    cover the held part, and each piece is served as one chunk at its offset. A request body
    too large to hold (an upload) is alike: `request_body` then `request_pieces`, and its
    `fingerprint` is then that of the whole body, read as it passed (`engine.uploads`).
    A fork's change rewrites a request on its way upstream: `request_body` and
    `request_headers` are what went, and `asked_body` the body as the agent sent it (decoded,
    masked), which matching reads (`asked`): the same agent asks it again.
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
    # The model a fork's change put in the request, where the agent asked for another (in the
    # body, or the path of Gemini and Azure, which the route keeps as the agent's): a summary
    # with no model in the answer names this one.
    model_sent: str | None = None
    note: str | None = None
    pieces: tuple[Piece, ...] = ()
    request_pieces: tuple[Piece, ...] = ()
    asked_body: bytes | None = None

    @property
    def asked(self) -> bytes:
        """The request body as its agent sent it, which matching reads: `asked_body` where a
        fork's change rewrote what went upstream, else `request_body`."""
        return self.request_body if self.asked_body is None else self.asked_body

    @property
    def body_size(self) -> int:
        """The whole response body's length, held part and pieces."""
        return len(self.response_body) + sum(piece.size for piece in self.pieces)

    @property
    def request_size(self) -> int:
        """The whole request body's length (as recorded), held part and pieces."""
        return len(self.request_body) + sum(piece.size for piece in self.request_pieces)

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
    # The forkpoint process recording it (`runtime.recording.owners`: host, boot, journal),
    # so a reader can tell a run whose process is gone; None for a run several proxies serve
    # (one a request names) or one recorded before owners were kept.
    owner: str | None = None


def new_ticket() -> int:
    """A request's provisional step in a run several proxies may serve (see `Ticket`): negative,
    so it is never taken for a step, and random, so no two proxies make the same one."""
    return -1 - int.from_bytes(os.urandom(8)) % (1 << 62)


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Ticket:
    """A request of a run several proxies may serve, handed to the recorder as it arrives so
    the store numbers it in arrival order when it writes it (`Store.number`). Until then its
    exchange and snapshots carry `ticket` as their step: the request is answered without
    waiting on the store, whether it takes writes or not."""

    run_id: str
    ticket: int


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Ending:
    """A run's end as its proxy saw it, written through the recorder like everything else, so
    stopping never waits on a store that takes no writes. The store applies it only to a run
    still `running` (`Store.end_run`): a late merge of an old journal
    never ends a run that has ended since."""

    run_id: str
    status: RunStatus
    error: str | None = None
    fork_step: int | None = None
    # a fork's change as it turned out (the parts that touched no request marked), else None
    change: dict[str, object] | None = None
    ended_at: float = field(default_factory=time.time)


class Waker(StrEnum):
    """Where a parked run's agent starts again once its answer is in the store."""

    LOCAL = "local"  # the proxy that sees the answer starts it as a local process
    FOREGROUND = "foreground"  # `forkpoint answer` starts it on its own terminal (`record -- CMD`)
    HOOK = "hook"  # an `--on-wake` command starts it elsewhere (a Kubernetes Job, a sandbox)
    WORKERS = "workers"  # a job on the PostgreSQL queue (`forkpoint.jobs`)


@dataclass(frozen=True, slots=True)
class Launch:
    """How a run's agent was started, kept with the run so a parked run can be woken by any
    process that reads the store. Never a secret: `env` holds the agent's non-secret variables
    only, and `needs` names the secret ones, which a wake takes from its own environment."""

    run_id: str
    command: tuple[str, ...]
    cwd: str
    env: Headers = ()
    needs: tuple[str, ...] = ()
    # the proxy options a wake resumes with (upstream, park rules, matching), JSON data
    options: dict[str, object] = field(default_factory=dict)
    waker: Waker = Waker.LOCAL
    on_wake: tuple[str, ...] = ()  # the hook's command line, for `Waker.HOOK`


class ParkState(StrEnum):
    """A park's life, each step one conditional write that a second writer cannot also make:
    parked -> answered -> waking -> woken."""

    PARKED = "parked"  # waits for its answer
    ANSWERED = "answered"  # the answer is the step's exchange; the agent is not started yet
    WAKING = "waking"  # one waker claimed it (`ParkStore.claim_wake`)
    WOKEN = "woken"  # the agent runs again (or ran: the run's status tells)


@dataclass(slots=True)
class Park:
    """A parked run's pending request: what it waits on, since when, until when, and who
    answered it when. `request` is the pending step's exchange with no response yet (masked,
    as everything stored is); its answer is stored as that step's exchange."""

    request: Exchange
    waits_on: str  # for people: "rule 'POST /approvals*'" or "upstream api.x.com after 30s"
    parked_at: float = field(default_factory=time.time)
    deadline: float | None = None
    state: ParkState = ParkState.PARKED
    answered_at: float | None = None
    answered_by: str | None = None  # "upstream", "deadline", "cli alice@host", "http 10.0.0.7"
    woken_at: float | None = None

    @property
    def run_id(self) -> str:
        return self.request.run_id

    @property
    def step(self) -> int:
        return self.request.step
