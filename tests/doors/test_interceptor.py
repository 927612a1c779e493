"""The interceptor on real sockets: HTTPS tool services behind it, clients told to use it.

Each test starts a proxy with its interceptor on the test's cassette, and HTTPS services with
certificates from a test CA the interceptor is told to trust (as `--upstream-ca` does).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from forkpoint.api.mocks import parse_mock
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.doors.interceptor import Interceptor, proxy_user
from forkpoint.engine.changes import Change
from forkpoint.models import Exchange, Origin, RunStatus
from forkpoint.runtime import certs
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.testing.https import TestCA
from tests.https_services import HOST_A, HOST_B, EchoService, LLMService, Service, tool_app

StartProxy = Callable[..., ProxyThread]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("test-ca"))


@pytest.fixture(scope="module")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """forkpoint's config dir, its CA made once for the module."""
    path = tmp_path_factory.mktemp("config") / "forkpoint"
    certs.ca_cert(path)
    return path


@pytest.fixture
def services(ca: TestCA) -> Iterator[Callable[..., Service]]:
    started: list[Service] = []

    def start(host: str = HOST_A, name: str = "tools", **options: Any) -> Service:
        service = Service(tool_app(name, **options), ca, host)
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def intercepting(start_proxy, ca: TestCA, confdir: Path) -> StartProxy:  # type: ignore[no-untyped-def]
    """Start a proxy with its interceptor; one at a time (mitmproxy's context is global)."""

    def start(**options: Any) -> ProxyThread:
        options.setdefault("upstream_ca", str(ca.cert_path))
        thread: ProxyThread = start_proxy(
            None, intercept=InterceptOptions(confdir=confdir, **options)
        )
        return thread

    return start


def client(
    thread: ProxyThread, confdir: Path, run: str | None = None, **session: Any
) -> requests.Session:
    """A requests session that goes through the interceptor and trusts forkpoint's CA."""
    interceptor = thread.proxy.interceptor
    assert interceptor is not None
    url = interceptor.url
    if run is not None:
        url = url.replace("http://", f"http://{run}:@")
    opened = requests.Session()
    opened.trust_env = False
    opened.proxies = {"https": url, "http": url}
    opened.verify = str(certs.ca_cert(confdir))
    for key, value in session.items():
        setattr(opened, key, value)
    return opened


def calls(http: requests.Session, tools: str) -> list[Any]:
    """A tool-using agent's calls: a search, a refund, a stream."""
    return [
        http.get(f"{tools}/v1/search", params={"q": "order A1"}).json(),
        http.post(f"{tools}/v1/refund", json={"order": "A1"}).json(),
        http.get(f"{tools}/v1/events").text,
    ]


def test_each_intercepted_call_is_an_exchange_of_the_run(intercepting, services, confdir, store):
    tools = services()
    proxy = intercepting()
    run = proxy.record().run.id
    with client(proxy, confdir) as http:
        seen = calls(http, tools.url)
        echoed = http.get(f"{tools.url}/v1/headers", headers={"X-Forkpoint-Run": run}).json()
    exchanges = recorded(proxy, store, run)

    assert seen[0] == {"tool": "tools", "q": "order A1", "n": 1}
    assert seen[2].count("data: ") == 3
    # forkpoint's own headers and the proxy credentials never reach the service
    assert "x-forkpoint-run" not in echoed and "proxy-authorization" not in echoed
    authority = tools.url.removeprefix("https://")
    assert [(e.method, e.route) for e in exchanges] == [
        ("GET", f"/{authority}/v1/search?q=order+A1"),
        ("POST", f"/{authority}/v1/refund"),
        ("GET", f"/{authority}/v1/events"),
        ("GET", f"/{authority}/v1/headers"),
    ]
    search, refund, events, _ = exchanges
    assert search.upstream == f"{tools.url}/v1/search?q=order+A1"
    assert search.summary is not None and search.summary.kind == "tool"
    assert json.loads(refund.request_body) == {"order": "A1"}
    assert json.loads(refund.response_body)["refunded"] == "A1"
    assert search.chunks is None and search.status == 200 and search.complete
    # a stream is teed chunk by chunk, each with its offset
    assert events.chunks is not None and len(events.chunks) >= 2
    assert b"".join(c.data for c in events.chunks) == seen[2].encode()
    offsets = [c.offset_ms for c in events.chunks]
    assert offsets == sorted(offsets) and offsets[-1] >= 20


