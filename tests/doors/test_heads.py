"""Long header lines through the proxy, both ways, with curl as the agent's client: a head
curl takes from an upstream directly, it takes through forkpoint (issue 25.15)."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from forkpoint.doors.heads import HEAD_LIMITS
from forkpoint.models import Origin
from forkpoint.runtime import certs
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.https import TestCA
from tests.https_services import HOST_A
from tests.services import Service

LONG = 64 * 1024  # a CSP or a cookie of 64 KiB: more than aiohttp's 8,190, less than curl's 100 KiB
POLICY = "default-src 'self';" + " img-src https://cdn.example" * (LONG // 28)
COOKIE = "session=" + "c" * LONG


def long_heads_app() -> web.Application:
    """An upstream whose answers carry a long Content-Security-Policy and Set-Cookie, and that
    echoes the length of the Cookie it got."""

    async def page(request: web.Request) -> web.Response:
        cookie = request.headers.get("Cookie", "")
        return web.json_response(
            {"cookie": len(cookie)},
            headers={"Content-Security-Policy": POLICY, "Set-Cookie": COOKIE},
        )

    app = web.Application()
    app.router.add_get("/v1/page", page)
    return app


@pytest.fixture
def upstream() -> Iterator[Service]:
    # the upstream itself takes a long Cookie, as the servers a long cookie is sent to do
    service = Service(long_heads_app(), "long-heads", **HEAD_LIMITS)
    yield service
    service.stop()


class HttpsService:
    """`long_heads_app` over HTTPS, taking heads as large as forkpoint does."""

    def __init__(self, ca: TestCA):
        self._runner = web.AppRunner(long_heads_app(), access_log=None, **HEAD_LIMITS)
        self._thread = LoopThread("long-heads-https")
        self.url = self._thread.call(self._start(ca))

    async def _start(self, ca: TestCA) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST_A, 0, ssl_context=ca.server_context([HOST_A]))
        await site.start()
        return f"https://{HOST_A}:{self._runner.addresses[0][1]}"

    async def _stop(self) -> None:
        await self._runner.cleanup()
        await asyncio.sleep(0.01)  # a closed transport lets go of its socket a loop turn later

    def stop(self) -> None:
        self._thread.call(self._stop())
        self._thread.close()


def curl(url: str, *options: str) -> tuple[str, str]:
    """The head and body curl gets (`-D -` writes the head before the body)."""
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "20", "-D", "-", *options, url],
        capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    head, _, body = done.stdout.decode().rpartition("\r\n\r\n")
    return head, body


def header_of(head: str, name: str) -> str:
    lines = [line for line in head.split("\r\n") if line.lower().startswith(name.lower() + ":")]
    assert lines, head[:300]
    return lines[0].partition(":")[2].strip()


def test_a_long_answer_header_reaches_curl_and_is_recorded_and_replayed(
    start_proxy, store, upstream
):
    direct, _ = curl(upstream.url + "/v1/page")
    assert header_of(direct, "Content-Security-Policy") == POLICY  # curl takes it directly
    recording = start_proxy(upstream.url)
    run = recording.record().run
    head, body = curl(recording.proxy.url + "/v1/page")
    assert head.startswith("HTTP/1.1 200"), head[:200]
    assert header_of(head, "Content-Security-Policy") == POLICY
    assert header_of(head, "Set-Cookie") == COOKIE
    recording.close()
    [exchange] = store.exchanges(run.id)
    assert exchange.status == 200 and exchange.complete and exchange.error is None
    assert dict(exchange.response_headers)["Content-Security-Policy"] == POLICY
    replaying = start_proxy(None)
    replaying.replay(run.id)
    again, again_body = curl(replaying.proxy.url + "/v1/page")
    assert header_of(again, "Content-Security-Policy") == POLICY and again_body == body


def test_a_long_cookie_from_the_agent_reaches_the_upstream(start_proxy, store, upstream):
    recording = start_proxy(upstream.url)
    run = recording.record().run
    head, body = curl(recording.proxy.url + "/v1/page", "-H", f"Cookie: {COOKIE}")
    assert head.startswith("HTTP/1.1 200"), head[:200]
    assert body == f'{{"cookie": {len(COOKIE)}}}'
    recording.close()
    [exchange] = store.exchanges(run.id)
    assert dict(exchange.request_headers)["Cookie"] == "[redacted]"  # still a secret
    assert exchange.origin is Origin.LIVE


def test_a_long_answer_header_reaches_curl_through_the_interceptor(start_proxy, tmp_path: Path):
    ca = TestCA(tmp_path / "ca")
    confdir = tmp_path / "config" / "forkpoint"
    certs.ca_cert(confdir)
    service = HttpsService(ca)
    try:
        proxy = start_proxy(
            None, intercept=InterceptOptions(confdir=confdir, upstream_ca=str(ca.cert_path))
        )
        run = proxy.record().run.id
        interceptor = proxy.proxy.interceptor
        assert interceptor is not None
        head, body = curl(
            service.url + "/v1/page",
            "--proxy", interceptor.url.replace("http://", f"http://{run}:@"),
            "--cacert", str(certs.ca_cert(confdir)), "-H", f"Cookie: {COOKIE}",
        )  # fmt: skip
        answer = head.split("\r\n\r\n")[-1]  # after the CONNECT's own answer
        assert answer.startswith("HTTP/1.1 200"), head[:300]
        assert header_of(answer, "Content-Security-Policy") == POLICY
        assert body == f'{{"cookie": {len(COOKIE)}}}'
    finally:
        service.stop()
