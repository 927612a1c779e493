"""The front door: an aiohttp server that turns requests into engine actions and carries them out.

A request becomes the engine's `Request`; `decide` answers with an action; the action becomes
a stream of response events (from the upstream, from a serve plan over the cassette, from a
mock or from forkpoint's own error), and a `Tee` turns each event into what to send the agent
and when to commit the exchange. The gateway only translates and carries out: every rule of a
response's life (tee, end, cut, hang-up, pacing, re-cutting, failures) is the engine's.

Requests reach it two ways. An agent's base URL points here (`/v1/...`, `/anthropic/...`,
`/r/RUN/...`); and the interceptor (`forkpoint.doors.interceptor`) hands it every request it
intercepts, marked with the interceptor's secret and the request's origin, so both ways share
this one door.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, NamedTuple, Protocol, assert_never
from urllib.parse import urlsplit

from aiohttp import HttpVersion11, web

from forkpoint.doors.auth import tokens
from forkpoint.doors.control import PREFIX as CONTROL_PREFIX
from forkpoint.doors.control import Control
from forkpoint.doors.mocks import run_mock
from forkpoint.doors.pieces import Spilling, served
from forkpoint.doors.ports import Pieces, Recorder, Sender, Sessions, Snapshots
from forkpoint.doors.server_log import SERVER_LOG
from forkpoint.doors.sockets import Sockets
from forkpoint.engine.config import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_BODY,
    INTERCEPT_HEADER,
    ORIGIN_HEADER,
    RUN_HEADER,
    EngineConfig,
    Routes,
)
from forkpoint.engine.decide import (
    Action,
    Fail,
    Forward,
    Mock,
    Request,
    Serve,
    decide,
    error_reply,
    snapshot_point,
)
from forkpoint.engine.encoding import UndecodableBody, check_body, decode_headers, header
from forkpoint.engine.frames import is_upgrade
from forkpoint.engine.lifecycle import (
    Body,
    Command,
    Commit,
    Cut,
    Drop,
    End,
    Event,
    HangUp,
    Head,
    Load,
    NoAnswer,
    SendBody,
    SendEnd,
    SendHead,
    Spill,
    Tee,
    Warn,
    answer,
    serve_plan,
)
from forkpoint.engine.mocks import MockRequest
from forkpoint.engine.pace import Pace
from forkpoint.engine.session import Session
from forkpoint.engine.websocket import opens
from forkpoint.errors import CassetteError, ConfigError, UpstreamError
from forkpoint.models import Headers, Origin

log = logging.getLogger(__name__)

RUN_PREFIX = "/r/"

# How aiohttp's server must run the gateway (`web.AppRunner(gateway.app, **SERVER_OPTIONS)`):
# request bodies as sent (aiohttp would decompress them, and the upstream and the cassette would
# get plain bytes still labelled gzip), and a handler cancelled when its agent hangs up, so a
# stalled upstream request is cancelled and its connection released; a malformed request logged
# in one line.
SERVER_OPTIONS: dict[str, Any] = {
    "auto_decompress": False,
    "handler_cancellation": True,
    "logger": SERVER_LOG,
}
# How long an answer that was under way when its agent left may still run (s).
HANGUP_GRACE = 2.0
# The largest served body a client's own thread works out whole (`Gateway.served_here`), bytes.
SERVED_HERE = 1 << 20


class Gateway:
    def __init__(
        self,
        *,
        sessions: Sessions,
        config: EngineConfig,
        sender: Sender,
        recorder: Recorder,
        snapshots: Snapshots,
        pieces: Pieces,
        pace: Pace = Pace(),
        max_body: int = DEFAULT_MAX_BODY,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
        intercept_secret: str | None = None,
        adapter_hosts: Iterable[str] = (),
        token: str | None = None,
    ):
        self.sessions = sessions
        self.config = config
        self.sender = sender
        self.recorder = recorder
        self.snapshots = snapshots
        self.pieces = pieces
        self._spilling = Spilling(recorder)
        self.control = Control(snapshots, adapter_hosts=adapter_hosts)
        self.sockets = Sockets(sender=sender, recorder=recorder, pace=pace, sessions=sessions)
        self.pace = pace
        self.max_body = max_body
        self.client_timeout = client_timeout
        self._secret = intercept_secret
        # the token (doors/auth.py) is checked and taken off before `handle` reads anything
        middlewares = tokens(token, intercept_secret)
        self.app = web.Application(client_max_size=max_body, middlewares=middlewares)
        self.app.router.add_route("*", "/{tail:.*}", self.handle, expect_handler=self._expect)
        self.app.on_shutdown.append(self.sockets.close_all)  # open websockets end the stop

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp's handler: the request read off its connection, then `answer`ed over it."""
        started = time.perf_counter()
        config, run_id, route = self._target(request.raw_path, request.headers.get)
        try:
            body = await self._body(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(request.method, route, *self._too_large())
        except TimeoutError:
            message = (
                f"forkpoint: the request body stalled for {self.client_timeout:g} s "
                "(--client-timeout)"
            )
            response = _error(request.method, route, 408, message, "forkpoint_client_timeout")
            response.force_close()
            return response
        reply = _Reply(request)
        incoming = Incoming(request.method, route, decode_headers(request.raw_headers), body)
        await self.answer(incoming, reply, config, run_id, started=started, web_request=request)
        # After a drop before any head there is nothing to send: aiohttp finds the
        # connection closed and sends nothing.
        return reply.response or web.Response(status=502)

    def target(self, raw_path: str, headers: Headers) -> tuple[EngineConfig, str | None, str]:
        """The engine config, run id and route of a request a door other than aiohttp's took."""
        return self._target(raw_path, lambda name: header(headers, name))

    def takes_without_socket(self, route: str, headers: Headers) -> bool:
        """Whether a request can be answered with no connection under it: not a websocket
        upgrade nor a control endpoint, which answer over aiohttp's own."""
        return not route.startswith(CONTROL_PREFIX) and not is_upgrade(headers)

    def _refusal(self, body: bytes, headers: Headers) -> tuple[int, str, str] | None:
        """The status, message and error type a request body is refused with: too large, or
        not what its Content-Encoding says; None for a body the engine may take."""
        if len(body) > self.max_body:
            return self._too_large()
        try:
            check_body(body, header(headers, "content-encoding"))
        except UndecodableBody as error:
            message = f"forkpoint: the request body is not what its Content-Encoding says: {error}"
            return 400, message, "forkpoint_bad_encoding"
        return None

    def _too_large(self) -> tuple[int, str, str]:
        message = f"forkpoint: request body over the {self.max_body} byte limit (--max-body)"
        return 413, message, "forkpoint_body_too_large"

    async def answer(
        self,
        incoming: Incoming,
        reply: Reply,
        config: EngineConfig,
        run_id: str | None,
        *,
        started: float,
        web_request: web.Request | None = None,
    ) -> None:
        """Answer a request read whole, over `reply`: its session, the engine's action, the
        tee. `web_request` is aiohttp's, which control endpoints and websockets answer over;
        a door without one sends neither (see `takes_without_socket`)."""
        method, route, headers, body = incoming
        refusal = self._refusal(body, headers)
        if refusal is not None:
            return await _refuse(reply, method, route, *refusal)
        try:
            session = await self.sessions.get(run_id)
        except ConfigError as error:
            message = f"forkpoint: {error}"
            return await _refuse(reply, method, route, 400, message, "forkpoint_run")
        except CassetteError as error:  # a run named by the request, made in the store
            message = f"forkpoint: cannot open run {run_id}: {error}"
            log.warning("%s", message)
            return await _refuse(reply, method, route, 503, message, "forkpoint_store")
        if route.startswith(CONTROL_PREFIX) and web_request is not None:
            reply.response = await self.control.handle(
                web_request, session, route, body, named=run_id is not None
            )
            return None
        try:
            step = await self.sessions.allocate(session)
        except CassetteError as error:
            message = f"forkpoint: no step for this request in run {session.run.id}: {error}"
            log.warning("%s", message)
            return await _refuse(reply, method, route, 503, message, "forkpoint_store")
        ours = Request(method, route, headers, body)
        decided = Decided(session, ours, decide(session, ours, config, step=step))
        await self.respond(decided, reply, config, started=started, web_request=web_request)

    def decided_here(
        self, incoming: Incoming, config: EngineConfig, run_id: str | None
    ) -> Decided | None:
        """A request decided on the calling thread (a client's, in this process), when its
        session is open, replaying and numbering its own steps: nothing to wait for. None
        leaves it to `answer`, on the loop."""
        method, route, headers, body = incoming
        if not self.takes_without_socket(route, headers):
            return None
        session = self.sessions.ready(run_id)
        if session is None or session.live or self._refusal(body, headers) is not None:
            return None
        ours = Request(method, route, headers, body)
        return Decided(session, ours, decide(session, ours, config))

    def served_here(
        self, action: Action, config: EngineConfig, started: float
    ) -> list[Command] | None:
        """The tee's commands for the whole answer to `action`, worked out on the calling
        thread, when it serves a recorded answer with nothing to wait for: no pace, no piece
        to read, at most SERVED_HERE bytes. None: `respond` carries it out, on the loop."""
        if not isinstance(action, Serve) or self.pace.factor is not None:
            return None
        recorded = action.recorded
        if recorded.pieces or len(recorded.response_body) > SERVED_HERE:
            return None
        tee = self._tee(action, config, started)
        now = time.perf_counter()
        commands: list[Command] = []
        for _, event in serve_plan(recorded):
            assert not isinstance(event, Load)  # a body with no pieces
            commands += tee.feed(event, now)
        return commands

    @staticmethod
    def _tee(action: Action, config: EngineConfig, started: float) -> Tee:
        keep = not isinstance(action, Serve) or action.keep
        # a cassette's answer was masked when recorded: recorded again as served
        masked = isinstance(action, Serve) and action.record.origin is Origin.REPLAYED
        return Tee(
            action.record, started, keep=keep, redaction=config.redaction,
            limit=config.max_record_body, masked=masked,
        )  # fmt: skip

    async def respond(
        self,
        decided: Decided,
        reply: Reply,
        config: EngineConfig,
        *,
        started: float,
        web_request: web.Request | None = None,
    ) -> None:
        """Carry out a decided request over `reply`: its action's events through the tee."""
        session, ours, action = decided
        events = None
        if (
            web_request is not None
            and is_upgrade(ours.headers)
            and isinstance(action, Serve | Forward)
            and opens(action)
        ):
            opened = await self.sockets.open(web_request, session, ours, action, config)
            if isinstance(opened, web.StreamResponse):
                reply.response = opened
                return None
            events = _listed(opened)  # the upstream refused the websocket: its answer, over HTTP
        tee = self._tee(action, config, started)
        llm = snapshot_point(action)
        pulls = (
            []
            if llm is None
            else self.snapshots.on_request(session.run.id, action.record.step, llm=llm)
        )
        events = events or self._events(action, started)
        # started at once, not on the loop's next pass: it runs to its first wait right here
        responding = asyncio.Task(
            self._respond(reply, tee, events, pulls), loop=asyncio.get_running_loop(),
            eager_start=True,
        )  # fmt: skip
        try:
            return await asyncio.shield(responding)
        except asyncio.CancelledError:  # the agent hung up: its door cancels the answer
            if tee.record.status is not None:
                # An answer under way goes on until its next write fails, as it would without
                # forkpoint (an SDK that leaves on `[DONE]` got a complete answer), for a while.
                await asyncio.wait([responding], timeout=HANGUP_GRACE)
            responding.cancel()  # a stalled upstream request is given up and its connection freed
            await asyncio.wait([responding])
            raise

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue` gets its continue, as from aiohttp; any other expectation a
        417 in the API's shape (aiohttp's own answer failed on a value not in UTF-8: a 500)."""
        if request.version != HttpVersion11:
            return None
        if request.headers.get("expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer's size counts from its own head
            return None
        _, _, route = self._target(request.raw_path, request.headers.get)
        message = "forkpoint: the request's Expect header is not one it can meet (100-continue)"
        return _error(request.method, route, 417, message, "forkpoint_expect")

    async def _body(self, request: web.Request) -> bytes:
        """The request body, whole; TimeoutError when the agent stalls in it past the client
        timeout (the clock starts again at each piece, so a slow upload is not cut)."""
        content = request.content
        if content.is_eof():  # it came whole with the head (most do): nothing to wait for
            data = content.read_nowait()
            self._within_max_body(len(data))
            return data
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self.client_timeout) as clock:
            parts: list[bytes] = []
            size = 0
            while data := await content.readany():
                size += len(data)
                self._within_max_body(size)
                parts.append(data)
                clock.reschedule(loop.time() + self.client_timeout)
        return b"".join(parts)

    def _within_max_body(self, size: int) -> None:
        if size > self.max_body:
            raise web.HTTPRequestEntityTooLarge(max_size=self.max_body, actual_size=size)

    def _target(
        self, raw_path: str, get: Callable[[str], str | None]
    ) -> tuple[EngineConfig, str | None, str]:
        """The engine config, run id and route of a request (`get` reads a header): the
        interceptor's carry the origin they were going to, which alone serves them; the
        agents' are as they came."""
        origin = get(ORIGIN_HEADER)
        secret = get(INTERCEPT_HEADER) or ""
        if origin is not None and self._secret and hmac.compare_digest(secret, self._secret):
            netloc = urlsplit(origin).netloc
            # `--route HOST=URL` sends a host's intercepted traffic elsewhere (a mock server)
            routes = Routes(prefixes={netloc: self.config.routes.prefixes.get(netloc, origin)})
            route = f"/{netloc}{raw_path}"
            return dataclasses.replace(self.config, routes=routes), get(RUN_HEADER), route
        run_id, route = split_run(_path_of(raw_path), get(RUN_HEADER))
        return self.config, run_id, route

    async def _respond(
        self, reply: Reply, tee: Tee, events: AsyncIterator[Event], pulls: list[asyncio.Task[None]]
    ) -> None:
        """Feed the action's events to the tee and carry out its commands, until the response
        ends or the agent leaves."""
        try:
            async for event in events:
                if pulls and isinstance(event, Head):
                    await asyncio.gather(*pulls)  # the agent's state is read before it is answered
                for command in tee.feed(event, time.perf_counter()):
                    await self._carry_out(command, reply)
        except (ConnectionError, asyncio.CancelledError) as error:
            # the agent hung up (aiohttp cancels the handler of a closed connection)
            for command in tee.feed(
                HangUp(str(error) or type(error).__name__), time.perf_counter()
            ):
                await self._carry_out(command, reply)
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def _carry_out(self, command: Command, reply: Reply) -> None:
        match command:
            case SendHead(status, headers):
                await reply.head(status, headers)
            case SendBody(data):
                await reply.body(data)
            case SendEnd():
                await reply.end()
            case Drop():
                reply.drop()
            case Commit(exchange):
                self.recorder.submit(exchange)
            case Spill(blob):  # journaled before the bytes after it go out
                await self._spilling.spill(blob)
            case Warn(message):
                log.warning("forkpoint: %s", message)
            case _:
                assert_never(command)

    def _events(self, action: Action, started: float) -> AsyncIterator[Event]:
        match action:
            case Forward():
                return self._forwarded(action)
            case Serve():
                return served(action.recorded, self.pace, started, self.pieces)
            case Mock():
                return self._mocked(action)
            case Fail():
                return _listed(answer(action.status, action.headers, action.body))
            case _:
                assert_never(action)

    async def _forwarded(self, action: Forward) -> AsyncIterator[Event]:
        request = action.record
        try:
            upstream = await self.sender.send(
                request.method, action.url, action.headers, action.body
            )
        except UpstreamError as error:
            yield NoAnswer(f"forkpoint: {error}")
            return
        try:
            yield Head(upstream.status, upstream.headers)
            try:
                async for data in upstream.chunks():
                    yield Body(data)
            except UpstreamError as error:
                yield Cut(str(error))
                return
            yield End()
        finally:
            upstream.release()

    async def _mocked(self, action: Mock) -> AsyncIterator[Event]:
        ours, record = action.request, action.record
        try:
            mocked = await run_mock(
                action.rule, MockRequest(ours.method, ours.route, ours.headers, ours.body)
            )
        except Exception as error:  # the user's code: any failure becomes a clear 500
            message = f"forkpoint: mock {action.rule.text!r} raised {type(error).__name__}: {error}"
            log.warning("%s (run %s, step %d)", message, record.run_id, record.step)
            record.error = message
            headers, body = error_reply(
                record.method, record.route, 500, message, error_type="forkpoint_mock"
            )
            events = answer(500, headers, body)
        else:
            events = answer(mocked.status, mocked.headers, mocked.body)
        for event in events:
            yield event


async def _listed(events: list[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event


def split_run(raw_path: str, run_header: str | None) -> tuple[str | None, str]:
    """The run id named by a `/r/<id>/` prefix (or the run header) and the route after it."""
    if raw_path.startswith(RUN_PREFIX):
        run_id, _, rest = raw_path[len(RUN_PREFIX) :].partition("/")
        return run_id, "/" + rest
    return run_header, raw_path


def _path_of(target: str) -> str:
    """The path and query of a request target. An absolute-form target
    (`GET http://host/path`, as a client sends to a forward proxy) is taken for its path
    alone: the gateway never goes where a request line says, only where its routes do."""
    if target.startswith("/"):
        return target
    parts = urlsplit(target)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


class Decided(NamedTuple):
    """A request and the action decided for it, in its session."""

    session: Session
    request: Request
    action: Action


class Incoming(NamedTuple):
    """A request as a door read it: its method, route, headers as sent and whole body."""

    method: str
    route: str
    headers: Headers
    body: bytes


class Reply(Protocol):
    """How a door carries out the tee's commands for its agent. `response` is what an
    aiohttp handler returns, when the answer is aiohttp's own (control, websockets)."""

    response: web.StreamResponse | None

    async def head(self, status: int, headers: Headers) -> None: ...

    async def body(self, data: bytes) -> None:
        """Raises ConnectionError when the agent is gone."""
        ...

    async def end(self) -> None: ...

    def drop(self) -> None:
        """Break the connection: the head sent (if any) reaches the agent, then the cut."""
        ...

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        """forkpoint's own answer, before any decision (a bad run id, a body too large)."""
        ...


class _Response(web.StreamResponse):
    """A response whose head goes out in one write with its first body bytes when they are at
    hand (a whole answer usually is), as aiohttp's `web.Response` does: one send, not two."""

    _send_headers_immediately = False


class _Reply:
    """The reply over an aiohttp connection."""

    def __init__(self, request: web.Request):
        self._request = request
        self.response: web.StreamResponse | None = None

    async def head(self, status: int, headers: Headers) -> None:
        self.response = _Response(status=status, headers=headers)
        await self.response.prepare(self._request)
        # no later than the loop's next pass, if no body bytes carry it before
        asyncio.get_running_loop().call_soon(_send_head, self._request)

    async def body(self, data: bytes) -> None:
        assert self.response is not None
        await self.response.write(data)

    async def end(self) -> None:
        assert self.response is not None
        await self.response.write_eof()

    def drop(self) -> None:
        _send_head(self._request)  # a head the source sent reaches the agent before the cut
        if self._request.transport is not None:
            self._request.transport.abort()

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        self.response = web.Response(status=status, headers=headers, body=body)


def _send_head(request: web.Request) -> None:
    """Send a response head still held back (see `_Response`)."""
    send = getattr(request.writer, "send_headers", None)  # aiohttp >= 3.12
    if send is None:
        return
    with contextlib.suppress(ConnectionError):  # the agent is gone: the tee's loop finds out
        send()


async def _refuse(
    reply: Reply, method: str, route: str, status: int, message: str, error_type: str
) -> None:
    """forkpoint's own error before any decision, over a door's reply."""
    headers, body = error_reply(method, route, status, message, error_type=error_type)
    await reply.whole(status, headers, body)


def _error(method: str, route: str, status: int, message: str, error_type: str) -> web.Response:
    """forkpoint's own error before any decision (a bad run id, a body too large), in the shape
    of the API the request was for."""
    headers, body = error_reply(method, route, status, message, error_type=error_type)
    return web.Response(status=status, headers=headers, body=body)
