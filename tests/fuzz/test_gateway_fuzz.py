"""The gateway over random requests, recording and replaying: methods, paths, headers, bodies
(malformed and deep JSON, binary, wrong or unknown encodings) and raw bytes that are no HTTP.
forkpoint never answers 500, never logs a traceback, and keeps serving."""

from __future__ import annotations

import gzip
import json
import logging
import os
import socket
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import brotli
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.proxy import ProxyThread

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd

EXAMPLES = int(os.environ.get("FORKPOINT_FUZZ_EXAMPLES", "150"))
ANSWER = b'{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[]}'


class Upstream:
    """Answers every request with one JSON body, whatever it was sent."""

    def __init__(self) -> None:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self.answer)
        self._runner = web.AppRunner(app, auto_decompress=False, access_log=None)
        self._thread = LoopThread("fuzz-upstream")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def answer(self, request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    def stop(self) -> None:
        self._thread.call(self._runner.cleanup())
        self._thread.close()


class Tracebacks(logging.Handler):
    """Every log record that carries a traceback, or says a request was not handled."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Unhandled exception" in record.getMessage():
            self.found.append(self.format(record))


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    service = Upstream()
    yield service
    service.stop()


@pytest.fixture
def tracebacks() -> Iterator[Tracebacks]:
    handler = Tracebacks()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)


PATHS = [
    "/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/embeddings",
    "/anthropic/v1/messages", "/v1beta/models/gemini-2.0-flash:generateContent", "/mcp",
    "/r/fuzz-run/v1/chat/completions", "/r//v1/x", "/r/%2e%2e/x", "/_forkpoint/adapters",
    "/_forkpoint/", "/tools/orders/A1", "/", "//double", "/v1/chat/completions?stream=true&key=1",
]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "PROPFIND", "WS"]
HEADER_NAMES = [
    "content-type", "content-encoding", "accept-encoding", "x-forkpoint-run", "authorization",
    "x-api-key", "cookie", "accept", "user-agent", "x-stainless-retry-count", "anthropic-version",
    "x-forkpoint-origin", "x-forkpoint-intercept", "expect", "te", "trailer",
]  # fmt: skip
CONTENT_TYPES = [
    "application/json", "text/event-stream", "text/plain; charset=utf-8", "application/x-ndjson",
    "multipart/form-data; boundary=xyz", "multipart/form-data", "application/x-www-form-urlencoded",
    "application/octet-stream", "",
]  # fmt: skip
ENCODERS = {
    "gzip": gzip.compress, "br": brotli.compress, "deflate": zlib.compress, "zstd": zstd.compress,
}  # fmt: skip

_TOKEN = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-_.~"), max_size=12)
_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)  # fmt: skip


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["json", "deep", "deep-object", "binary", "text", "broken", "form"]))
    if kind == "json":
        value = draw(_JSON)
        if draw(st.booleans()):
            value = {"model": draw(st.sampled_from(["gpt-4o", "claude", ""])), "messages": value}
        return json.dumps(value).encode()
    if kind == "deep":
        depth = draw(st.integers(1, 3000))
        return b"[" * depth + b"]" * depth
    if kind == "deep-object":
        depth = draw(st.integers(200, 2000))
        return b'{"a":' * depth + b"1" + b"}" * depth
    if kind == "binary":
        return draw(st.binary(max_size=2000))
    if kind == "form":
        return b"api_key=sk-1&x=" + draw(_VALUE).encode("latin-1")
    text = draw(st.text(max_size=300)).encode()
    return text if kind == "text" else b'{"model": "gpt-4o", "messages": [' + text


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 9)) == 0:  # no HTTP at all
        return draw(st.binary(min_size=1, max_size=200)) + b"\r\n\r\n"
    method = draw(st.sampled_from(METHODS) | _TOKEN.filter(bool).map(str.upper))
    path = draw(st.sampled_from(PATHS)) + draw(_TOKEN.map(lambda t: f"/{t}" if t else ""))
    headers = [(n, draw(_VALUE)) for n in draw(st.lists(st.sampled_from(HEADER_NAMES), max_size=4))]
    headers.append(("content-type", draw(st.sampled_from(CONTENT_TYPES))))
    body = draw(bodies()) if draw(st.integers(0, 4)) else b""
    coding = draw(st.sampled_from([None, "gzip", "br", "deflate", "zstd", "gzip, br", "bogus"]))
    if coding is not None:
        honest = draw(st.booleans())
        for name in reversed([c.strip() for c in coding.split(",")]) if honest else []:
            body = ENCODERS[name](body) if name in ENCODERS else body
        headers.append(("content-encoding", coding))
    head = f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in headers
    )
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode("latin-1") + body


def exchange(url: str, data: bytes) -> int | None:
    """Send raw bytes, read the answer to its end; its status (None: the connection dropped)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        try:
            sock.sendall(data)
        except ConnectionError:
            return None
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionError:
            pass
    if not answer:
        return None
    return int(answer.split(b" ", 2)[1])


def fuzz(url: str, tracebacks: Tracebacks, statuses: Counter[int | None]) -> None:
    @settings(
        max_examples=EXAMPLES, deadline=None, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )  # fmt: skip
    @given(data=requests())
    def check(data: bytes) -> None:
        status = exchange(url, data)
        statuses[status] += 1
        assert status != 500, data
        assert not tracebacks.found, tracebacks.found[0]

    check()


def ask(url: str) -> int | None:
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "still there?"}]}'
    return exchange(
        url,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body),
    )


def test_the_gateway_survives_random_requests_recording_then_replaying(
    tmp_path: Path, upstream: Upstream, tracebacks: Tracebacks
) -> None:
    store = SqliteStore(tmp_path / "fuzz.db")
    config = EngineConfig(routes=Routes.of(upstream.url, None))
    recorded: Counter[int | None] = Counter()
    recording = ProxyThread(store, config, read_timeout=10, client_timeout=10)
    try:
        run = recording.record().run
        url = recording.__enter__().url
        assert ask(url) == 200
        fuzz(url, tracebacks, recorded)
        assert ask(url) == 200  # still serving
    finally:
        recording.close()
    replayed: Counter[int | None] = Counter()
    replaying = ProxyThread(store, EngineConfig(), read_timeout=10, client_timeout=10)
    try:
        replaying.replay(run.id)
        url = replaying.__enter__().url
        fuzz(url, tracebacks, replayed)
        assert ask(url) in (200, 400)  # served from the recording, or a divergence after it
    finally:
        replaying.close()
        store.close()
    assert not tracebacks.found, tracebacks.found[0]
    print(f"gateway fuzz: recording {dict(recorded)}, replaying {dict(replayed)}")
