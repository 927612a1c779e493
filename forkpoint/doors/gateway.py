"""The front door: an aiohttp server that turns requests into engine actions and carries them out.

A request becomes the engine's `Request`; `decide` answers with an action; the action becomes
a stream of response events (from the upstream, from a serve plan over the cassette, from a
mock or from forkpoint's own error), and a `Tee` turns each event into what to send the agent
and when to commit the exchange. The gateway only translates and carries out: every rule of a
response's life (tee, end, cut, hang-up, pacing, re-cutting, failures) is the engine's.

This module reads a request, refuses what the engine may not take, opens its session and has
it decided, then starts its answer (parked, a websocket, or the tee's task) and sees to the
handler's hang-up. The rest is its neighbours': where a request goes (`doors.targets`), the
events and the tee's commands carried out (`doors.carrying`), the `Reply` they go out over
(`doors.replies`).

Requests reach it two ways. An agent's base URL points here (`/v1/...`, `/anthropic/...`,
`/r/RUN/...`); and the interceptor (`forkpoint.doors.interceptor`) hands it every request it
intercepts, marked with the interceptor's secret and the request's origin, so both ways share
this one door.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from aiohttp import HttpVersion11, web

from forkpoint.doors.auth import tokens
from forkpoint.doors.carrying import Carrier, listed, tee_for
from forkpoint.doors.control import PREFIX as CONTROL_PREFIX
from forkpoint.doors.control import Control
from forkpoint.doors.heads import HEAD_LIMITS
from forkpoint.doors.parking import Detached, Parker
from forkpoint.doors.pieces import Spilling
from forkpoint.doors.ports import Pages, Pieces, Recorder, Sender, Sessions, Snapshots
from forkpoint.doors.replies import Reply, WebReply, error_response, refuse
from forkpoint.doors.server_log import SERVER_LOG
from forkpoint.doors.sockets import Sockets
from forkpoint.doors.targets import target_of
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
    FINISH_FOR,
    EngineConfig,
)
from forkpoint.engine.decide import (
    Action,
    Await,
    Forward,
    Request,
    Serve,
    decide,
    snapshot_point,
)
from forkpoint.engine.encoding import UndecodableBody, check_body, decode_headers, header
from forkpoint.engine.frames import is_upgrade
from forkpoint.engine.lifecycle import Tee
from forkpoint.engine.pace import Pace
from forkpoint.engine.pieces import hold_limit, in_pieces
from forkpoint.engine.session import Session
from forkpoint.engine.websocket import opens
from forkpoint.errors import CassetteError, ConfigError
from forkpoint.models import Headers

log = logging.getLogger(__name__)

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
        self.snapshots = snapshots
        self._spilling = Spilling(recorder)
        # doors/carrying.py: a decided action's events through the tee, to the agent and recorder
        self.carrier = Carrier(
            sender=sender, recorder=recorder, spilling=self._spilling, pieces=pieces, pace=pace
        )
        self.control = Control(snapshots, adapter_hosts=adapter_hosts)
        self.sockets = Sockets(sender=sender, recorder=recorder, pace=pace, sessions=sessions)
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
        config, run_id, route = target_of(
            request.raw_path, request.headers.get, self.config, self._secret
        )
        for path, pages in self._pages.items():
            if route.partition("?")[0] == path or route.startswith(path + "/"):
                return await pages(request, route[len(path) :])
        try:  # whole, or (an upload) its start and the rest as it comes: doors/uploads.py
            body = await read_body(request, max_body=self.max_body, timeout=self.client_timeout)
        except Refused as refused:
            return await refused.answer(request, route)
        reply = WebReply(request)
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
        return target_of(raw_path, lambda name: header(headers, name), self.config, self._secret)

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
            return await refuse(reply, method, route, *refusal)
        try:
            try:
                session = await self.sessions.get(run_id)
            except ConfigError as error:
                message = f"forkpoint: {error}"
                return await refuse(reply, method, route, 400, message, "forkpoint_run")
            except CassetteError as error:  # a run named by the request, made in the store
                message = f"forkpoint: cannot open run {run_id}: {error}"
                log.warning("%s", message)
                return await refuse(reply, method, route, 503, message, "forkpoint_store")
            upload = None
            if arriving is not None:  # read as its session needs it (Refused if it cannot be)
                if route.startswith(CONTROL_PREFIX):
                    return await refuse(reply, method, route, 413, *CONTROL_BODY)
                asked = (method, route, headers)
                body, upload = await arriving.begin(session, asked, config, self._spilling, started)
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
            events = listed(opened)  # the upstream refused the websocket: its answer, over HTTP
        tee = tee_for(action, config, started)
        llm = snapshot_point(action)
        pulls = (
            []
            if llm is None
            else self.snapshots.on_request(session.run.id, action.record.step, llm=llm)
        )
        events = events or self.carrier.events(action, started, arriving)
        if isinstance(action, Forward) and self.parking.parks_after(session, action):
            detached = Detached(reply)  # the agent ends if it parks; its answer is read on
            events = self.parking.watch(session, action, events, detached, tee)
            reply = detached
        # started at once, not on the loop's next pass: it runs to its first wait right here
        loop = asyncio.get_running_loop()
        responding = asyncio.Task(
            self.carrier.carry(reply, tee, events, pulls, arriving), loop=loop, eager_start=True
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
            _, _, route = target_of(
                request.raw_path, request.headers.get, self.config, self._secret
            )
            return error_response(
                request.method, route, *self._refusal_of(too_large(self.max_body))
            )
        if request.headers.get("expect", "").lower() == "100-continue":
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the answer's size counts from its own head
            return None
        _, _, route = target_of(request.raw_path, request.headers.get, self.config, self._secret)
        message = "forkpoint: the request's Expect header is not one it can meet (100-continue)"
        return error_response(request.method, route, 417, message, "forkpoint_expect")


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
