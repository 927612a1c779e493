"""The proxy's token on real sockets: without it a request goes nowhere; with it (path
prefix, header, or the interceptor's proxy password) it is served, and the token reaches
neither the cassette nor the upstream."""

from __future__ import annotations

import logging
import socket
import urllib.error
import urllib.request
from pathlib import Path

import openai
import pytest
import requests
from websockets.exceptions import InvalidStatus

from forkpoint.runtime.intercept import InterceptOptions
from tests.doors.test_control import register
from tests.doors.test_interceptor import ca as ca  # the fixtures
from tests.doors.test_interceptor import client, recorded
from tests.doors.test_interceptor import confdir as confdir
from tests.doors.test_interceptor import services as services
from tests.doors.test_sockets import ask as socket_ask
from tests.doors.test_sockets import opened
from tests.doors.test_sockets import service as service

TOKEN = "s3cret-Token_1"


def ask(base: str, headers: dict[str, str] | None = None) -> str:
    with openai.OpenAI(
        base_url=f"{base}/v1", api_key="sk-agent", max_retries=0, default_headers=headers
    ) as agent:
        answer = agent.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    return answer.choices[0].message.content or ""


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_request_without_the_token_goes_nowhere(start_proxy, upstream, store):
    thread = start_proxy(upstream.url, token=TOKEN)
    url = thread.proxy.url
    for base, headers in (
        (url, None),
        (f"{url}/r/run1", None),
        (f"{url}/t/{TOKEN}x", None),
        (f"{url}/t/s3cret", None),
        (url, {"X-Forkpoint-Token": "s3cret-Token_2"}),
        (f"{url}/t/", None),
    ):
        with pytest.raises(openai.AuthenticationError, match="needs its token"):
            ask(base, headers)
    assert status_of(f"{url}/anything/at/all") == 401
    assert register(url, "http://127.0.0.1:1/state", run="run1")[0] == 401
    thread.close()
    assert upstream.request_count == 0
    assert store.list_runs() == []


def test_the_token_in_the_path_or_a_header_is_taken_off_before_anything_reads_it(
    start_proxy, upstream, store, cassette: Path
):
    thread = start_proxy(upstream.url, token=TOKEN)
    url = thread.proxy.url
    assert ask(f"{url}/t/{TOKEN}/r/run1") == "[gpt-4o] hi"
    assert ask(f"{url}/r/run1", {"X-Forkpoint-Token": TOKEN}) == "[gpt-4o] hi"
    assert ask(f"{url}/t/{TOKEN}") == "[gpt-4o] hi"  # the default run
    thread.close()
    [first, second] = store.exchanges("run1")
    assert first.route == second.route == "/v1/chat/completions"
    assert TOKEN not in repr(store.exchanges("run1"))
    written = [*cassette.parent.glob(cassette.name + "*"), *cassette.parent.glob("*.journals/*")]
    for raw in written:  # the cassette, its WAL and the recorder's journal
        if raw.is_file():
            assert TOKEN.encode() not in raw.read_bytes()
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"] * 3
    assert TOKEN not in repr(upstream.requests)


def test_a_proxy_beyond_loopback_makes_up_a_token_and_says_so(start_proxy, upstream, caplog):
    with caplog.at_level(logging.WARNING, logger="forkpoint"):
        thread = start_proxy(upstream.url, host="0.0.0.0")
    proxy = thread.proxy
    assert proxy.token_made and len(proxy.token or "") >= 32
    assert any("beyond loopback" in r.getMessage() for r in caplog.records)
    local = proxy.url.replace("0.0.0.0", "127.0.0.1")
    with pytest.raises(openai.AuthenticationError):
        ask(local)
    assert ask(f"{local}/t/{proxy.token}") == "[gpt-4o] hi"


def test_a_proxy_on_loopback_needs_no_token(start_proxy, upstream):
    proxy = start_proxy(upstream.url).proxy
    assert proxy.token is None
    assert ask(proxy.url) == "[gpt-4o] hi"


def test_the_interceptor_takes_the_token_as_the_proxy_password(
    start_proxy, services, ca, confdir, store
):
    tools = services()
    thread = start_proxy(
        None, token=TOKEN,
        intercept=InterceptOptions(confdir=confdir, upstream_ca=str(ca.cert_path)),
    )  # fmt: skip
    interceptor = thread.proxy.interceptor
    assert interceptor is not None
    with client(thread, confdir, run="run1") as http:  # a run, no password
        with pytest.raises(requests.exceptions.ProxyError, match="407"):
            http.get(f"{tools.url}/v1/search", params={"q": "x"})
    proxy_url = interceptor.env("run1")["HTTPS_PROXY"]
    assert f"run1:{TOKEN}@" in proxy_url  # what `record --intercept -- CMD` gives its command
    with client(thread, confdir) as http:
        http.proxies = {"https": proxy_url, "http": proxy_url}
        assert http.get(f"{tools.url}/v1/search", params={"q": "x"}).json()["q"] == "x"
        echoed = http.get(f"{tools.url}/v1/headers").json()
    assert TOKEN not in repr(echoed)
    exchanges = recorded(thread, store, "run1")
    assert len(exchanges) == 2 and TOKEN not in repr(exchanges)


def test_a_websocket_carries_the_token_in_its_path(start_proxy, store, service):
    thread = start_proxy(None, routes={"tools": service.url}, token=TOKEN)
    run = thread.record().run.id
    with pytest.raises(InvalidStatus, match="401"):
        opened(thread.proxy.url).close()
    with opened(thread.proxy.url, f"/t/{TOKEN}/tools/ws") as socket:
        assert socket_ask(socket, "hi") == ["hi once", "hi twice"]
    thread.close()
    assert [e.route for e in store.exchanges(run)] == ["/tools/ws"] * 2
    assert TOKEN not in repr(store.exchanges(run))


def test_the_token_header_beside_a_header_that_is_not_utf8_is_a_clear_400(start_proxy, upstream):
    proxy = start_proxy(upstream.url, token=TOKEN).proxy
    host, port = proxy.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(
            b"GET /v1/models HTTP/1.1\r\nHost: a\r\nX-Forkpoint-Token: " + TOKEN.encode()
            + b"\r\nX-Name: caf\xe9\r\nConnection: close\r\n\r\n"
        )  # fmt: skip
        answer = b"".join(iter(lambda: raw.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 400 ") and b"/t/TOKEN/" in answer
    assert upstream.request_count == 0


def test_an_interceptor_beyond_loopback_needs_the_token_too(start_proxy, confdir, caplog):
    with caplog.at_level(logging.WARNING, logger="forkpoint"):
        thread = start_proxy(None, intercept=InterceptOptions(host="0.0.0.0", confdir=confdir))
    assert thread.proxy.token_made and thread.proxy.token
    assert any("0.0.0.0, beyond loopback" in r.getMessage() for r in caplog.records)
    with client(thread, confdir, run="run1") as http:
        with pytest.raises(requests.exceptions.ProxyError, match="407"):
            http.get("https://tools.example/v1/search")  # a tunnel (CONNECT)
        assert http.get("http://tools.example/v1/search").status_code == 407  # a plain request
