"""The same rules through both front doors: the gateway (base URL) and the interceptor
(HTTPS_PROXY). Each test runs once per door; what it asserts holds for both.

Found by a user: `replay --intercept --pace recorded` delivered chunks recorded over 1.6 s all
at once, and a stream cut when recorded was not cut again through the interceptor.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from forkpoint.engine.pace import Pace
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.runtime import certs
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.testing.https import TestCA
from forkpoint.testing.upstream import Reply, ScriptedUpstream
from tests.conftest import RunningUpstream
from tests.https_services import HOST_A, Service

CHUNK_DELAY = 0.06  # between SSE events of the recorded stream
WORDS = "one two three four five six"


@dataclass
class Door:
    """One way in: where the agent sends a chat completion, and with which client."""

    name: str
    start: Callable[..., ProxyThread]  # start_proxy(upstream or None, **options)
    upstream_url: str  # the model API's base URL, as the agent knows it
    ca: TestCA | None = None
    confdir: Path | None = None

    def proxy(self, *, live: bool, **options: object) -> ProxyThread:
        if self.name == "gateway":
            return self.start(self.upstream_url if live else None, **options)
        assert self.ca is not None and self.confdir is not None
        intercept = InterceptOptions(confdir=self.confdir, upstream_ca=str(self.ca.cert_path))
        return self.start(None, intercept=intercept, **options)

    def client(self, thread: ProxyThread, run: str) -> tuple[httpx.Client, str]:
        """An HTTP client for the run, and the chat completions URL it posts to."""
        if self.name == "gateway":
            return httpx.Client(timeout=10), f"{thread.proxy.url}/r/{run}/v1/chat/completions"
        interceptor = thread.proxy.interceptor
        assert interceptor is not None and self.confdir is not None
        proxy_url = interceptor.url.replace("http://", f"http://{run}:@")
        trusted = ssl.create_default_context(cafile=certs.client_bundle(self.confdir))
        client = httpx.Client(proxy=proxy_url, verify=trusted, timeout=10)
        return client, f"{self.upstream_url}/v1/chat/completions"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("test-ca"))


@pytest.fixture(params=["gateway", "interceptor"])
def door(request, start_proxy, start_upstream, ca, tmp_path) -> Iterator[Door]:  # type: ignore[no-untyped-def]
    def script(prompt):  # type: ignore[no-untyped-def]
        cut = 3 if "cut" in prompt.last_user_text else None
        return Reply(text=WORDS, cut_after=cut)

    upstream = ScriptedUpstream(script, chunk_delay=CHUNK_DELAY)
    if request.param == "gateway":
        running: RunningUpstream | Service = start_upstream(upstream)
        yield Door("gateway", start_proxy, running.url)
    else:
        confdir = tmp_path / "forkpoint"
        certs.ca_cert(confdir)
        running = Service(upstream.app, ca, HOST_A)
        yield Door("interceptor", start_proxy, running.url, ca, confdir)
    running.stop()


def stream(door: Door, thread: ProxyThread, run: str, text: str) -> list[tuple[float, bytes]]:
    """Post a streamed chat completion; each piece of body as it arrived, with its time."""
    client, url = door.client(thread, run)
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": text}]}
    arrived: list[tuple[float, bytes]] = []
    started = time.perf_counter()
    with client, client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        for piece in response.iter_raw():
            arrived.append((time.perf_counter() - started, piece))
    return arrived


def record(door: Door, text: str) -> str:
    thread = door.proxy(live=True)
    run = thread.record().run.id
    with contextlib.suppress(httpx.HTTPError):  # a cut stream: recorded as it was
        stream(door, thread, run, text)
    thread.close()
    return run


def replay(door: Door, source: str, **options: object) -> tuple[ProxyThread, str]:
    thread = door.proxy(live=False, **options)
    return thread, thread.replay(source).run.id


def test_pace_recorded_keeps_the_recorded_timing_and_fast_does_not(door, store):
    source = record(door, "hello")
    recorded = store.exchanges(source)[0]
    assert recorded.chunks is not None and len(recorded.chunks) > 3
    last_offset = recorded.chunks[-1].offset_ms / 1000
    assert last_offset > 4 * CHUNK_DELAY

    thread, run = replay(door, source, pace=Pace(1.0))
    arrived = stream(door, thread, run, "hello")
    # Each chunk arrives no earlier than recorded (minus a little slack), the last near its time.
    assert arrived[-1][0] >= 0.8 * last_offset
    assert b"".join(piece for _, piece in arrived) == recorded.response_body

    fast, fast_run = replay(door, source)
    assert stream(door, fast, fast_run, "hello")[-1][0] < 0.5 * last_offset


def test_a_stream_cut_when_recorded_is_cut_again(door, store):
    source = record(door, "please cut")
    [recorded] = store.exchanges(source)
    assert not recorded.complete and recorded.chunks
    thread, run = replay(door, source)
    with pytest.raises(httpx.HTTPError):
        stream(door, thread, run, "please cut")
    thread.close()
    [served] = store.exchanges(run)
    assert not served.complete and served.response_body == recorded.response_body


def test_a_divergence_is_the_dialects_error_that_says_not_to_retry(door, store):
    source = record(door, "hello")
    thread, run = replay(door, source)
    client, url = door.client(thread, run)
    with client:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "something else"}]}
        response = client.post(url, json=body)
    assert response.status_code == 400
    assert response.headers["x-should-retry"] == "false"
    error = response.json()["error"]
    assert error["type"] == "forkpoint_divergence" and "something else" in error["message"]


def test_an_invalid_run_id_is_refused_in_the_dialects_shape(door):
    thread = door.proxy(live=True)
    thread.record()
    client, url = door.client(thread, "bad!id")
    with client:
        response = client.post(url, json={"model": "gpt-4o", "messages": []})
    assert response.status_code == 400
    assert "invalid run id" in response.json()["error"]["message"]


def test_agent_state_is_pulled_at_each_model_request(door, store):
    from forkpoint.adapters.protocol import State

    class Memory:
        name = "agent"
        pulls = 0

        async def pull(self) -> State:
            Memory.pulls += 1
            return State("application/json", json.dumps({"pulls": Memory.pulls}).encode())

        async def restore(self, state: State) -> None:
            raise AssertionError("a recording restores nothing")

    thread = door.proxy(live=True, snapshot_policy=SnapshotPolicy())
    session = thread.record()
    thread.call(thread.proxy.snapshots.attach(session, Memory()))
    stream(door, thread, session.run.id, "hello")
    thread.close()
    [snapshot] = store.snapshots(session.run.id)
    assert (snapshot.step, snapshot.adapter, snapshot.ok) == (0, "agent", True)
