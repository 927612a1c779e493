"""The gateway on real sockets against bad input: odd bodies, failing upstreams, hang-ups."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import os
import socket
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import openai
import pytest
from aiohttp import web

from forkpoint.engine.config import OnHangup
from forkpoint.models import Origin, RunStatus
from forkpoint.testing.upstream import ErrorReply, Reply, ScriptedUpstream
from tests.raw_server import RawServer
from tests.services import Service


class ToolService(Service):
    """An HTTP service with the awkward endpoints a tool API may have."""

    def __init__(self) -> None:
        self.hits = 0
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/echo", self.echo)
        app.router.add_get("/gzip", self.gzipped)
        app.router.add_get("/stall", self.stall)
        app.router.add_get("/drip", self.drip)
        app.router.add_get("/status/{code}", self.status)
        super().__init__(app, "tool-service")

    async def echo(self, request: web.Request) -> web.Response:
        self.hits += 1
        body = await request.read()
        return web.Response(
            body=body, content_type=request.content_type or "application/octet-stream"
        )

    async def gzipped(self, request: web.Request) -> web.Response:
        self.hits += 1
        return web.Response(
            body=gzip.compress(b'{"result": "compressed"}'),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    async def stall(self, request: web.Request) -> web.Response:
        self.hits += 1
        await asyncio.sleep(5)
        return web.Response(text="too late")

    async def drip(self, request: web.Request) -> web.StreamResponse:
        """A chunked body of 50 pieces, 20 ms apart."""
        self.hits += 1
        response = web.StreamResponse()
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):  # the proxy hangs up when its client does
            for index in range(50):
                await response.write(b"piece %d\n" % index)
                await asyncio.sleep(0.02)
            await response.write_eof()
        return response

    async def status(self, request: web.Request) -> web.Response:
        self.hits += 1
        code = int(request.match_info["code"])
        return web.json_response(
            {"error": {"message": f"status {code}"}}, status=code, headers={"Retry-After": "1"}
        )


@pytest.fixture
def tools() -> Iterator[ToolService]:
    service = ToolService()
    yield service
    service.stop()


def request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> tuple[int, dict, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(
            method,
            parts.path + (f"?{parts.query}" if parts.query else ""),
            body=body,
            headers=headers or {},
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


@pytest.fixture
def recording(start_proxy, tools):  # type: ignore[no-untyped-def]
    thread = start_proxy(None, routes={"tools": tools.url}, read_timeout=0.5)
    thread.run = thread.record().run
    return thread


def replay(start_proxy, recording):  # type: ignore[no-untyped-def]
    recording.close()
    thread = start_proxy(None)
    thread.run = thread.replay(recording.run.id).run
    return thread


def test_malformed_json_and_binary_bodies_pass_through_and_replay(
    start_proxy, store, recording, tools
):
    bodies = [b'{"broken": ', bytes(range(256)) * 4, b"\x1f\x8b not really gzip"]
    live = [request(recording.proxy.url + "/tools/echo", "POST", body)[2] for body in bodies]
    assert live == bodies
    replaying = replay(start_proxy, recording)
    hits = tools.hits
    again = [request(replaying.proxy.url + "/tools/echo", "POST", body)[2] for body in bodies]
    assert again == bodies and tools.hits == hits


def test_compressed_responses_are_passed_and_stored_as_sent(start_proxy, store, recording):
    _, headers, body = request(
        recording.proxy.url + "/tools/gzip", headers={"Accept-Encoding": "gzip"}
    )
    assert (
        headers["Content-Encoding"] == "gzip"
        and gzip.decompress(body) == b'{"result": "compressed"}'
    )
    replaying = replay(start_proxy, recording)
    [exchange] = store.exchanges(recording.run.id)
    assert exchange.response_body == body
    assert exchange.summary is not None and exchange.summary.kind == "tool"
    assert request(replaying.proxy.url + "/tools/gzip")[2] == body


def test_a_20_mb_body_is_recorded_and_replayed(start_proxy, store, recording):
    body = os.urandom(1024) * (20 * 1024)
    status, _, echoed = request(recording.proxy.url + "/tools/echo", "POST", body)
    assert status == 200 and echoed == body
    replaying = replay(start_proxy, recording)
    assert request(replaying.proxy.url + "/tools/echo", "POST", body)[2] == body


def test_a_body_over_the_limit_is_refused_with_413(start_proxy, tools):
    thread = start_proxy(None, routes={"tools": tools.url}, max_body=1024)
    thread.record()
    status, _, body = request(thread.proxy.url + "/tools/echo", "POST", b"x" * 4096)
    assert status == 413 and b"--max-body" in body


@pytest.mark.parametrize("code", [500, 429, 404])
def test_upstream_errors_pass_through_are_recorded_and_replay(start_proxy, store, recording, code):
    status, headers, body = request(recording.proxy.url + f"/tools/status/{code}")
    assert status == code and headers["Retry-After"] == "1"
    replaying = replay(start_proxy, recording)
    assert request(replaying.proxy.url + f"/tools/status/{code}")[:3:2] == (code, body)


def test_a_stalled_upstream_is_given_up_on_and_the_agent_sees_its_connection_close(
    store, recording
):
    started = time.monotonic()
    with pytest.raises(http.client.RemoteDisconnected):
        request(recording.proxy.url + "/tools/stall")
    assert time.monotonic() - started < 3
    recording.close()
    [exchange] = store.exchanges(recording.run.id)
    assert exchange.status is None and exchange.complete is False
    assert "did not answer in time" in (exchange.error or "")


class DroppingUpstream(RawServer):
    """An upstream whose first `drops` connections close before any answer (a reset, a
    restart), then a ScriptedUpstream's answers."""

    def __init__(self, real_url: str, drops: int):
        self.real = urlsplit(real_url)
        self.left = drops
        self.accepted = 0
        super().__init__()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.left > 0:
            self.left -= 1
            await reader.readuntil(b"\r\n\r\n")
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(self.real.hostname, self.real.port)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def test_an_upstream_that_drops_the_connection_is_retried_by_the_sdk_as_without_forkpoint(
    start_upstream, start_proxy, store
):
    """A dropped connection is a network failure the SDK retries; forkpoint passes it on as
    one (no 502 telling it not to retry), and a replay drops it again, so the SDK retries
    the same way and the run replays to the end."""
    real = start_upstream()
    dropping = DroppingUpstream(real.url, drops=1)
    try:
        thread = start_proxy(dropping.url)
        run = thread.record().run
        with openai.OpenAI(base_url=thread.proxy.url + "/v1", api_key="k", max_retries=2) as client:
            answer = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
        assert answer.choices[0].message.content == "[gpt-4o] hi"
        thread.close()
    finally:
        dropping.stop()
    dropped, answered = store.exchanges(run.id)
    assert dropped.status is None and not dropped.complete
    assert "cannot reach upstream" in (dropped.error or "")
    assert answered.status == 200
    real.stop()
    replaying = start_proxy(None)
    replaying.replay(run.id)
    with openai.OpenAI(base_url=replaying.proxy.url + "/v1", api_key="k", max_retries=2) as client:
        again = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    assert again.choices[0].message.content == "[gpt-4o] hi"


