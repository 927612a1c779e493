"""A served answer's framing fits the bytes served: an answer in which a secret was masked
(shorter or longer than the upstream's bytes, plain or gzip on the wire) is replayed with the
length of what is sent, through the gateway, the interceptor and the in-process door, from a
SQLite cassette, a text cassette and an imported HAR.

Found by an attack on main: a token endpoint's `{"access_token": "sk-…"}` replayed with the
upstream's Content-Length came up short (curl exits 18, the openai SDK raises `Connection
error.`), and a short secret masked longer was cut where the old length ended.
"""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import openai
import pytest
from aiohttp import web

from forkpoint import api
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.harness import CassetteOptions, CassetteProxy
from forkpoint.testing.record_mode import RecordMode
from forkpoint.testing.script import Prompt, Reply
from forkpoint.testing.upstream import ScriptedUpstream
from tests.doors.test_interceptor import ca, client, confdir, intercepting  # noqa: F401
from tests.https_services import HOST_A, Service

# made here, so no real-looking key sits in the source
KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5q" * 2
ANSWERS = {  # path: the tool's answer, a credential in it (masked shorter, then longer)
    "/oauth/token": {"access_token": KEY, "token_type": "bearer", "expires_in": 3600},
    "/crm/contact": {"name": "Ada", "api_key": "k1", "notes": "x" * 40},
}

SECRET_MEMBERS = ("access_token", "token_type", "api_key")  # masked by their names


def token_app() -> web.Application:
    """A token endpoint and a CRM echo; `?gzip=1` answers gzip, as real APIs do."""

    async def handle(request: web.Request) -> web.Response:
        body = json.dumps(ANSWERS[request.path]).encode()
        headers = {"Content-Type": "application/json"}
        if request.query.get("gzip"):
            body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
        return web.Response(body=body, headers=headers)

    app = web.Application()
    for path in ANSWERS:
        app.router.add_route("*", path, handle)
    return app


class TokenService:
    def __init__(self) -> None:
        self._runner = web.AppRunner(token_app(), access_log=None)
        self._thread = LoopThread("token-service")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def stop(self) -> None:
        """Stop listening (again: nothing), to show a replay needs it not."""
        if not self._thread.loop.is_closed():
            self._thread.call(self._runner.cleanup())
            self._thread.close()


@pytest.fixture
def tokens() -> Iterator[TokenService]:
    service = TokenService()
    yield service
    service.stop()


def raw_get(url: str, path: str) -> tuple[dict[str, str], bytes]:
    """What curl reads: the head, then every byte until the server closes."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept-Encoding: gzip\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        received = b""
        while data := sock.recv(65536):
            received += data
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, body


def served_json(headers: dict[str, str], body: bytes) -> object:
    """The answer as a client reads it, after checking that its length is its bytes'."""
    assert "transfer-encoding" not in headers
    assert int(headers["content-length"]) == len(body)
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return json.loads(body)


def masked(answer: dict[str, object]) -> dict[str, object]:
    return {k: ("[redacted]" if k in SECRET_MEMBERS else v) for k, v in answer.items()}


@pytest.mark.parametrize("compressed", ["", "?gzip=1"])
def test_a_masked_answer_is_replayed_with_the_length_of_its_bytes(
    start_proxy, store, tokens, compressed
):
    proxy = start_proxy(None, routes={"tools": tokens.url})
    run = proxy.record().run.id
    for path, answer in ANSWERS.items():  # the agent gets the answer as it came
        assert served_json(*raw_get(proxy.proxy.url, f"/tools{path}{compressed}")) == answer
    proxy.proxy.recorder.flush()
    assert all(KEY.encode() not in e.response_body for e in store.exchanges(run))
    tokens.stop()

    proxy.replay(run)
    for path, answer in ANSWERS.items():
        served = raw_get(proxy.proxy.url, f"/tools{path}{compressed}")
        assert served_json(*served) == masked(answer)


def leaky_script(prompt: Prompt) -> Reply:
    """A model that repeats a key it read in a tool's answer."""
    return Reply(text=f"The CRM answered with {KEY}; I will use it for {prompt.last_user_text}")


@pytest.mark.parametrize("compress", [False, True])
def test_the_openai_sdk_replays_an_answer_with_a_masked_key_offline(
    start_upstream, start_proxy, compress
):
    upstream = start_upstream(ScriptedUpstream(leaky_script, compress=compress))
    proxy = start_proxy(upstream.url)
    run = proxy.record().run.id

    def ask(url: str) -> str:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as sdk:
            completion = sdk.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "the refund"}]
            )
        return str(completion.choices[0].message.content)

    assert KEY in ask(proxy.proxy.url)
    upstream.stop()
    proxy.proxy.recorder.flush()  # the replay loads the run from the store
    proxy.replay(run)
    assert ask(proxy.proxy.url) == "The CRM answered with [redacted]; I will use it for the refund"


