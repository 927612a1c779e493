"""The live side of the stdio door: the real MCP server, started when a request first goes live,
and served to the proxy as streamable HTTP.

The proxy forwards a stdio server's live requests here like any upstream's (one POST per
message), so they are decided, teed and recorded on the one path every exchange takes. A request
is written to the server's stdin as a line, and answered with an event stream of the server's
messages for it as they come: notifications that name its progress token, anything else the
server says while it is the oldest request waiting, then its response, which ends the stream.
A notification, or the client's answer to a server's request, is written and answered 202. A
message the server sends while nothing waits (a change notification) goes to the agent at once
(`unrelated`): it answers nothing, and is not recorded.

A server started after a replayed prefix never saw the client's handshake: before the first
live request it is sent the `initialize` (and `notifications/initialized`) the agent sent,
under an id of forkpoint's own, and the answer is kept from the agent, who had its own already.
The server's stderr is the door's (the agent's); when the server exits, what was waiting on it
is cut, as the agent's connection to a crashed server would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from forkpoint.doors.server_log import SERVER_LOG
from forkpoint.engine.dialects import jsonrpc

log = logging.getLogger(__name__)

TOKEN_HEADER = "x-forkpoint-mcp-token"
HANDSHAKE_ID = "forkpoint-handshake"
# How long a server has to exit once its stdin closes, then once asked to (s), as MCP's
# shutdown says: close its input, wait, SIGTERM, wait, SIGKILL.
EXIT_GRACE = 2.0
_CUT = object()  # the server exited before answering


@dataclass
class Handshake:
    """The client's handshake as the door saw it pass (served or live): what a server started
    later must be told first."""

    initialize: jsonrpc.Message | None = None
    initialized: bytes | None = None

    def saw(self, message: jsonrpc.Message, data: bytes) -> None:
        if message.method == "initialize" and message.kind is jsonrpc.Kind.REQUEST:
            self.initialize = message
        elif message.method == "notifications/initialized":
            self.initialized = data


@dataclass(eq=False)
class _Waiter:
    """A request sent to the server, and what the server has said for it so far."""

    id: Any
    progress: Any
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)


class ServerBridge:
    """The real server behind one stdio door, as an HTTP endpoint on loopback."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        token: str,
        handshake: Handshake,
        unrelated: Callable[[bytes], Awaitable[None]],
        exited: Callable[[int], None],
    ):
        self._cmd = list(cmd)
        self._token = token
        self._handshake = handshake
        self._unrelated = unrelated
        self._exited = exited
        self._process: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._writing = asyncio.Lock()
        self._waiting: list[_Waiter] = []
        self._closing = False
        self.started = False
        self._runner: web.AppRunner | None = None

    async def listen(self) -> str:
        """Serve on a free loopback port; the URL the proxy sends live requests to."""
        app = web.Application()
        app.router.add_post("/{name}", self._handle)
        self._runner = web.AppRunner(app, logger=SERVER_LOG, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"http://127.0.0.1:{port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if not hmac.compare_digest(request.headers.get(TOKEN_HEADER, ""), self._token):
            return web.Response(status=403, text="forkpoint: not this door's request")
        data = await request.read()
        message = jsonrpc.parse(data)
        if message is None:
            return _json(400, jsonrpc.error(None, "not a JSON-RPC message", code=-32700))
        try:
            await self._start(message)
        except OSError as error:
            text = f"forkpoint: cannot start the MCP server {self._cmd[0]!r}: {error.strerror}"
            log.warning("%s", text)
            return _json(502, jsonrpc.error(message.id, text))
        if message.kind is not jsonrpc.Kind.REQUEST:
            await self._write(data)
            return web.Response(status=202)
        waiter = _Waiter(message.id, message.progress_token)
        self._waiting.append(waiter)
        try:
            await self._write(data)
            response = web.StreamResponse(
                headers={"content-type": "text/event-stream", "cache-control": "no-cache"}
            )
            await response.prepare(request)
            while (said := await waiter.queue.get()) is not None:
                if said is _CUT:  # the server exited: the proxy sees the answer break off
                    assert request.transport is not None
                    request.transport.abort()
                    return response
                await response.write(jsonrpc.event(said))
            await response.write_eof()
            return response
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(waiter)

    async def start(self) -> None:
        """Start the server now, before any message (a recording: every message goes live);
        one that cannot start is told when the first message comes."""
        async with self._starting:
            if not self.started:
                with contextlib.suppress(OSError):
                    await self._spawn()

    async def _spawn(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self._cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=jsonrpc.MAX_LINE,
        )  # fmt: skip
        self.started = True
        self._reading = asyncio.create_task(self._read())

    async def _start(self, first: jsonrpc.Message) -> None:
        """Start the server for its first live message; tell it the handshake it missed."""
        async with self._starting:
            if self.started:
                return
            await self._spawn()
            handshake = self._handshake
            if handshake.initialize is None or first.method == "initialize":
                return
            value = {**handshake.initialize.value, "id": HANDSHAKE_ID}
            waiter = _Waiter(HANDSHAKE_ID, None)
            self._waiting.append(waiter)
            await self._write(jsonrpc.dumps(value))
            while await waiter.queue.get() not in (None, _CUT):
                pass  # its answer was the agent's long ago: kept from it
            with contextlib.suppress(ValueError):
                self._waiting.remove(waiter)
            if handshake.initialized is not None:
                await self._write(handshake.initialized)

    async def _write(self, data: bytes) -> None:
        process = self._process
        assert process is not None and process.stdin is not None
        async with self._writing:
            try:
                process.stdin.write(jsonrpc.line(data))
                await process.stdin.drain()
            except (ConnectionError, RuntimeError):
                pass  # it exited: `_read` sees its stdout end and cuts what waits

    async def _read(self) -> None:
        """Hand each message the server writes to what waits for it."""
        process = self._process
        assert process is not None and process.stdout is not None
        while True:
            try:
                data = await process.stdout.readline()
            except (ValueError, ConnectionError):  # a line past the limit: a broken server
                break
            if not data:
                break
            data = data.strip()
            message = jsonrpc.parse(data)
            if message is None:
                log.warning("forkpoint mcp: the server wrote a line that is no JSON-RPC message")
                continue
            waiter = self._waiter_for(message)
            if waiter is None:
                await self._unrelated(data)
                continue
            waiter.queue.put_nowait(data)
            if message.kind is jsonrpc.Kind.RESPONSE and jsonrpc.same_id(message.id, waiter.id):
                waiter.queue.put_nowait(None)
                self._waiting.remove(waiter)
        code = await process.wait()
        for waiter in self._waiting:
            waiter.queue.put_nowait(_CUT)
        self._waiting.clear()
        if not self._closing:
            self._exited(code)

    def _waiter_for(self, message: jsonrpc.Message) -> _Waiter | None:
        if message.kind is jsonrpc.Kind.RESPONSE:
            return next((w for w in self._waiting if jsonrpc.same_id(w.id, message.id)), None)
        token = message.params.get("progressToken")
        if message.method == "notifications/progress" and token is not None:
            found = next((w for w in self._waiting if jsonrpc.same_id(w.progress, token)), None)
            if found is not None:
                return found
        return self._waiting[0] if self._waiting else None

    async def close(self) -> int | None:
        """Stop the server as MCP's shutdown says, and stop listening; its exit code, if it
        ran."""
        self._closing = True
        code = None
        process = self._process
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            code = await _ended(process)
            if self._reading is not None:
                await self._reading
        if self._runner is not None:
            await self._runner.cleanup()
        return code


async def _ended(process: asyncio.subprocess.Process) -> int:
    for stop in (None, process.terminate, process.kill):
        if stop is not None:
            with contextlib.suppress(ProcessLookupError):
                stop()
        try:
            return await asyncio.wait_for(process.wait(), EXIT_GRACE)
        except TimeoutError:
            continue
    return await process.wait()


def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")
