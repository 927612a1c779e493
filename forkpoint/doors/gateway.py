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
import dataclasses
import functools
import hmac
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from typing import Any, NamedTuple, Protocol, assert_never
from urllib.parse import urlsplit

from aiohttp import HttpVersion11, web

from forkpoint.doors.auth import tokens
from forkpoint.doors.control import PREFIX as CONTROL_PREFIX
from forkpoint.doors.control import Control
from forkpoint.doors.heads import HEAD_LIMITS
from forkpoint.doors.mcp_sessions import opened
from forkpoint.doors.mocks import run_mock
from forkpoint.doors.parking import Detached, Parker
from forkpoint.doors.pieces import Spilling, served
from forkpoint.doors.ports import Pages, Pieces, Recorder, Sender, Sessions, Snapshots
from forkpoint.doors.server_log import SERVER_LOG
from forkpoint.doors.sockets import Sockets
from forkpoint.doors.uploads import (
    CONTROL_BODY,
    Arriving,
    Refused,
    check_start,
    read_body,
    too_large,
)
from forkpoint.engine.config import (
    DEFAULT_CLIENT_TIMEOUT,
    DEFAULT_MAX_BODY,
    FINISH_BYTES,
    FINISH_FOR,
    INTERCEPT_HEADER,
    ORIGIN_HEADER,
    RUN_HEADER,
    EngineConfig,
    OnHangup,
    Routes,
)
from forkpoint.engine.decide import (
    Action,
    Await,
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
from forkpoint.engine.pieces import hold_limit, in_pieces
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
# in one line; heads as large as clients send (`doors.heads`).
SERVER_OPTIONS: dict[str, Any] = {
    "auto_decompress": False,
    "handler_cancellation": True,
    "logger": SERVER_LOG,
    **HEAD_LIMITS,
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
        parking: Parker,
    ):
        self.parking = parking  # doors/parking.py: runs parked, their agents ended
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
        self._answering: dict[asyncio.Task[None], Tee] = {}  # answers under way (`settled`)
        self._pages: dict[str, Pages] = {}

    def mount(self, path: str, pages: Pages) -> None:
        """Serve `pages` under `path` (`/_forkpoint/ui`), behind the token like the rest."""
        self._pages[path] = pages

        async def close(_: web.Application) -> None:
            await pages.close()

        self.app.on_shutdown.append(close)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp's handler: the request read off its connection, then `answer`ed over it."""
        started = time.perf_counter()
        config, run_id, route = self._target(request.raw_path, request.headers.get)
        for path, pages in self._pages.items():
            if route.partition("?")[0] == path or route.startswith(path + "/"):
                return await pages(request, route[len(path) :])
        try:  # whole, or (an upload) its start and the rest as it comes: doors/uploads.py
            body = await read_body(request, max_body=self.max_body, timeout=self.client_timeout)
        except Refused as refused:
            return await refused.answer(request, route)
        reply = _Reply(request)
        headers = decode_headers(request.raw_headers)
        if isinstance(body, Arriving):
            incoming = Incoming(request.method, route, headers, body.start, body)
        else:
            incoming = Incoming(request.method, route, headers, body)
        try:
            await self.answer(incoming, reply, config, run_id, started=started, web_request=request)
        except Refused as refused:  # an upload that did not arrive whole: nothing sent yet
            return await refused.answer(request, route)
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

    def _refusal(
        self, body: bytes, headers: Headers, *, start: bool = False
    ) -> tuple[int, str, str] | None:
        """The status, message and error type a request body is refused with: too large, or
        not what its Content-Encoding says (`start`: the body is the start of one in pieces,
        checked so far); None for a body the engine may take."""
        if len(body) > self.max_body:
            return self._refusal_of(too_large(self.max_body))
        try:
            (check_start if start else check_body)(body, header(headers, "content-encoding"))
        except UndecodableBody as error:
            message = f"forkpoint: the request body is not what its Content-Encoding says: {error}"
            return 400, message, "forkpoint_bad_encoding"
        return None

    @staticmethod
    def _refusal_of(refused: Refused) -> tuple[int, str, str]:
        return refused.status, refused.message, refused.error_type

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
        """Answer a request over `reply`: its session, the engine's action, the tee.
        `web_request` is aiohttp's, which control endpoints and websockets answer over; a door
        without one sends neither (see `takes_without_socket`). Raises Refused for a body in
        pieces that does not arrive whole before anything was sent."""
        method, route, headers, body, arriving = incoming
        if arriving is None and in_pieces(headers, body):  # a door that holds it whole
            arriving = Arriving.of(body, hold_limit(headers, body), max_body=self.max_body)
            body = arriving.start
        refusal = self._refusal(body, headers, start=arriving is not None)
        if refusal is not None:
            return await _refuse(reply, method, route, *refusal)
        try:
            try:
                session = await self.sessions.get(run_id)
            except ConfigError as error:
                message = f"forkpoint: {error}"
                return await _refuse(reply, method, route, 400, message, "forkpoint_run")
            except CassetteError as error:  # a run named by the request, made in the store
                message = f"forkpoint: cannot open run {run_id}: {error}"
                log.warning("%s", message)
                return await _refuse(reply, method, route, 503, message, "forkpoint_store")
            upload = None
            if arriving is not None:  # read as its session needs it (Refused if it cannot be)
                if route.startswith(CONTROL_PREFIX):
                    return await _refuse(reply, method, route, 413, *CONTROL_BODY)
                asked = (method, route, headers)
                body, upload = await arriving.begin(
                    session, asked, config, self._spilling, started
                )
            if route.startswith(CONTROL_PREFIX) and web_request is not None:
                reply.response = await self.control.handle(
                    web_request, session, route, body, named=run_id is not None
                )
                return None
            config = self.control.routed(config, session.run.id, route)  # a stdio MCP server's
            step = self.sessions.allocate(session)
            ours = Request(method, route, headers, body, upload)
            decided = Decided(session, ours, decide(session, ours, config, step=step))
            await self.respond(
                decided, reply, config, started=started, web_request=web_request,
                arriving=arriving,
            )  # fmt: skip
        finally:
            if arriving is not None:
                arriving.discard()

    def decided_here(
        self, incoming: Incoming, config: EngineConfig, run_id: str | None
    ) -> Decided | None:
        """A request decided on the calling thread (a client's, in this process), when its
        session is open, replaying and numbering its own steps: nothing to wait for. None
        leaves it to `answer`, on the loop."""
        method, route, headers, body, _ = incoming
        if not self.takes_without_socket(route, headers) or in_pieces(headers, body):
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
        # a live answer its agent leaves is read on, for a resume (`OnHangup`)
        live = isinstance(action, Forward) and config.on_hangup is OnHangup.FINISH
        return Tee(
            action.record, started, keep=keep, redaction=action.redaction,
            limit=config.max_record_body, masked=masked, finish=FINISH_BYTES if live else None,
        )  # fmt: skip

    async def respond(
        self,
        decided: Decided,
        reply: Reply,
        config: EngineConfig,
        *,
        started: float,
        web_request: web.Request | None = None,
        arriving: Arriving | None = None,
    ) -> None:
        """Carry out a decided request over `reply`: its action's events through the tee
        (`arriving`: the rest of its body in pieces, read as the upstream takes it)."""
        session, ours, action = decided
        if isinstance(action, Await):  # nothing sent, nothing recorded: the run parks
            return await self.parking.hold(session, action, reply)
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
        events = events or self._events(action, started, arriving)
        if isinstance(action, Forward) and self.parking.parks_after(session, action):
            detached = Detached(reply)  # the agent ends if it parks; its answer is read on
            events = self.parking.watch(session, action, events, detached, tee)
            reply = detached
        # started at once, not on the loop's next pass: it runs to its first wait right here
        loop = asyncio.get_running_loop()
        responding = asyncio.Task(
            self._respond(reply, tee, events, pulls, arriving), loop=loop, eager_start=True
        )
        if responding.done():
            return responding.result()
        # Awaited through a future of its own, as `asyncio.shield` does (with less): the
        # handler's cancellation (its agent hung up) reaches the future, not the answer.
        answered = loop.create_future()
        self._answering[responding] = tee
        responding.add_done_callback(functools.partial(self._answered, answered))
        try:
            await answered
            return responding.result()
        except asyncio.CancelledError:  # the agent hung up: its door cancels the answer
            if self.parking.keeps(action.record):  # parked: its upstream's answer read on
                raise
            if tee.record.status is not None:
                if tee.reads_on:  # its next write fails, then it is read to its end, bounded
                    raise
                # An answer under way goes on until its next write fails, as it would without
                # forkpoint (an SDK that leaves on `[DONE]` got a complete answer), for a while.
                await asyncio.wait([responding], timeout=HANGUP_GRACE)
            responding.cancel()  # a stalled upstream request is given up and its connection freed
            await asyncio.wait([responding])
            raise

    def _answered(self, answered: asyncio.Future[None], responding: asyncio.Task[None]) -> None:
        del self._answering[responding]
        if not answered.cancelled():
            answered.set_result(None)
        elif not responding.cancelled():  # its handler left: what became of it is read here,
            responding.exception()  # as `shield` reads it, so asyncio logs nothing unread

    async def settled(self) -> None:
        """Wait for the answers still under way (the proxy is stopping, its agents are gone):
        those read on after their agent hung up (`OnHangup.FINISH`) end within FINISH_FOR;
        cancelled (a second Ctrl-C), each is recorded as far as it came."""
        waiting = list(self._answering)
        if reading := sum(tee.reads_on for tee in self._answering.values()):
            log.warning(
                "forkpoint: reading %d answer(s) their agents left to the end, to keep them for "
                "a resume (--on-hangup finish; at most %g s)", reading, FINISH_FOR,
            )  # fmt: skip
        try:
            await asyncio.gather(*waiting, return_exceptions=True)
        except asyncio.CancelledError:
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            raise

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue` gets its continue, as from aiohttp; any other expectation a
        417 in the API's shape (aiohttp's own answer failed on a value not in UTF-8: a 500)."""
        if request.version != HttpVersion11:
            return None
        if (request.content_length or 0) > self.max_body:  # refused before it is sent
            _, _, route = self._target(request.raw_path, request.headers.get)
            return _error(request.method, route, *self._refusal_of(too_large(self.max_body)))
        if request.headers.get("expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer's size counts from its own head
            return None
        _, _, route = self._target(request.raw_path, request.headers.get)
        message = "forkpoint: the request's Expect header is not one it can meet (100-continue)"
        return _error(request.method, route, 417, message, "forkpoint_expect")

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
        self,
        reply: Reply,
        tee: Tee,
        events: AsyncIterator[Event],
        pulls: list[asyncio.Task[None]],
        arriving: Arriving | None,
    ) -> None:
        """Feed the action's events to the tee and carry out its commands, until the response
        ends or the agent leaves."""
        feed, send, clock = tee.feed, reply.body, time.perf_counter
        try:
            async for event in events:
                if pulls and isinstance(event, Head):
                    await asyncio.gather(*pulls)  # the agent's state is read before it is answered
                for command in feed(event, clock()):
                    if type(command) is SendBody:  # most of a stream's: sent in line
                        await send(command.data)
                    else:
                        await self._carry_out(command, reply, arriving)
        except (ConnectionError, asyncio.CancelledError) as error:
            # the agent hung up (aiohttp cancels the handler of a closed connection)
            await self._feed(tee, HangUp(str(error) or type(error).__name__), reply, arriving)
            if isinstance(error, asyncio.CancelledError):
                raise
            if tee.finishing:
                await self._read_on(tee, events, reply, arriving)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def _read_on(
        self, tee: Tee, events: AsyncIterator[Event], reply: Reply, arriving: Arriving | None
    ) -> None:
        """The rest of an answer whose agent hung up, recorded and sent nowhere, for at most
        FINISH_FOR seconds (the tee bounds its bytes)."""
        try:
            async with asyncio.timeout(FINISH_FOR):
                async for event in events:
                    await self._feed(tee, event, reply, arriving)
                    if tee.done:
                        return
        except TimeoutError:
            await self._feed(tee, HangUp(f"no end within {FINISH_FOR:g} s"), reply, arriving)
        except asyncio.CancelledError:  # the proxy stops: what came is kept, cut
            await self._feed(tee, HangUp("the proxy stopped"), reply, arriving)
            raise

    async def _feed(
        self, tee: Tee, event: Event, reply: Reply, arriving: Arriving | None = None
    ) -> None:
        for command in tee.feed(event, time.perf_counter()):
            await self._carry_out(command, reply, arriving)

    async def _carry_out(
        self, command: Command, reply: Reply, arriving: Arriving | None = None
    ) -> None:
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
                # an upload is named on its exchange once read to its end (doors/uploads.py)
                answered = exchange.status is not None
                if arriving is None or await arriving.settle(exchange, answered=answered):
                    self.recorder.submit(exchange)
            case Spill(blob):  # journaled before the bytes after it go out
                await self._spilling.spill(blob)
            case Warn(message):
                log.warning("forkpoint: %s", message)
            case _:
                assert_never(command)

    def _events(
        self, action: Action, started: float, arriving: Arriving | None = None
    ) -> AsyncIterator[Event]:
        match action:
            case Forward():
                return self._forwarded(action, arriving)
            case Serve():
                return served(action.recorded, self.pace, started, self.pieces)
            case Mock():
                return self._mocked(action)
            case Fail():
                return _listed(answer(action.status, action.headers, action.body))
            case Await():
                raise AssertionError("a parked request has no events (Parker.hold)")
            case _:
                assert_never(action)

    async def _forwarded(
        self, action: Forward, arriving: Arriving | None = None
    ) -> AsyncIterator[Event]:
        request = action.record
        body: bytes | AsyncIterable[bytes] = action.body
        headers = action.headers
        if arriving is not None and arriving.streams:  # its rest as it comes, or as kept
            body = arriving.sent()
            if arriving.length is not None:  # framed as the agent framed it
                headers = (*headers, ("Content-Length", str(arriving.length)))
        try:
            if action.handshake is not None:  # a fork's MCP session, opened live first
                headers = await opened(self.sender, action.url, action.handshake, headers)
            upstream = await self.sender.send(request.method, action.url, headers, body)
        except UpstreamError as error:
            refused = None if arriving is None else arriving.refused
            if refused is not None:  # the agent's body failed, not the upstream: not recorded
                log.warning("forkpoint: run %s step %d is not recorded: %s",
                            request.run_id, request.step, refused.message)  # fmt: skip
                raise refused from None
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
    """A request as a door read it: its method, route, headers as sent and body: whole, or
    with `arriving`, the start of one in pieces (doors/uploads.py)."""

    method: str
    route: str
    headers: Headers
    body: bytes
    arriving: Arriving | None = None


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
    try:  # noqa: SIM105 (a `suppress` is an object and two calls more, each response)
        send()
    except ConnectionError:  # the agent is gone: the tee's loop finds out
        pass


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