def test_streams_reach_the_client_as_they_arrive(intercepting, services, confdir, store):
    release = asyncio.Event()
    tools = services(release=release)
    proxy = intercepting()
    run = proxy.record().run.id
    with client(proxy, confdir) as http:
        response = http.get(f"{tools.url}/v1/events", stream=True)
        lines = response.iter_lines()
        # the upstream holds its last event until the client has the first: a buffering
        # proxy would deadlock here
        first = next(line for line in lines if line)
        tools.loop.call_soon_threadsafe(release.set)
        rest = [line for line in lines if line]
    assert json.loads(first.removeprefix(b"data: "))["i"] == 0
    assert len(rest) == 2
    assert recorded(proxy, store, run)[0].complete


def test_replay_serves_the_recorded_answers_offline(intercepting, services, confdir, store):
    tools = services()
    proxy = intercepting()
    recorded_run = proxy.record().run.id
    with client(proxy, confdir) as http:
        answers = calls(http, tools.url)
    assert len(recorded(proxy, store, recorded_run)) == 3
    tools.stop()

    replay = proxy.replay(recorded_run).run.id
    with client(proxy, confdir, replay) as http:
        assert calls(http, tools.url) == answers
        unknown = http.get(f"{tools.url}/v1/search", params={"q": "never asked"})
    assert unknown.status_code == 400
    assert "forkpoint divergence" in unknown.text
    exchanges = recorded(proxy, store, replay)
    assert [e.origin for e in exchanges] == [Origin.REPLAYED] * 3 + [Origin.DIVERGED]
    assert exchanges[2].chunks is not None


def test_a_fork_mocks_one_tool_host(intercepting, services, confdir, store, tmp_path):
    search, refunds = services(HOST_A, "search"), services(HOST_B, "refunds")
    proxy = intercepting()
    parent = proxy.record().run.id
    with client(proxy, confdir) as http:
        http.get(f"{search.url}/v1/search", params={"q": "x"})
        http.post(f"{refunds.url}/v1/refund", json={"order": "A1"})
    assert len(recorded(proxy, store, parent)) == 2

    (tmp_path / "search.json").write_text('{"tool": "mocked search"}')
    mock = parse_mock(f"{HOST_A}:*=@search.json", base_dir=tmp_path)
    child = proxy.fork(parent, at=0, change=Change(mocks=(mock,))).run.id
    with client(proxy, confdir, child) as http:
        mocked = http.get(f"{search.url}/v1/search", params={"q": "x"}).json()
        live = http.post(f"{refunds.url}/v1/refund", json={"order": "A1"}).json()
    assert mocked == {"tool": "mocked search"}
    assert live == {"tool": "refunds", "refunded": "A1", "n": 2}
    assert [e.origin for e in recorded(proxy, store, child)] == [Origin.MOCKED, Origin.LIVE]


def test_a_fork_sends_intercepted_llm_calls_to_its_model_and_upstream(
    intercepting, ca, confdir, store
):
    first, second = LLMService(ca, HOST_A), LLMService(ca, HOST_B)
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    try:
        proxy = intercepting()
        parent = proxy.record().run.id
        with client(proxy, confdir) as http:
            http.post(f"{first.url}/v1/chat/completions", json=chat)
        assert len(recorded(proxy, store, parent)) == 1
        change = Change(model="gpt-4o-mini", upstream=second.url)
        child = proxy.fork(parent, at=0, change=change).run.id
        with client(proxy, confdir, child) as http:
            answer = http.post(f"{first.url}/v1/chat/completions", json=chat).json()
    finally:
        first.stop()
        second.stop()
    assert answer["model"].startswith("gpt-4o-mini")
    assert (first.upstream.request_count, second.upstream.request_count) == (1, 1)
    (exchange,) = recorded(proxy, store, child)
    assert exchange.upstream == f"{second.url}/v1/chat/completions"
    assert exchange.summary is not None and exchange.summary.kind == "llm"
    # the run keeps what went upstream (the change applied), and what the agent sent beside it
    assert json.loads(exchange.request_body)["model"] == "gpt-4o-mini"
    assert exchange.asked_body is not None and json.loads(exchange.asked_body) == chat


