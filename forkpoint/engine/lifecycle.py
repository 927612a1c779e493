"""The life of one response, from its first event to the exchange it leaves on record.

Whatever answers a request (the upstream, the cassette, a mock, forkpoint's own error), its
response reaches the agent as the same events: a `Head`, `Body` chunks, then an `End`, a `Cut`
(the source broke off mid-body) or `NoAnswer` (it failed before any head); the front door adds
`HangUp` when the agent goes away. A `Tee` takes them in order and answers with commands: send
the head, a chunk, the end, drop the agent's connection, and `Commit` the exchange, which comes
before the end of the body goes out, so an answer the agent has is an answer on record.

A recorded exchange becomes events too: `serve_plan` lays them out in time under a pace,
ending in the cut or the failure it had when recorded, so a replay shows the agent what the
recording saw. A front door runs one loop for every action: take the next event (from the
upstream, the plan or a mock), feed it to the tee, carry out the commands.

"Before the end" means before the agent can have the whole answer: a body whose length the
head gives is committed as its last chunk arrives, before it is sent (an empty one before its
head); a chunked body before its terminating chunk.

The agent always gets every byte, as it comes, and the record keeps every byte too, with
memory flat: the tee holds the first `hold` bytes of a body (a stream's chunk records count
`CHUNK_COST` each besides their data, so a million tiny chunks are bounded too); past that it
cuts what follows into pieces of `piece` bytes and hands each on as a `Spill` (a blob, named
by its sha256) before the bytes after it go out, so the exchange committed at the end names
its pieces instead of holding them. A stream's chunk records stop at the budget: each piece is
then one chunk, served at the time its first byte arrived. The bytes are exact; only the
timing inside a piece is coarser, which a body of megabytes cannot tell apart.

`limit` caps what is recorded at all (None: nothing is left out). A body over it is recorded
as what was kept, `complete=False`, with an `error` saying how many bytes were not kept, and
the tee says so once with a `Warn`; a replay serves what was kept, then cuts, as for a stream
cut when recorded.

    tee = Tee(record, started=now())
    for event in events:
        for command in tee.feed(event, now()):
            ...  # SendHead, SendBody, SendEnd, Drop, Commit
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from forkpoint.engine.config import DEFAULT_HOLD_BODY, PIECE_SIZE
from forkpoint.engine.encoding import header
from forkpoint.engine.pace import Pace
from forkpoint.engine.pieces import Cutter
from forkpoint.engine.redaction import DEFAULT, REDACTED, Redaction, end_to_end
from forkpoint.models import Blob, Chunk, Exchange, Headers, Piece

# events: what happens to a response


@dataclass(frozen=True, slots=True)
class Head:
    """The status and headers arrived; `streamed` says whether the body is kept as chunks
    (None: decide from the headers, as for a live response)."""

    status: int
    headers: Headers
    streamed: bool | None = None


@dataclass(frozen=True, slots=True)
class Body:
    """Bytes of the body; `piece`, when they are a stored piece being served again, which a
    tee past its budget names as it is instead of storing it again."""

    data: bytes
    piece: Piece | None = None


@dataclass(frozen=True, slots=True)
class End:
    """The whole body has been passed on."""


@dataclass(frozen=True, slots=True)
class Cut:
    """The source broke off in the middle of the body."""

    reason: str


@dataclass(frozen=True, slots=True)
class NoAnswer:
    """The source failed before sending a head: refused, reset, timed out."""

    reason: str


@dataclass(frozen=True, slots=True)
class HangUp:
    """The agent closed its connection."""

    reason: str


Event = Head | Body | End | Cut | NoAnswer | HangUp


@dataclass(frozen=True, slots=True)
class Load:
    """In a serve plan: a piece of the recorded body, whose bytes are in the store. The front
    door reads it as it serves it (off its event loop) and feeds the tee `Body(data, piece)`,
    so a replay never holds a large body whole."""

    piece: Piece

# commands: what the front door does


@dataclass(frozen=True, slots=True)
class SendHead:
    status: int
    headers: Headers


@dataclass(frozen=True, slots=True)
class SendBody:
    data: bytes


@dataclass(frozen=True, slots=True)
class SendEnd:
    pass


@dataclass(frozen=True, slots=True)
class Drop:
    """Close the agent's connection, as the source closed ours: no head, or half a body."""


