"""The life of one websocket: what a front door does with each message, decided here.

The upgrade request is decided like any request (`decide`): a recorded 101 is served (the door
accepts the socket itself), a live one is forwarded (the door connects upstream first, and
tells `Connection.live` what the upstream answered); anything else (a divergence, a recorded
refusal) is an HTTP answer. A `Connection` then takes what happens on the socket, in order,
and answers with commands:

- a message from the agent ends the exchange in progress (`Commit`) and is decided as an
  exchange of its own (`engine.frames`): served, its recorded server messages go to the agent
  at their offsets under the pace (`ToAgent`); live, it goes upstream (`ToUpstream`), after a
  `Connect` if the socket was served until now (a fork's step, a replay gone live); a
  divergence sends the agent forkpoint's error as a message and closes (`Close`);
- a message from the upstream joins the exchange in progress and goes to the agent;
- a close from the upstream ends it, marked closed, and closes the agent's side; a close from
  the agent ends it.

Times are seconds on the door's clock; a `ToAgent` carries when to send it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from forkpoint.engine import frames
from forkpoint.engine.config import GATEWAY_HEADERS, EngineConfig
from forkpoint.engine.decide import (
    Await,
    Fail,
    Forward,
    Mock,
    Request,
    Serve,
    decide,
    error_reply,
)
from forkpoint.engine.frames import Frame
from forkpoint.engine.lifecycle import Commit
from forkpoint.engine.pace import Pace
from forkpoint.engine.redaction import DEFAULT, Redaction, end_to_end
from forkpoint.engine.session import Session
from forkpoint.models import Exchange, Headers, Origin

SWITCHED = 101  # the status of every exchange on an open socket, as of its upgrade
POLICY_VIOLATION = 1008  # the close code of a divergence
GOING_AWAY = 1001  # … of an upstream that is gone


@dataclass(frozen=True, slots=True)
class ToAgent:
    frame: Frame
    at: float


@dataclass(frozen=True, slots=True)
class ToUpstream:
    frame: Frame


@dataclass(frozen=True, slots=True)
class Connect:
    """Open the upstream socket (ws:// or wss://) before sending it anything."""

    url: str
    headers: Headers
    protocols: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Close:
    """Close the agent's socket, after every message due before it."""

    code: int
    reason: str


Command = ToAgent | ToUpstream | Connect | Close | Commit


def opens(action: Serve | Forward | Mock | Fail) -> bool:
    """Whether the upgrade's action opens a websocket (else the door answers it over HTTP)."""
    return isinstance(action, Forward) or (
        isinstance(action, Serve) and action.recorded.status == SWITCHED
    )


def socket_url(url: str) -> str:
    return "ws" + url.removeprefix("http") if url.startswith("http") else url


def connect(upgrade: Request, url: str) -> Connect:
    """The upstream handshake for an agent's upgrade request: its own headers (its
    credentials), each hop's handshake fields left to the door."""
    headers = end_to_end(upgrade.headers, drop=GATEWAY_HEADERS | frames.HANDSHAKE)
    return Connect(socket_url(url), headers, frames.protocols(upgrade.headers))


@dataclass(eq=False)
class Connection:
    """One websocket of a session: the exchange in progress and whether upstream is open."""

    session: Session
    config: EngineConfig
    upgrade: Request
    pace: Pace = Pace()
    connected: bool = False
    redaction: Redaction = DEFAULT  # the upgrade's: its secrets are masked in every message
    _masking: Redaction = DEFAULT  # the exchange in progress's
    _current: Exchange | None = None
    _keep: bool = True
    _started: float = 0.0
    _frames: list[tuple[float, Frame]] = field(default_factory=list)  # (offset ms, message)
    _closed: tuple[int, str] | None = None

    @classmethod
    def served(
        cls, session: Session, config: EngineConfig, upgrade: Request, action: Serve, now: float,
        *, pace: Pace = Pace(),
    ) -> tuple[Connection, list[Command]]:  # fmt: skip
        """A socket whose upgrade was served from the recording: the messages the server sent
        on opening go to the agent."""
        connection = cls(session, config, upgrade, pace, redaction=action.redaction)
        record = action.record
        record.status = SWITCHED
        record.response_headers = action.recorded.response_headers
        return connection, connection._serve(record, action.recorded, now, keep=action.keep)

    @classmethod
    def live(
        cls, session: Session, config: EngineConfig, upgrade: Request, action: Forward,
        status: int, headers: Headers, now: float,
    ) -> Connection:  # fmt: skip
        """A socket the door has connected upstream (the upstream answered `status`)."""
        connection = cls(session, config, upgrade, connected=True, redaction=action.redaction)
        record = action.record
        record.status, record.ttfb_ms = status, 0.0
        record.response_headers = action.redaction.headers(end_to_end(headers))
        connection._begin(record, now)
        return connection

    def from_agent(self, frame: Frame, now: float, *, step: int | None = None) -> list[Command]:
        """A message from the agent; `step`: the one the store allocated it (see `decide`)."""
        commands = self._end(now)
        request = Request(frames.WS, self.upgrade.route, frames.message_headers(frame), frame.data)
        action = decide(self.session, request, self.config, step=step, known=self.redaction.known)
        match action:
            case Serve():
                action.record.status = action.recorded.status
                return commands + self._serve(action.record, action.recorded, now, keep=action.keep)
            case Forward():
                if not self.connected:
                    self.connected = True
                    commands.append(self._connect(action.url))
                action.record.status = SWITCHED
                self._begin(action.record, now, masking=action.redaction)
                return [*commands, ToUpstream(Frame(action.body, frame.binary))]
            case Mock() | Await():  # a mock or a park of one message: not over a socket
                fail = _unsupported(action.record)
                return commands + self._fail(fail, now)
            case Fail():
                return commands + self._fail(action, now)

    def from_upstream(self, frame: Frame, now: float) -> list[Command]:
        self._frames.append((self._ms(now), frame))
        return [ToAgent(frame, now)]

    def closed_by_upstream(self, code: int, reason: str, now: float) -> list[Command]:
        self._closed = (code, reason)
        return [*self._end(now), Close(code, reason)]

    def closed_by_agent(self, now: float) -> list[Command]:
        return self._end(now)

    def upstream_failed(self, reason: str, now: float) -> list[Command]:
        """The upstream could not be reached, or broke off: the exchange in progress is cut,
        and the agent's socket closed as the upstream's was."""
        if self._current is not None:
            self._current.complete, self._current.error = False, reason
        return [*self._end(now), Close(GOING_AWAY, "upstream unavailable")]

    # the exchange in progress

    def _begin(
        self, record: Exchange, now: float, *, keep: bool = True, masking: Redaction = DEFAULT
    ) -> None:
        self._current, self._keep, self._started = record, keep, now
        self._frames, self._closed = [], None
        self._masking = self.redaction.knowing(masking.known)

    def _end(self, now: float) -> list[Command]:
        """Commit the exchange in progress: its server messages, its end, its close."""
        record, self._current = self._current, None
        if record is None:
            return []
        # each message whole, masked as a body is; the agent had it as it came. A recording's
        # were masked when recorded: recorded again as served (as the tee does)
        kept = self._frames
        if record.origin is not Origin.REPLAYED:
            kept = [(ms, self._masked(frame)) for ms, frame in kept]
        frames.answered(record, kept, at=self._frames[-1][0] if self._frames else 0.0)
        if self._closed is not None:
            frames.mark_closed(record, *self._closed)
        return [Commit(record)] if self._keep else []

    def _masked(self, frame: Frame) -> Frame:
        if frame.binary:
            return frame
        data = self._masking.body(frame.data, ())
        return frame if data is frame.data else Frame(data, frame.binary)

    def _serve(
        self, record: Exchange, recorded: Exchange, now: float, *, keep: bool
    ) -> list[Command]:
        """Serve a recorded exchange's server messages at their offsets under the pace, and
        its close, if the server closed after them."""
        self._begin(record, now, keep=keep)
        self._frames = [(self._paced(ms), frame) for ms, frame in frames.frames_of(recorded)]
        commands: list[Command] = [ToAgent(f, now + ms / 1000) for ms, f in self._frames]
        closed = frames.closed_with(recorded)
        if closed is None:
            return commands
        self._closed = closed
        return [*commands, *self._end(now), Close(*closed)]

    def _fail(self, fail: Fail, now: float) -> list[Command]:
        """forkpoint's error, as the one message the agent gets before the socket closes."""
        fail.record.status = fail.status
        self._begin(fail.record, now)
        frame = Frame(_error_event(fail.body, fail.status))
        self._frames = [(0.0, frame)]
        self._closed = (POLICY_VIOLATION, "forkpoint divergence")
        return [ToAgent(frame, now), *self._end(now), Close(*self._closed)]

    def _connect(self, url: str) -> Connect:
        return connect(self.upgrade, url)

    def _paced(self, offset_ms: float) -> float:
        factor = self.pace.factor
        return 0.0 if factor is None else offset_ms / factor

    def _ms(self, now: float) -> float:
        return round((now - self._started) * 1000, 3)


def _unsupported(record: Exchange) -> Fail:
    """A mock callable answers HTTP requests; a websocket message it matches is an error."""
    message = "forkpoint: a mock cannot answer a websocket message; mock the upgrade's route"
    headers, body = error_reply(
        record.method, record.route, 400, message, error_type="forkpoint_mock"
    )
    record.origin, record.error = Origin.LIVE, message
    return Fail(400, headers, body, record)


def _error_event(body: bytes, status: int) -> bytes:
    """forkpoint's error body as a websocket event: `{"type": "error", "status": …, …}`, the
    shape the Responses and Realtime APIs send their errors in."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(value, dict):
        return body
    return orjson.dumps({"type": "error", "status": status, **value})
