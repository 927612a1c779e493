"""The gateway's websockets: it carries out what `engine.websocket.Connection` decides.

An upgrade request the engine serves or forwards is accepted here (aiohttp's
`WebSocketResponse`); then three loops run until the socket closes: the agent's messages, the
upstream's (once connected), and an outbox that sends the agent its messages at the times the
engine gave, in order, then the close. Every message is whole: pings, pongs and fragments are
each hop's own. Both ways in reach this: a base URL (`ws://127.0.0.1:PORT/v1/realtime`) and
the interceptor, which hands the gateway its websocket upgrades like any request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from aiohttp import WSMsgType, web

from forkpoint.doors.ports import Recorder, Sender, Sessions, UpstreamSocket
from forkpoint.engine import frames
from forkpoint.engine.config import EngineConfig
from forkpoint.engine.decide import Forward, Request, Serve
from forkpoint.engine.frames import Frame
from forkpoint.engine.lifecycle import Commit, Event, NoAnswer, answer
from forkpoint.engine.pace import Pace
from forkpoint.engine.redaction import end_to_end
from forkpoint.engine.session import Session
from forkpoint.engine.websocket import (
    GOING_AWAY,
    Close,
    Command,
    Connect,
    Connection,
    ToAgent,
    ToUpstream,
    connect,
)
from forkpoint.errors import UpstreamError

# What described the body of a refused handshake, which aiohttp does not keep.
_BODY = frozenset({"content-length", "content-encoding", "transfer-encoding"})


class Sockets:
    """Opens and serves the websockets of one gateway."""

    def __init__(self, *, sender: Sender, recorder: Recorder, pace: Pace, sessions: Sessions):
        self._sender = sender
        self._recorder = recorder
        self._sessions = sessions  # a message's step, for a run other proxies serve too
        self._pace = pace
        self._open: set[web.WebSocketResponse] = set()

    async def close_all(self, app: web.Application | None = None) -> None:
        """Close every open socket (the proxy is stopping): each one's exchange in progress is
        committed as its handler ends, and the agents are told the server is going away."""
        for socket in list(self._open):
            with contextlib.suppress(Exception):
                await socket.close(code=GOING_AWAY, message=b"forkpoint stopped")

    async def open(
        self, request: web.Request, session: Session, upgrade: Request,
        action: Serve | Forward, config: EngineConfig,
    ) -> web.StreamResponse | list[Event]:  # fmt: skip
        """Serve the websocket until it closes; or, when the upstream refuses it or cannot be
        reached, the events of the HTTP answer the agent gets instead."""
        now = time.perf_counter()
        upstream: UpstreamSocket | None = None
        if isinstance(action, Forward):
            handshake = connect(upgrade, action.url)
            try:
                upstream = await self._sender.websocket(
                    handshake.url, handshake.headers, handshake.protocols
                )
            except UpstreamError as error:
                return [NoAnswer(f"forkpoint: {error}")]
            if upstream.status != 101:  # its body is not kept by the handshake: none is sent
                kept = tuple((k, v) for k, v in upstream.headers if k.lower() not in _BODY)
                return answer(upstream.status, kept, b"")
            connection = Connection.live(
                session, config, upgrade, action, upstream.status, upstream.headers, now
            )
            opening: list[Command] = []
            answer_headers, protocol = upstream.headers, upstream.protocol
        else:
            connection, opening = Connection.served(
                session, config, upgrade, action, now, pace=self._pace
            )
            answer_headers = action.recorded.response_headers
            protocol = next(iter(frames.protocols(answer_headers)), None)
        socket = web.WebSocketResponse(protocols=(protocol,) if protocol else (), max_msg_size=0)
        socket.headers.update(_passed(answer_headers))
        try:
            await socket.prepare(request)
        except BaseException:  # the agent went away before its socket opened
            if upstream is not None:
                await upstream.close()
            raise
        self._open.add(socket)
        try:
            await _Serving(
                socket, connection, upstream, self._sender, self._recorder, self._sessions
            ).run(opening)
        finally:
            self._open.discard(socket)
        return socket


class _Serving:
    """One open websocket: the agent's side, the upstream's, and the outbox to the agent."""

    def __init__(
        self, socket: web.WebSocketResponse, connection: Connection,
        upstream: UpstreamSocket | None, sender: Sender, recorder: Recorder, sessions: Sessions,
    ):  # fmt: skip
        self._sessions = sessions
        self._socket = socket
        self._connection = connection
        self._upstream = upstream
        self._sender = sender
        self._recorder = recorder
        self._outbox: asyncio.Queue[ToAgent | Close] = asyncio.Queue()
        self._reading: asyncio.Task[None] | None = None
        self._ended = False  # the connection's exchanges are all committed

    async def run(self, opening: list[Command]) -> None:
        sending = asyncio.create_task(self._send())
        if self._upstream is not None:
            self._reading = asyncio.create_task(self._read(self._upstream))
        try:
            await self._carry_out(opening)
            async for message in self._socket:
                if message.type is WSMsgType.TEXT:
                    frame = Frame(message.data.encode())
                elif message.type is WSMsgType.BINARY:
                    frame = Frame(message.data, binary=True)
                else:
                    break
                step = self._sessions.allocate(self._connection.session)
                await self._carry_out(
                    self._connection.from_agent(frame, time.perf_counter(), step=step)
                )
                if self._ended:
                    break
            if self._ended:  # closing on our side: what is due to the agent, then the close
                await sending
        finally:
            if not self._ended:  # the agent went away (or the proxy is stopping)
                self._ended = True
                await self._carry_out(self._connection.closed_by_agent(time.perf_counter()))
            sending.cancel()
            if self._reading is not None:
                self._reading.cancel()
            if self._upstream is not None:
                # shielded: the agent's hang-up cancels this handler, not the upstream's close
                closing = asyncio.ensure_future(self._upstream.close())
                with contextlib.suppress(Exception):
                    await asyncio.shield(closing)

    async def _carry_out(self, commands: list[Command]) -> None:
        for command in commands:
            match command:
                case ToAgent() | Close():
                    if isinstance(command, Close):
                        self._ended = True
                    self._outbox.put_nowait(command)
                case ToUpstream(frame):
                    await self._to_upstream(frame)
                case Connect():
                    await self._connect(command)
                case Commit(exchange):
                    self._recorder.submit(exchange)

    async def _connect(self, command: Connect) -> None:
        try:
            upstream = await self._sender.websocket(command.url, command.headers, command.protocols)
        except UpstreamError as error:
            await self._failed(str(error))
            return
        if upstream.status != 101:
            await self._failed(f"the upstream refused the websocket with {upstream.status}")
            return
        self._upstream = upstream
        self._reading = asyncio.create_task(self._read(upstream))

    async def _to_upstream(self, frame: Frame) -> None:
        if self._upstream is None:
            return  # its connection failed, and the agent's socket is closing
        try:
            await self._upstream.send(frame)
        except (ConnectionError, UpstreamError) as error:
            await self._failed(f"cannot send to the upstream: {error}")

    async def _read(self, upstream: UpstreamSocket) -> None:
        try:
            async for frame in upstream.messages():
                await self._carry_out(self._connection.from_upstream(frame, time.perf_counter()))
        except UpstreamError as error:
            await self._failed(str(error))
            return
        if not self._ended:
            now = time.perf_counter()
            closed = self._connection.closed_by_upstream(
                upstream.close_code, upstream.close_reason, now
            )
            await self._carry_out(closed)

    async def _failed(self, reason: str) -> None:
        if not self._ended:
            await self._carry_out(self._connection.upstream_failed(reason, time.perf_counter()))

    async def _send(self) -> None:
        while True:
            item = await self._outbox.get()
            wait = getattr(item, "at", 0.0) - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            match item:
                case ToAgent(frame):
                    try:
                        if frame.binary:
                            await self._socket.send_bytes(frame.data)
                        else:
                            await self._socket.send_str(frame.data.decode(errors="replace"))
                    except ConnectionError:
                        return
                case Close(code, reason):
                    await self._socket.close(code=code, message=reason.encode()[:123])
                    return


def _passed(headers: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """A handshake answer's own headers (request ids…), without what each hop makes itself."""
    drop = frames.HANDSHAKE | {"content-length", "date", "server"}
    return {k: v for k, v in end_to_end(headers, drop=drop) if not k.lower().startswith(":")}