@dataclass(frozen=True, slots=True)
class Commit:
    """Hand the finished exchange to the recorder."""

    exchange: Exchange


@dataclass(frozen=True, slots=True)
class Spill:
    """Hand one piece of the body to the recorder, ahead of the exchange that will name it."""

    blob: Blob


@dataclass(frozen=True, slots=True)
class Warn:
    """Tell the operator: the body passed the recording limit (once per response)."""

    message: str


Command = SendHead | SendBody | SendEnd | Drop | Commit | Spill | Warn

# What one kept chunk of a stream costs beside its data (the Chunk, its bytes and its offset,
# in memory and in the journal), counted against the budget held and the recording limit.
CHUNK_COST = 128


class _State(Enum):
    WAITING = auto()  # no head yet
    SENDING = auto()
    DONE = auto()


class Tee:
    """One response on its way to the agent, and the exchange it leaves.

    `record` holds the request side (from `decide`); the tee fills in the response as the
    agent gets it. `keep=False` commits nothing (a resume serving steps its run holds).
    `hold`: body bytes held in memory, past which the body leaves in pieces of `piece` bytes;
    `limit`: the most body bytes recorded at all (None: all of them; the agent gets them all).
    `masked`: the body was masked when it was recorded (a cassette's answer served again), so
    it is recorded as served, not read for secrets twice.
    `finish`: when the agent hangs up after the head, read on for at most this many more body
    bytes and record the answer whole (`OnHangup.FINISH`: a live answer, which a resume then
    serves instead of paying for it again); None records it cut where the agent left.
    Times are seconds on the front door's clock; the record keeps milliseconds since `started`.
    """

    def __init__(
        self,
        record: Exchange,
        started: float,
        *,
        keep: bool = True,
        redaction: Redaction = DEFAULT,
        limit: int | None = None,
        hold: int = DEFAULT_HOLD_BODY,
        piece: int = PIECE_SIZE,
        masked: bool = False,
        finish: int | None = None,
    ):
        self.record = record
        self._finish = finish
        self._left_at: int | None = None  # body bytes sent when the agent hung up
        self._masked = masked
        self._started = started
        self._keep = keep
        self._redaction = redaction
        self._limit = limit
        self._hold = hold
        self._chunks: list[Chunk] = []  # a stream's, as it passed, within the budget
        self._whole = bytearray()  # any other body's, within the budget
        self._held = 0  # what the budget has taken
        self._spilling = False  # past the budget: the rest goes in pieces
        self._piece = piece
        self._cutter: Cutter | None = None  # made once the body passes the budget
        self._room = limit  # what the record may still take (None: no end)
        self._unkept = 0  # body bytes past the limit
        self._streamed = False
        self._state = _State.WAITING
        self._length: int | None = None  # the body's length, when the head says it
        self._sent = 0
        self._committed = False

    @property
    def done(self) -> bool:
        return self._state is _State.DONE

    def forgo(self) -> None:
        """Commit nothing from now on: the step is a park's, whose answer is stored as the
        park's (a `--park-after` request given up with no answer when its proxy stops)."""
        self._keep = False

    @property
    def reads_on(self) -> bool:
        """Whether the answer is read to its end if its agent hangs up now, or is being."""
        return self._finish is not None and self._state is _State.SENDING and not self._committed

    @property
    def finishing(self) -> bool:
        """The agent hung up and the answer is being read on, to be recorded whole."""
        return self._left_at is not None and self._state is not _State.DONE

    def feed(self, event: Event, now: float) -> list[Command]:
        if self._state is _State.DONE:
            return []
        at = self._ms(now)
        if self._left_at is not None:
            return self._read_on(event, at)
        if type(event) is Body:  # most events are: a stream's chunks
            kept, sent = self._keep_body(event.data, event.piece, at), self._body(event.data, at)
            return [*kept, *sent] if kept else sent
        match event:
            case Head(status, headers, streamed):
                return self._head(status, headers, streamed, at)
            case Body(data, piece):
                return [*self._keep_body(data, piece, at), *self._body(data, at)]
            case End():
                return [*self._end(at), SendEnd()]
            case Cut(reason) | NoAnswer(reason):
                return [*self._end(at, error=reason), Drop()]
            case HangUp(reason):
                if self.reads_on:
                    self._left_at = self._sent
                    return []
                return self._end(at, error=f"client disconnected: {reason}")
        raise AssertionError(f"not an event: {event!r}")

    def _read_on(self, event: Event, at: float) -> list[Command]:
        """After the agent hung up: keep the rest of the answer, send nothing. A second
        `HangUp` is the door giving up (the time bound): what came is recorded, cut."""
        assert self._left_at is not None and self._finish is not None
        left = f"the agent hung up after {self._left_at} body bytes"
        match event:
            case Body(data, piece):
                if self._sent - self._left_at + len(data) > self._finish:
                    return self._end(at, error=f"{left}; the rest passed {self._finish} "
                                                "bytes and was not read (--on-hangup)")  # fmt: skip
                self._sent += len(data)
                return self._keep_body(data, piece, at)
            case End():
                self.record.note = (
                    f"{left}; the rest was read from the upstream and kept for a resume "
                    "(--on-hangup finish)"
                )
                return self._end(at)
            case Cut(reason) | NoAnswer(reason):
                return self._end(at, error=f"{left}; then {reason}")
            case HangUp(reason):
                return self._end(at, error=f"{left}; reading on stopped: {reason}")
            case Head():
                raise ValueError("a response has one head")
        raise AssertionError(f"not an event: {event!r}")

    def _head(
        self, status: int, headers: Headers, streamed: bool | None, at: float
    ) -> list[Command]:
        if self._state is not _State.WAITING:
            raise ValueError("a response has one head")
        self._state = _State.SENDING
        passed = end_to_end(headers)
        record = self.record
        record.status, record.ttfb_ms = status, at
        record.response_headers = self._redaction.headers(passed)
        length = header(headers, "content-length")
        self._streamed = _streams(headers, length) if streamed is None else streamed
        self._length = _length(status, record.method, headers, length)
        # A recorded response keeps a masked credential's name: the agent never gets the mask.
        send = SendHead(status, tuple([pair for pair in passed if pair[1] != REDACTED]))
        if self._length == 0:  # the head is the whole answer
            return [*self._commit(at), send]
        return [send]

    def _keep_body(self, data: bytes, piece: Piece | None, at: float) -> list[Command]:
        """Record what the limit leaves room for: held within the budget, in pieces past it.
        The first byte past the limit warns."""
        if not data:
            return []
        if self._room is None and not self._spilling:  # most: held whole, nothing to say
            cost = CHUNK_COST if self._streamed else 0
            if self._held + len(data) + cost <= self._hold:
                self._held += len(data) + cost
                if self._streamed:
                    self._chunks.append(Chunk(at, data))
                else:
                    self._whole += data
                return []
        cost = CHUNK_COST if self._streamed and not self._spilling else 0
        kept = data
        if self._room is not None and len(data) + cost > self._room:
            kept = data[: max(self._room - cost, 0)]
        commands = self._store(kept, piece if kept is data else None, at)
        if self._room is not None:
            self._room -= len(kept) + (cost if kept else 0)
        if len(kept) == len(data):
            return commands
        self._room = 0  # nothing more is kept, however small
        first = self._unkept == 0
        self._unkept += len(data) - len(kept)
        if not first:
            return commands
        record = self.record
        return [*commands, Warn(
            f"run {record.run_id} step {record.step}: the response body passed the "
            f"{self._limit} byte recording limit (--max-record-body); the agent gets all of "
            "it, the cassette the first part, marked incomplete")]  # fmt: skip

    def _store(self, kept: bytes, piece: Piece | None, at: float) -> list[Command]:
        """Hold `kept` within the budget; past it, cut it into pieces to spill."""
        if not kept:
            return []
        cost = CHUNK_COST if self._streamed else 0
        if not self._spilling and self._held + len(kept) + cost <= self._hold:
            self._held += len(kept) + cost
            if self._streamed:
                self._chunks.append(Chunk(at, kept))
            else:
                self._whole += kept
            return []
        self._spilling = True
        if not self._keep:
            return []  # nothing of it is recorded: nothing to hold for it
        if self._cutter is None:
            self._cutter = Cutter(self._piece)
        if piece is not None and self._cutter.name(piece, kept, at):
            return []  # a stored piece served again: named as it is, not stored twice
        return [Spill(blob) for blob in self._cutter.add(kept, at)]

    def _body(self, data: bytes, at: float) -> list[Command]:
        if not data:
            return []
        self._sent += len(data)
        if self._length is not None and self._sent >= self._length:  # the last of it
            return [*self._commit(at), SendBody(data)]
        return [SendBody(data)]

    def _end(self, at: float, *, error: str | None = None) -> list[Command]:
        self._state = _State.DONE
        return self._commit(at, error=error)

    def _commit(self, at: float, *, error: str | None = None) -> list[Command]:
        """The exchange as the agent has it, committed once: at the end of the response, or
        as its last byte (of a length the head gave) goes out. Its last piece goes first."""
        if self._committed:
            return []
        self._committed = True
        cutter = self._cutter
        spills: list[Command] = [] if cutter is None else [Spill(b) for b in cutter.close()]
        record = self.record
        record.duration_ms = at
        record.pieces = () if cutter is None else tuple(cutter.pieces)
        # a token endpoint's answer is a secret too, whole or streamed (an MCP tool's); a
        # body in pieces (megabytes) is no token's, and its held part alone is no JSON
        as_is = self._masked or bool(record.pieces)
        if self._streamed:  # chunks as they came, but for a masked value
            chunks = self._chunks
            if not as_is:
                chunks = self._redaction.chunks(chunks, record.response_headers)
            masked = chunks is not self._chunks
            record.response_body = b"".join([chunk.data for chunk in chunks])
            record.chunks = chunks
        else:
            body, self._whole = bytes(self._whole), bytearray()
            record.response_body = (
                body if as_is else self._redaction.body(body, record.response_headers)
            )
            masked = record.response_body is not body
            record.chunks = None
        if self._unkept:
            over = (f"response body over the {self._limit} byte recording limit "
                    f"(--max-record-body): {self._unkept} bytes not recorded")  # fmt: skip
            error = over if error is None else f"{error} ({over})"
        if error is not None:  # an upstream's error may name a URL with its key in it
            record.complete, record.error = False, self._redaction.text(error)
        if masked and record.status is not None:  # the head on record frames the body on record
            record.response_headers = framed(record, record.body_size)
        return [*spills, Commit(record)] if self._keep else []

    def _ms(self, now: float) -> float:
        return round((now - self._started) * 1000, 3)


