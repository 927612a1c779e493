"""Local HTTPS services for the interceptor's tests: tool APIs, a fake LLM, a TCP echo.

Each runs on its own loop thread and can be stopped mid-test (to prove replay is offline). They
listen on 127.0.0.2 and 127.0.0.3, loopback addresses that are not `127.0.0.1`/`localhost`: a
command run with `--intercept` reaches those directly (NO_PROXY), as it does the gateway.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from aiohttp import WSMsgType, web

from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.https import TestCA, serve_https
from forkpoint.testing.upstream import ScriptedUpstream

HOST_A, HOST_B = "127.0.0.2", "127.0.0.3"


def tool_app(name: str, release: asyncio.Event | None = None) -> web.Application:
    """A tool API whose answers count its calls, so a replayed answer shows its recorded count.

    `/v1/events` streams three SSE events; with `release`, it holds the last until released.
    """
    calls = itertools.count(1)

    async def search(request: web.Request) -> web.Response:
        return web.json_response({"tool": name, "q": request.query.get("q"), "n": next(calls)})

    async def refund(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tool": name, "refunded": body.get("order"), "n": next(calls)})

    async def headers(request: web.Request) -> web.Response:
        return web.json_response({k.lower(): v for k, v in request.headers.items()})

    async def events(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for i in range(3):
            if i == 2 and release is not None:
                await release.wait()
            await response.write(f"data: {json.dumps({'tool': name, 'i': i})}\n\n".encode())
            await asyncio.sleep(0.02)
        await response.write_eof()
        return response

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        """Greets, echoes text (counted), reverses bytes, and closes with 4000 on "quit"."""
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(f"hello from {name}")
        async for message in socket:
            if message.type is WSMsgType.BINARY:
                await socket.send_bytes(message.data[::-1])
            elif message.data == "quit":
                await socket.close(code=4000, message=b"bye")
            else:
                await socket.send_str(f"echo {message.data} {next(calls)}")
        return socket

    app = web.Application()
    app.router.add_get("/v1/search", search)
    app.router.add_post("/v1/refund", refund)
    app.router.add_get("/v1/headers", headers)
    app.router.add_get("/v1/events", events)
    app.router.add_get("/ws", websocket)
    return app


class Service:
    """An aiohttp app served over HTTPS with `ca`'s certificate for `host`."""

    def __init__(self, app: web.Application, ca: TestCA, host: str):
        self._thread = LoopThread(f"service-{host}")
        self.loop = self._thread.loop
        context = ca.server_context([host])
        self._runner, self.url = self._thread.call(serve_https(app, context, host=host))

    async def _stop(self) -> None:
        await self._runner.cleanup()
        await asyncio.sleep(0.01)  # a closed transport lets go of its socket a loop turn later

    def stop(self) -> None:
        if not self.loop.is_closed():
            self._thread.call(self._stop())
            self._thread.close()


class LLMService(Service):
    """forkpoint's scripted OpenAI/Anthropic upstream, over HTTPS."""

    def __init__(self, ca: TestCA, host: str = HOST_A):
        self.upstream = ScriptedUpstream(chunk_delay=0.005)  # a stream in chunks
        super().__init__(self.upstream.app, ca, host)


class EchoService:
    """A TCP service that speaks no HTTP: it echoes each line back."""

    def __init__(self, host: str = HOST_A):
        self._thread = LoopThread("tcp-echo")
        self._handlers: set[asyncio.Task[None]] = set()
        self._server = self._thread.call(asyncio.start_server(self._echo, host, 0))
        self.address: tuple[str, int] = self._server.sockets[0].getsockname()[:2]

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while line := await reader.readline():
                writer.write(b"echo " + line)
                await writer.drain()
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _stop(self) -> None:
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await asyncio.sleep(0.01)

    def stop(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.call(self._stop())
            self._thread.close()