def test_runs_are_told_apart_by_proxy_user_or_run_header(intercepting, services, confdir, store):
    tools = services()
    proxy = intercepting()
    with client(proxy, confdir, "run-by-user") as http:
        http.get(f"{tools.url}/v1/search", params={"q": "a"})
    with client(proxy, confdir) as http:
        http.get(f"{tools.url}/v1/search", params={"q": "b"}, headers={"X-Forkpoint-Run": "run-by-header"})  # fmt: skip
    assert [e.route[-1] for e in recorded(proxy, store, "run-by-user")] == ["a"]
    assert [e.route[-1] for e in recorded(proxy, store, "run-by-header")] == ["b"]


def test_a_bad_upstream_certificate_is_an_error_not_a_success(intercepting, services, confdir, store):  # fmt: skip
    tools = services()
    proxy = intercepting(upstream_ca=None)  # the service's CA is not trusted
    run = proxy.record().run.id
    with client(proxy, confdir) as http:
        response = http.get(f"{tools.url}/v1/search", params={"q": "x"})
    assert response.status_code == 502  # mitmproxy's answer to a dropped connection
    (exchange,) = recorded(proxy, store, run)
    assert exchange.status is None and not exchange.complete  # no answer came
    assert exchange.error is not None and "certificate" in exchange.error.lower()


def test_insecure_upstream_accepts_any_certificate(intercepting, services, confdir):
    tools = services()
    proxy = intercepting(upstream_ca=None, insecure_upstream=True)
    proxy.record()
    with client(proxy, confdir) as http:
        assert http.get(f"{tools.url}/v1/search", params={"q": "x"}).json()["q"] == "x"


def test_an_upstream_that_is_down_is_recorded_as_a_failure(intercepting, services, confdir, store):
    tools = services()
    tools.stop()
    proxy = intercepting()
    run = proxy.record().run.id
    with client(proxy, confdir) as http:
        response = http.get(f"{tools.url}/v1/search", params={"q": "x"})
    assert response.status_code == 502
    (exchange,) = recorded(proxy, store, run)
    assert exchange.status is None and not exchange.complete and exchange.error


def test_a_client_that_does_not_trust_the_ca_fails_and_nothing_is_recorded(
    intercepting, services, confdir, store, caplog
):
    tools = services()
    proxy = intercepting()
    run = proxy.record().run.id
    with (
        caplog.at_level(logging.WARNING, logger="forkpoint.doors.interceptor"),
        client(proxy, confdir, verify=certifi.where()) as http,
        pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        http.get(f"{tools.url}/v1/search", params={"q": "x"})
    wait_for(lambda: "does not trust forkpoint's CA" in caplog.text)
    assert nothing_recorded(proxy, store, run)


def talk(proxy: ProxyThread, confdir: Path, url: str, run: str) -> list[object]:
    """A websocket client through the interceptor: a greeting, two texts, bytes, then a close
    the server makes."""
    context = ssl.create_default_context(cafile=certs.ca_cert(confdir))
    interceptor = proxy.proxy.interceptor
    assert interceptor is not None
    heard: list[object] = []
    with connect(
        url.replace("https://", "wss://") + "/ws", ssl=context, proxy=interceptor.url,
        additional_headers={"X-Forkpoint-Run": run}, open_timeout=5,
    ) as socket:  # fmt: skip
        heard.append(socket.recv(timeout=5))
        for text in ("hi", "there"):
            socket.send(text)
            heard.append(socket.recv(timeout=5))
        socket.send(b"\x01\x02\x03")
        heard.append(socket.recv(timeout=5))
        socket.send("quit")
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=5)
        heard.append((closed.value.rcvd.code, closed.value.rcvd.reason) if closed.value.rcvd else None)
    return heard