def _length(
    status: int, method: str, headers: Headers, length: str | None = None
) -> int | None:
    """How many body bytes the agent waits for, when that is known (`length`: the
    Content-Length header's value, if the caller has looked it up)."""
    if method == "HEAD" or status in (204, 304) or status < 200:
        return 0
    try:
        return int(length or header(headers, "content-length") or "")
    except ValueError:
        return None


STREAM_TYPES = ("text/event-stream", "application/x-ndjson")  # SSE; Ollama's JSON lines


def is_stream(headers: Headers) -> bool:
    """Whether a live response's body is kept chunk by chunk: an event stream, JSON lines, or
    a body of unknown length."""
    return _streams(headers, header(headers, "content-length"))


def _streams(headers: Headers, length: str | None) -> bool:
    """`is_stream`, given the Content-Length's value (`length`)."""
    content_type = header(headers, "content-type") or ""
    return content_type.startswith(STREAM_TYPES) or length is None


# where events come from, besides the upstream

Planned = Event | Load
Timed = tuple[float, Planned]  # (seconds after the request to deliver it, the event)


def serve_plan(recorded: Exchange, pace: Pace = Pace()) -> list[Timed]:
    """The events that serve `recorded` again, each with its delay under `pace`: the head at
    its time to first byte, each chunk at its offset, each piece (a `Load`) at its own, then
    the end, or the cut or failure the recording saw."""

    def at(offset_ms: float | None) -> float:
        return 0.0 if pace.factor is None or offset_ms is None else offset_ms / 1000 / pace.factor

    if recorded.status is None:
        reason = recorded.error or "no response was recorded"
        return [(at(recorded.duration_ms), NoAnswer(reason))]
    if recorded.chunks is not None:
        held = recorded.chunks
    else:
        held = [Chunk(recorded.ttfb_ms or 0.0, recorded.response_body)]
    served = sum(len(chunk.data) for chunk in held) + sum(p.size for p in recorded.pieces)
    headers = framed(recorded, served)
    plan: list[Timed] = [(at(recorded.ttfb_ms), Head(recorded.status, headers, recorded.streamed))]
    for chunk in held:  # never earlier than what came before it
        if chunk.data or not recorded.pieces:
            plan.append((max(at(chunk.offset_ms), plan[-1][0]), Body(chunk.data)))
    for piece in recorded.pieces:
        plan.append((max(at(piece.offset_ms), plan[-1][0]), Load(piece)))
    ending: Event = End() if recorded.complete else Cut(recorded.error or "cut when recorded")
    plan.append((plan[-1][0], ending))
    return plan


