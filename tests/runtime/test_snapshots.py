"""Snapshot pulls on the live path: consistent, bounded, and never failing the request."""

from __future__ import annotations

import asyncio
import os

import openai
import pytest
from aiohttp import web

from forkpoint.adapters.http import HttpAdapter
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.errors import ConfigError
from forkpoint.runtime.loop_thread import LoopThread


class StateServer:
    """An agent's /state endpoint that can be slow, broken or huge."""

    def __init__(self, body: bytes = b'{"ok": true}', delay: float = 0.0, status: int = 200):
        self.body, self.delay, self.status, self.puts = body, delay, status, []
        app = web.Application(client_max_size=100 * 1024 * 1024)
        app.router.add_get("/state", self.get)
        app.router.add_put("/state", self.put)
        self._runner = web.AppRunner(app)
        self._thread = LoopThread("state-server")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}/state"

    async def get(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.delay)
        return web.Response(body=self.body, status=self.status, content_type="application/json")

    async def put(self, request: web.Request) -> web.Response:
        self.puts.append(await request.read())
        return web.Response(status=204)

    def stop(self) -> None:
        self._thread.call(self._runner.cleanup())
        self._thread.close()


def run_with_adapter(start_proxy, upstream, store, server: StateServer, timeout: float = 2.0):  # type: ignore[no-untyped-def]
    thread = start_proxy(upstream.url, snapshot_policy=SnapshotPolicy(timeout=timeout))
    run = thread.record().run

    async def register() -> None:
        adapter = HttpAdapter(server.url, thread.proxy.gateway.control.client())
        thread.proxy.snapshots.register(run.id, adapter)

    thread.call(register())
    return thread, run


def ask(url: str) -> str:
    with openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        answer = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    return answer.choices[0].message.content or ""


def test_a_hanging_pull_times_out_and_the_request_still_goes_through(start_proxy, upstream, store):
    server = StateServer(delay=3)
    try:
        thread, run = run_with_adapter(start_proxy, upstream, store, server, timeout=0.3)
        assert ask(thread.proxy.url) == "[gpt-4o] hi"
        thread.close()
        [snapshot] = store.snapshots(run.id)
        assert not snapshot.ok and "timed out after 0.3 s" in (snapshot.error or "")
        assert len(store.exchanges(run.id)) == 1
    finally:
        server.stop()


@pytest.mark.parametrize("status", [500, 404])
def test_an_adapter_that_fails_is_a_failed_snapshot_not_a_failed_request(
    start_proxy, upstream, store, status
):
    server = StateServer(body=b"<html>oops", status=status)
    try:
        thread, run = run_with_adapter(start_proxy, upstream, store, server)
        assert ask(thread.proxy.url) == "[gpt-4o] hi"
        thread.close()
        [snapshot] = store.snapshots(run.id)
        assert not snapshot.ok and str(status) in (snapshot.error or "")
    finally:
        server.stop()


def test_a_50_mb_state_is_stored_and_comes_back(start_proxy, upstream, store):
    state = os.urandom(25 * 1024 * 1024).hex().encode()  # 50 MB of text
    server = StateServer(body=state)
    try:
        thread, run = run_with_adapter(start_proxy, upstream, store, server, timeout=30)
        ask(thread.proxy.url)
        thread.close()
        [latest] = store.latest_snapshots(run.id)
        assert latest.size == len(state) and latest.data == state
    finally:
        server.stop()


def test_registration_restores_a_forks_state_and_reports_the_step(start_proxy, upstream, store):
    from forkpoint.models import Snapshot

    recording = start_proxy(upstream.url)
    parent = recording.record().run
    for _ in range(3):
        ask(recording.proxy.url)
    recording.close()
    store.add_snapshot(Snapshot(parent.id, 1, "agent", "application/json", b'{"turn": 1}'))
    store.add_snapshot(Snapshot(parent.id, 2, "agent", "application/json", b'{"turn": 2}'))
    server = StateServer()
    try:
        forking = start_proxy(upstream.url)
        child = forking.fork(parent.id, at=2).run
        import json
        import urllib.request

        request = urllib.request.Request(f"{forking.proxy.url}/r/{child.id}/_forkpoint/adapters",
                                         data=json.dumps({"url": server.url}).encode(), method="POST")  # fmt: skip
        with urllib.request.urlopen(request) as response:
            assert json.loads(response.read()) == {"run": child.id, "restored_step": 2}
        assert server.puts == [b'{"turn": 2}']
        assert ask(forking.proxy.url) == "[gpt-4o] hi"  # step 2 is the fork step: live
        forking.close()
        assert [e.origin for e in store.exchanges(child.id)] == ["replayed", "replayed", "live"]
    finally:
        server.stop()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("llm", SnapshotPolicy()),
        ("off", SnapshotPolicy(on_llm=False)),
        ("5", SnapshotPolicy(on_llm=False, every_steps=5)),
        ("2.5s", SnapshotPolicy(on_llm=False, every_seconds=2.5)),
    ],
)
def test_snapshot_policies_parse(text, expected):
    assert SnapshotPolicy.parse(text) == expected


def test_a_bad_policy_is_a_clear_error():
    with pytest.raises(ConfigError, match="--snapshot-every"):
        SnapshotPolicy.parse("sometimes")