def test_websockets_are_recorded_and_replayed_message_by_message(
    intercepting, services, confdir, store
):
    tools = services()
    proxy = intercepting()
    run = proxy.record().run.id
    heard = talk(proxy, confdir, tools.url, run)
    assert heard == ["hello from tools", "echo hi 1", "echo there 2", b"\x03\x02\x01", (4000, "bye")]
    authority = tools.url.removeprefix("https://")
    exchanges = recorded(proxy, store, run)
    assert [(e.method, e.route, e.status) for e in exchanges] == [
        ("GET", f"/{authority}/ws", 101),
        *[("WS", f"/{authority}/ws", 101)] * 4,
    ]
    upgrade, hi, _, binary, quit_ = exchanges
    assert [c.data for c in upgrade.chunks or []] == [b"hello from tools"]
    assert (hi.request_body, hi.response_body) == (b"hi", b"echo hi 1")
    assert dict(binary.request_headers)["websocket-message"] == "binary"
    assert dict(quit_.response_headers)["websocket-close"] == "4000 bye"
    tools.stop()

    replay = proxy.replay(run).run.id
    assert talk(proxy, confdir, tools.url, replay) == heard  # offline: the service is gone
    assert {e.origin for e in recorded(proxy, store, replay)} == {Origin.REPLAYED}


def test_non_http_traffic_passes_through_unrecorded(intercepting, confdir, store, caplog):
    echo = EchoService()
    proxy = intercepting()
    run = proxy.record().run.id
    try:
        with (
            caplog.at_level(logging.WARNING, logger="forkpoint.doors.interceptor"),
            tunnel(proxy, *echo.address) as raw,
        ):
            raw.sendall(b"\x00\x01 not http\n")
            assert read_until(raw, b"\n") == b"echo \x00\x01 not http\n"
    finally:
        echo.stop()
    wait_for(lambda: "non-HTTP traffic" in caplog.text)
    assert nothing_recorded(proxy, store, run)


def test_the_run_status_is_kept_when_the_proxy_stops(start_proxy, ca, confdir, store, services):
    tools = services()
    thread = start_proxy(None, intercept=InterceptOptions(confdir=confdir, upstream_ca=str(ca.cert_path)))  # fmt: skip
    run = thread.record().run.id
    with client(thread, confdir) as http:
        http.get(f"{tools.url}/v1/search", params={"q": "x"})
    thread.close()
    assert store.get_run(run).status is RunStatus.FINISHED
    assert len(store.exchanges(run)) == 1


# The pieces, without sockets


def test_a_flow_is_handed_to_the_gateway_with_its_origin_run_and_secret():
    from mitmproxy import http
    from mitmproxy.test import tflow

    addon = Interceptor(("127.0.0.1", 8765), "s3cret")
    flow = tflow.tflow()
    flow.request = http.Request.make(
        "GET", "https://api.example.com:8443/v1/search?q=1",
        headers={"X-Forkpoint-Run": "run-7", "Proxy-Authorization": "Basic eDo=",
                 "X-Forkpoint-Origin": "http://evil.example"},
    )  # fmt: skip
    addon.requestheaders(flow)
    request = flow.request
    assert (request.scheme, request.host, request.port) == ("http", "127.0.0.1", 8765)
    assert request.path == "/v1/search?q=1"
    assert request.headers["x-forkpoint-origin"] == "https://api.example.com:8443"
    assert request.headers["x-forkpoint-intercept"] == "s3cret"
    assert request.headers["x-forkpoint-run"] == "run-7"
    assert "proxy-authorization" not in request.headers
    default_port = tflow.tflow()
    default_port.request = http.Request.make("POST", "https://api.openai.com/v1/chat/completions")
    addon.requestheaders(default_port)
    assert default_port.request.headers["x-forkpoint-origin"] == "https://api.openai.com"
    assert not request.stream and not default_port.request.stream  # small: read whole


