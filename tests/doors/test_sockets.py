"""The gateway's websockets on real sockets (base URL): a `websockets` client, an aiohttp
websocket upstream; refusals, paced replays and a proxy stopped with a socket open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiohttp import web
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from forkpoint.engine.pace import Pace
from forkpoint.models import Origin
from tests.services import Service


class SocketService(Service):
    """`/ws` answers each message twice, 50 ms apart; `/refuse` refuses the handshake."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_get("/ws", self.socket)
        app.router.add_get("/refuse", self.refuse)
        super().__init__(app, "socket-service")

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        async for message in socket:
            await socket.send_str(f"{message.data} once")
            await asyncio.sleep(0.05)
            await socket.send_str(f"{message.data} twice")
        return socket

    async def refuse(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "no sockets for you"}, status=403)


@pytest.fixture
def service() -> Iterator[SocketService]:
    started = SocketService()
    yield started
    started.stop()


def opened(url: str, path: str = "/tools/ws") -> ClientConnection:
    return connect(url.replace("http://", "ws://") + path, proxy=None, open_timeout=5)


def ask(socket: ClientConnection, text: str) -> list[object]:
    socket.send(text)
    return [socket.recv(timeout=5), socket.recv(timeout=5)]


def test_a_paced_replay_keeps_the_recorded_gap_between_messages(start_proxy, store, service):
    recording = start_proxy(None, routes={"tools": service.url})
    run = recording.record().run.id
    with opened(recording.proxy.url) as socket:
        assert ask(socket, "hi") == ["hi once", "hi twice"]
    recording.close()
    service.stop()

    replaying = start_proxy(None, pace=Pace(1.0))
    replay = replaying.replay(run).run.id
    with opened(replaying.proxy.url) as socket:
        socket.send("hi")
        socket.recv(timeout=5)
        started = time.perf_counter()
        assert socket.recv(timeout=5) == "hi twice"
        assert time.perf_counter() - started >= 0.04  # as recorded, not at once
    replaying.close()
    assert [e.origin for e in store.exchanges(replay)] == [Origin.REPLAYED] * 2


def test_a_refused_handshake_is_answered_over_http_and_replayed(start_proxy, store, service):
    recording = start_proxy(None, routes={"tools": service.url})
    run = recording.record().run.id
    with pytest.raises(InvalidStatus) as refused:
        opened(recording.proxy.url, "/tools/refuse")
    assert refused.value.response.status_code == 403
    recording.close()
    (upgrade,) = store.exchanges(run)
    assert (upgrade.method, upgrade.status) == ("GET", 403)
    replaying = start_proxy(None)
    replaying.replay(run)
    with pytest.raises(InvalidStatus) as again:
        opened(replaying.proxy.url, "/tools/refuse")
    assert again.value.response.status_code == 403


def test_stopping_the_proxy_closes_open_sockets_at_once_and_keeps_their_messages(
    start_proxy, store, service
):
    proxy = start_proxy(None, routes={"tools": service.url})
    run = proxy.record().run.id
    socket = opened(proxy.proxy.url)
    assert ask(socket, "hi") == ["hi once", "hi twice"]
    started = time.perf_counter()
    proxy.close()
    assert time.perf_counter() - started < 5
    socket.close()
    assert [(e.method, e.response_body) for e in store.exchanges(run)] == [
        ("GET", b""), ("WS", b"hi oncehi twice"),
    ]  # fmt: skip