def test_a_text_cassette_replays_a_masked_answer_through_the_in_process_door(
    tmp_path, tokens, monkeypatch
):
    import httpx

    from forkpoint.testing.httpx_door import route

    cassette = tmp_path / "c.yaml"
    options = api.Options(routes={"tools": tokens.url})
    for record in (RecordMode.ONCE, RecordMode.NONE):
        proxy = CassetteProxy(CassetteOptions(cassette=cassette, record=record, options=options))
        proxy.start()
        assert proxy.door is not None
        with monkeypatch.context() as patched, httpx.Client() as http:
            route(patched, proxy.door, proxy.origin)  # as the pytest plugin routes httpx
            got = [http.get(f"{proxy.url}/tools{path}?gzip=1") for path in ANSWERS]
        headers, body = raw_get(proxy.url, "/tools/crm/contact")  # and over the socket
        proxy.stop(save=True)
        if record is RecordMode.ONCE:
            assert [r.json() for r in got] == list(ANSWERS.values())
            tokens.stop()
    assert [r.json() for r in got] == [masked(a) for a in ANSWERS.values()]
    assert all(int(r.headers["content-length"]) == r.num_bytes_downloaded for r in got)
    assert served_json(headers, body) == masked(ANSWERS["/crm/contact"])
    assert KEY not in cassette.read_text()


def test_an_imported_har_whose_content_was_decoded_is_served_with_its_own_length(
    start_proxy, tmp_path, cassette
):
    """A HAR holds content decoded, with the wire's (compressed) Content-Length."""
    answer = json.dumps({"ok": True, "items": list(range(50))}).encode()
    har = {"log": {"version": "1.2", "creator": {"name": "browser", "version": "1"}, "entries": [{
        "startedDateTime": "2026-11-01T10:00:00Z", "time": 5,
        "request": {"method": "GET", "url": "https://api.example/v1/items", "httpVersion": "1.1",
                    "headers": [], "queryString": [], "cookies": [], "headersSize": -1,
                    "bodySize": 0},
        "response": {"status": 200, "statusText": "OK", "httpVersion": "1.1", "cookies": [],
                     "headers": [{"name": "Content-Type", "value": "application/json"},
                                 {"name": "Content-Encoding", "value": "gzip"},
                                 {"name": "Content-Length",
                                  "value": str(len(gzip.compress(answer)))}],
                     "content": {"size": len(answer), "mimeType": "application/json",
                                 "text": answer.decode()},
                     "redirectURL": "", "headersSize": -1, "bodySize": -1},
        "cache": {}, "timings": {"send": 0, "wait": 5, "receive": 0}}]}}  # fmt: skip
    path = tmp_path / "items.har"
    path.write_text(json.dumps(har))
    imported = api.import_run(
        path, routes={"api": "https://api.example"}, options=api.Options(cassette=cassette)
    )
    proxy = start_proxy(None, routes={"api": "https://api.example"})
    proxy.replay(imported.run.id)
    headers, body = raw_get(proxy.proxy.url, "/api/v1/items")
    assert served_json(headers, body) == json.loads(answer)


def test_the_interceptor_replays_a_masked_answer_with_the_length_of_its_bytes(
    intercepting, ca, confdir, store  # noqa: F811
):  # fmt: skip
    service = Service(token_app(), ca, HOST_A)
    proxy = intercepting()
    run = proxy.record().run.id
    with client(proxy, confdir) as http:
        assert http.get(f"{service.url}/oauth/token").json() == ANSWERS["/oauth/token"]
        assert http.get(f"{service.url}/crm/contact?gzip=1").json() == ANSWERS["/crm/contact"]
    service.stop()
    replay = proxy.replay(run).run.id
    with client(proxy, confdir, replay) as http:
        got = [http.get(f"{service.url}/oauth/token"),
               http.get(f"{service.url}/crm/contact?gzip=1", stream=True)]  # fmt: skip
        token, contact = got
        raw = contact.raw.read(decode_content=False)
    assert token.json() == masked(ANSWERS["/oauth/token"])
    assert int(token.headers["content-length"]) == len(token.content)
    assert int(contact.headers["content-length"]) == len(raw)
    assert json.loads(gzip.decompress(raw)) == masked(ANSWERS["/crm/contact"])