@pytest.mark.parametrize(
    "framing", [{"Content-Length": str(5 * 2**20)}, {"Transfer-Encoding": "chunked"}]
)
def test_a_large_upload_goes_on_to_the_gateway_as_it_arrives(framing):
    from mitmproxy import http
    from mitmproxy.test import tflow

    flow = tflow.tflow()
    flow.request = http.Request.make("POST", "https://api.example.com/v1/files")
    flow.request.headers.pop("content-length", None)
    flow.request.headers.update(framing)
    Interceptor(("127.0.0.1", 8765), "s3cret").requestheaders(flow)
    assert flow.request.stream and flow.request.host == "127.0.0.1"


def test_the_run_comes_from_the_proxy_user_name():
    from mitmproxy import http

    def credentials(text: str) -> http.Headers:
        return http.Headers(proxy_authorization="Basic " + base64.b64encode(text.encode()).decode())

    assert proxy_user(credentials("run-7:")) == "run-7"
    assert proxy_user(credentials("run-7:secret")) == "run-7"
    assert proxy_user(credentials(":secret")) is None
    assert proxy_user(http.Headers(proxy_authorization="Bearer x")) is None
    assert proxy_user(http.Headers(proxy_authorization="Basic !!!")) is None
    assert proxy_user(http.Headers()) is None


def test_the_ca_key_is_private_and_the_bundle_holds_the_roots_and_the_ca(tmp_path):
    confdir = tmp_path / "forkpoint"
    cert = certs.ca_cert(confdir)
    assert (confdir / "mitmproxy-ca.pem").stat().st_mode & 0o777 == 0o600
    assert "forkpoint" in cert.read_text() or cert.read_bytes().startswith(b"-----BEGIN")
    bundle = certs.client_bundle(confdir).read_bytes()
    assert cert.read_bytes().strip() in bundle
    assert bundle.count(b"BEGIN CERTIFICATE") > 10  # the system's roots came along
    assert certs.ca_cert(confdir) == cert  # made once


def test_the_command_env_points_every_client_family_at_the_interceptor(tmp_path):
    bundle, ca = tmp_path / "bundle.pem", tmp_path / "ca.pem"
    env = certs.client_env(
        "http://run@127.0.0.1:9", bundle, ca, base={"no_proxy": "internal.example"}
    )
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        assert env[name] == "http://run@127.0.0.1:9"
    assert env["NO_PROXY"] == env["no_proxy"] == "internal.example,127.0.0.1,localhost,::1"
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        assert env[name] == str(bundle)
    assert env["NODE_EXTRA_CA_CERTS"] == str(ca)


def test_config_dir_follows_xdg():
    assert certs.config_dir({"XDG_CONFIG_HOME": "/x"}) == Path("/x/forkpoint")
    assert certs.config_dir({}) == Path.home() / ".config" / "forkpoint"


# Helpers


def recorded(thread: ProxyThread, store: SqliteStore, run: str) -> list[Exchange]:
    """The run's exchanges, with no waiting: each is handed to the recorder before its client
    has the whole answer."""
    thread.proxy.recorder.flush()
    return store.exchanges(run)


def nothing_recorded(thread: ProxyThread, store: SqliteStore, run: str) -> bool:
    """Asked once the hook that would have recorded has run (its warning is logged)."""
    thread.proxy.recorder.flush()
    return store.exchanges(run) == []


def tunnel(thread: ProxyThread, host: str, port: int) -> socket.socket:
    """A socket through the interceptor to host:port, as a client has after CONNECT."""
    interceptor = thread.proxy.interceptor
    assert interceptor is not None
    address, _, proxy_port = interceptor.url.removeprefix("http://").rpartition(":")
    raw = socket.create_connection((address, int(proxy_port)), timeout=5)
    raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    assert read_until(raw, b"\r\n\r\n").startswith(b"HTTP/1.1 200")
    return raw


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """Byte by byte, so nothing after `marker` is taken from the socket."""
    data = b""
    while not data.endswith(marker):
        data += read_exact(sock, 1)
    return data


def read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = sock.recv(size - len(data))
        assert piece, "connection closed"
        data += piece
    return data


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Some hooks run just after the client got its answer: give them a moment."""
    for _ in range(int(timeout / 0.02)):
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")