def framed(recorded: Exchange, served: int) -> Headers:
    """The recorded head framed for the `served` body bytes a replay sends: its bytes may not
    be the upstream's (a secret masked as it was recorded, a HAR's content decoded, an MCP
    answer renamed), so a Content-Length the head had becomes theirs, where it stood. An
    answer cut when recorded keeps a length past what is served (the agent sees it come up
    short, as it did), else goes without one (chunked, cut before its end).
    Transfer-Encoding is the hop's own, never a record's."""
    assert recorded.status is not None
    headers = recorded.response_headers
    length = _length(recorded.status, recorded.method, headers)
    if length == 0:
        return headers  # no body: a HEAD's length is its GET's
    if not recorded.complete and length is not None and length > served:
        return headers
    if recorded.complete and header(headers, "content-length") is not None:
        return _fit(headers, served)
    return tuple([(k, v) for k, v in headers if k.lower() not in _FRAMING])


def _fit(headers: Headers, size: int) -> Headers:
    """`headers` with one Content-Length, `size`, where the first stood (else last), and no
    Transfer-Encoding."""
    fitted: list[tuple[str, str]] = []
    placed = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == "content-length" and not placed:
            fitted.append((name, str(size)))
            placed = True
        elif lowered not in _FRAMING:
            fitted.append((name, value))
    return tuple(fitted if placed else [*fitted, ("content-length", str(size))])


_FRAMING = frozenset({"content-length", "transfer-encoding"})


def answer(status: int, headers: Headers, body: bytes) -> list[Event]:
    """The events of a response known whole (forkpoint's own error, a mock's answer), framed
    by the length of its body whatever the headers given said."""
    headers = _fit(headers, len(body))
    return [Head(status, headers, streamed=False), Body(body), End()]