def test_an_unreachable_upstream_is_a_connection_error_not_a_final_502(start_proxy, store):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    thread = start_proxy(dead)
    run = thread.record().run
    with openai.OpenAI(base_url=thread.proxy.url + "/v1", api_key="k", max_retries=1) as client:
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
    thread.close()
    attempts = store.exchanges(run.id)
    assert len(attempts) == 2  # the SDK retried, as it does against a dead host
    assert all("cannot reach upstream" in (e.error or "") for e in attempts)


def test_an_upstream_that_cuts_a_stream_is_recorded_as_incomplete_and_cut_again_on_replay(
    start_upstream, start_proxy, store
):
    upstream = start_upstream(
        ScriptedUpstream(lambda p: Reply(text="a b c d e f g h", cut_after=4))
    )
    thread = start_proxy(upstream.url)
    run = thread.record().run
    with openai.OpenAI(base_url=thread.proxy.url + "/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIError):
            list(
                client.chat.completions.create(
                    model="gpt-4o", stream=True, messages=[{"role": "user", "content": "x"}]
                )
            )
    thread.close()
    [exchange] = store.exchanges(run.id)
    assert exchange.complete is False and "cut" in (exchange.error or "")
    assert exchange.chunks and b"[DONE]" not in exchange.response_body
    assert exchange.summary is not None and exchange.summary.text  # the partial text was read
    replaying = start_proxy(None)
    replaying.replay(run.id)
    with openai.OpenAI(base_url=replaying.proxy.url + "/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIError):
            list(
                client.chat.completions.create(
                    model="gpt-4o", stream=True, messages=[{"role": "user", "content": "x"}]
                )
            )


@pytest.mark.parametrize("on_hangup", list(OnHangup))
def test_a_client_that_hangs_up_mid_stream_loses_nothing_and_others_are_served(
    start_proxy, store, tools, on_hangup
):
    thread = start_proxy(None, routes={"tools": tools.url}, on_hangup=on_hangup)
    run = thread.record().run
    host, port = urlsplit(thread.proxy.url).hostname, urlsplit(thread.proxy.url).port
    with socket.create_connection((host, port)) as sock:
        sock.sendall(b"GET /tools/drip HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while b"piece 0" not in received:
            received += sock.recv(4096)
    # the hang-up is noticed at the next write; meanwhile another run is served normally
    status, _, body = request(thread.proxy.url + "/r/other-run/tools/echo", "POST", b"still here")
    assert (status, body) == (200, b"still here")
    wait_for(lambda: thread.proxy.recorder.flush(1) and store.step_count(run.id) == 1)
    thread.close()
    [left] = store.exchanges(run.id)
    if on_hangup is OnHangup.CANCEL:  # kept as far as the agent had it
        assert left.complete is False and "client disconnected" in (left.error or "")
        assert left.response_body.startswith(b"piece 0")
    else:  # read on to its end, for a resume
        assert left.complete is True and left.error is None
        assert "hung up" in (left.note or "")
        assert left.response_body == b"".join(b"piece %d\n" % i for i in range(50))
    [other] = store.exchanges("other-run")
    assert other.response_body == b"still here"


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_runs_are_chosen_by_path_prefix_or_header(start_proxy, store, tools):
    thread = start_proxy(None, routes={"tools": tools.url})
    default = thread.record().run
    request(thread.proxy.url + "/tools/echo", "POST", b"default")
    request(thread.proxy.url + "/r/run-a/tools/echo", "POST", b"prefixed")
    request(
        thread.proxy.url + "/tools/echo", "POST", b"header", headers={"X-Forkpoint-Run": "run-b"}
    )
    status, _, _ = request(thread.proxy.url + "/r/bad%20id!/tools/echo", "POST", b"")
    thread.close()
    assert status == 400
    bodies = {
        run: [e.request_body for e in store.exchanges(run)]
        for run in (default.id, "run-a", "run-b")
    }
    assert bodies == {default.id: [b"default"], "run-a": [b"prefixed"], "run-b": [b"header"]}
    assert store.get_run("run-a").status is RunStatus.FINISHED
    [with_header] = store.exchanges("run-b")
    assert "x-forkpoint-run" not in {k.lower() for k, _ in with_header.request_headers}


def test_an_error_reply_from_the_llm_is_recorded_and_replayed(start_upstream, start_proxy, store):
    upstream = start_upstream(
        ScriptedUpstream(lambda p: ErrorReply(429, "slow down", "rate_limit_error"))
    )
    thread = start_proxy(upstream.url)
    run = thread.record().run
    for base in (thread.proxy.url,):
        with openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0) as client:
            with pytest.raises(openai.RateLimitError, match="slow down"):
                client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "x"}]
                )
    thread.close()
    upstream.stop()
    replaying = start_proxy(None)
    replaying.replay(run.id)
    with openai.OpenAI(base_url=replaying.proxy.url + "/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.RateLimitError, match="slow down"):
            client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}]
            )
    [exchange] = store.exchanges(run.id)
    assert exchange.status == 429 and exchange.origin is Origin.LIVE


