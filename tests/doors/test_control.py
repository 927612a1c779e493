"""The proxy's own endpoints: an adapter URL is fetched only on loopback (or an allowed host),
only for the run that registered it, and never where it redirects."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
from aiohttp import web

from forkpoint.runtime.loop_thread import LoopThread


class StateServer:
    """An agent's /state endpoint that counts what it was asked, on `host`."""

    def __init__(self, host: str = "127.0.0.1", *, redirect: str | None = None):
        self.gets = 0
        self.redirect = redirect
        app = web.Application()
        app.router.add_get("/state", self.get)
        self._runner = web.AppRunner(app)
        self._thread = LoopThread("state-server")
        self.port = self._thread.call(self._start(host))

    async def _start(self, host: str) -> int:
        await self._runner.setup()
        await web.TCPSite(self._runner, host, 0).start()
        return int(self._runner.addresses[0][1])

    async def get(self, request: web.Request) -> web.Response:
        self.gets += 1
        if self.redirect:
            raise web.HTTPFound(self.redirect)
        return web.json_response({"notes": ["kept"]})

    def stop(self) -> None:
        self._thread.call(self._runner.cleanup())
        self._thread.close()


@pytest.fixture
def state_server():  # type: ignore[no-untyped-def]
    started: list[StateServer] = []

    def start(host: str = "127.0.0.1", **options) -> StateServer:  # type: ignore[no-untyped-def]
        started.append(StateServer(host, **options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def register(proxy_url: str, url: str, *, run: str | None = "a", name: str = "agent"):  # type: ignore[no-untyped-def]
    """POST the registration as the agent helper does; (status, JSON answer)."""
    where = f"{proxy_url}/r/{run}" if run else proxy_url
    request = urllib.request.Request(
        f"{where}/_forkpoint/adapters", data=json.dumps({"url": url, "name": name}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def ask(proxy_url: str, run: str) -> None:
    with openai.OpenAI(base_url=f"{proxy_url}/r/{run}/v1", api_key="k", max_retries=0) as client:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def beyond_loopback(port: int) -> list[str]:
    return [
        f"http://0.0.0.0:{port}/state",  # reaches this host, yet is no loopback address
        f"http://[::ffff:127.0.0.1]:{port}/state",
        f"http://192.0.2.1:{port}/state",
        f"http://metadata.example:{port}/state",
        f"ftp://127.0.0.1:{port}/state",
        "file:///etc/passwd",
        "http:///state",
    ]


@pytest.mark.parametrize("index", range(7))
def test_an_adapter_url_beyond_loopback_is_refused_and_never_fetched(
    start_proxy, upstream, store, state_server, index
):
    server = state_server("0.0.0.0")
    proxy = start_proxy(upstream.url).proxy
    status, answer = register(proxy.url, beyond_loopback(server.port)[index])
    assert status == 403, answer
    assert answer["error"]["message"].startswith("forkpoint fetches")
    ask(proxy.url, "a")
    assert server.gets == 0
    assert store.snapshots("a") == []


def test_an_allowed_adapter_host_is_fetched(start_proxy, upstream, store, state_server):
    server = state_server("0.0.0.0")
    proxy = start_proxy(upstream.url, adapter_hosts=("0.0.0.0",)).proxy
    assert register(proxy.url, f"http://0.0.0.0:{server.port}/state")[0] == 200
    ask(proxy.url, "a")
    assert server.gets == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2"])
def test_a_loopback_adapter_is_pulled_for_its_own_run_only(
    start_proxy, upstream, store, state_server, host
):
    server = state_server("127.0.0.1" if host != "127.0.0.2" else host)
    proxy = start_proxy(upstream.url).proxy
    status, answer = register(proxy.url, f"http://{host}:{server.port}/state", run="a")
    assert (status, answer) == (200, {"run": "a", "restored_step": None})
    ask(proxy.url, "b")
    ask(proxy.url, "b")
    assert server.gets == 0  # run b's steps never pull run a's agent
    ask(proxy.url, "a")
    assert server.gets == 1


def test_a_registration_must_name_its_run(start_proxy, upstream, store, state_server):
    server = state_server()
    proxy = start_proxy(upstream.url).proxy
    status, answer = register(proxy.url, f"http://127.0.0.1:{server.port}/state", run=None)
    assert status == 400 and "/r/RUN/_forkpoint/adapters" in answer["error"]["message"]
    ask(proxy.url, "a")
    assert server.gets == 0


def test_the_workspace_adapter_cannot_be_replaced_over_http(
    start_proxy, upstream, store, state_server
):
    server = state_server()
    proxy = start_proxy(upstream.url).proxy
    status, answer = register(proxy.url, f"http://127.0.0.1:{server.port}/state", name="workspace")
    assert status == 400 and "workspace" in answer["error"]["message"]


def test_an_adapter_redirect_is_not_followed(start_proxy, upstream, store, state_server):
    target = state_server()
    redirecting = state_server(redirect=f"http://127.0.0.1:{target.port}/state")
    thread = start_proxy(upstream.url)
    assert register(thread.proxy.url, f"http://127.0.0.1:{redirecting.port}/state")[0] == 200
    ask(thread.proxy.url, "a")
    thread.close()  # every snapshot written
    assert (redirecting.gets, target.gets) == (1, 0)
    [snapshot] = store.snapshots("a")
    assert not snapshot.ok and "302" in (snapshot.error or "")