class SlowBodyUpstream(RawServer):
    """An upstream that sends its head at once, then its 5-byte body after `delay` seconds,
    or, with `cut`, closes the connection instead."""

    def __init__(self, delay: float, *, cut: bool = False):
        self.delay, self.cut = delay, cut
        super().__init__()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(self.delay)
        if self.cut:
            writer.transport.abort()
            return
        writer.write(b"hello")
        await writer.drain()
        writer.close()


def _get(proxy_url: str) -> tuple[bytes, float, bytes]:
    """GET /file through the proxy: the first bytes the agent got, when, and the rest."""
    port = urlsplit(proxy_url).port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as agent:
        agent.sendall(b"GET /file HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        sent = time.monotonic()
        head = agent.recv(4096)
        head_after = time.monotonic() - sent
        rest = b""
        with contextlib.suppress(ConnectionError):
            while data := agent.recv(4096):
                rest += data
    return head, head_after, rest


@pytest.mark.parametrize("cut", [False, True], ids=["slow-body", "cut-after-head"])
def test_a_head_reaches_the_agent_when_the_upstream_sends_it_not_with_a_late_body(
    start_proxy, cut
):
    """forkpoint sends a head with its body in one write when the body is at hand; a head
    whose body is late, or never comes, still goes out as soon as it arrives, and a replay
    of a cut answer sends its head before it cuts."""
    upstream = SlowBodyUpstream(1.0, cut=cut)
    try:
        thread = start_proxy(upstream.url)
        run = thread.record().run
        head, head_after, rest = _get(thread.proxy.url)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\n\r\n" in head
        assert head_after < 0.5, f"the head came {head_after:.2f} s after the request"
        assert (head + rest).endswith(b"\r\n\r\n" if cut else b"\r\n\r\nhello")
    finally:
        upstream.stop()
    thread.close()  # every exchange committed before another proxy loads the run
    replaying = start_proxy(None)
    replaying.replay(run.id)
    head, _, rest = _get(replaying.proxy.url)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert (head + rest).endswith(b"\r\n\r\n" if cut else b"\r\n\r\nhello")
