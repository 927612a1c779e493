"""Secrets planted in every place a request or response can carry one: not a byte of them
in the cassette, its WAL, an export, the log or `--json` output; replay still matches.

Found by a user: X-Subscription-Token, Ocp-Apim-Subscription-Key, ?apikey=, ?token= and a
JSON `"api_key"` were stored in clear; and by an attack suite: x-amz-security-token,
x-auth-token, x-functions-key, apikey, ?sig=, ?X-Amz-Signature=, ?code=, userinfo in the
request line, and a divergence report copying body and query secrets into the record. Then
secrets in a streamed answer and credentials known only by their shape (a key pasted into a
prompt), and the bytes that must be left alone (files, text that only looks like a key).
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import itertools
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.sync.client import ClientConnection, connect

from forkpoint import api
from forkpoint.engine.redaction import Redaction, secret_name
from forkpoint.models import Chunk
from forkpoint.runtime.loop_thread import LoopThread
from tests.runner import invoke
from tests.services import Service

HEADERS = {
    "Authorization": "Bearer SECRET-bearer-1",
    "X-Subscription-Token": "SECRET-brave-2",
    "Ocp-Apim-Subscription-Key": "SECRET-azure-3",
    "X-Amz-Security-Token": "SECRET-amz-4",
    "X-Auth-Token": "SECRET-auth-5",
    "X-Functions-Key": "SECRET-func-6",
    "apikey": "SECRET-supabase-7",
    "Cookie": "session=SECRET-cookie-8",
    "X-Custom-Thing": "SECRET-custom-9",  # named with --redact
}
QUERY = (
    "apikey=SECRET-q1&token=SECRET-q2&sig=SECRET-q3&X-Amz-Signature=SECRET-q4&code=SECRET-q5"
    "&key=SECRET-q6&q=refunds"
)
BODY = {
    "api_key": "SECRET-b1",
    "query": "refunds",
    "max_tokens": 100,  # not a secret: a number, and `tokens`
    "auth": {"client_secret": "SECRET-b2", "nested": [{"accessToken": "SECRET-b3"}]},
}


STREAMED = [
    b'data: {"jsonrpc": "2.0", "id": 1, "result": {"session_tok',
    b'en": "SECRET-s1", "expires_in": 3600}}\n\n',
]


class TokenService:
    """A tool API that answers with a token of its own, and echoes what it got."""

    def __init__(self) -> None:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)  # the service may log its secrets
        self._thread = LoopThread("token-service")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        got = await request.read()
        if request.path.endswith("/events"):  # an MCP tool's answer over SSE, cut mid-value
            stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await stream.prepare(request)
            for part in STREAMED:
                await stream.write(part)
                await asyncio.sleep(0.02)
            await stream.write_eof()
            return stream
        return web.json_response(
            {"access_token": "SECRET-r1", "got": len(got)},
            headers={"Set-Cookie": "sid=SECRET-r2", "X-Api-Key": "SECRET-r3"},
        )

    def stop(self) -> None:
        self._thread.call(self._runner.cleanup())
        self._thread.close()


def send(url: str, path: str, body: dict[str, object], headers: dict[str, str]) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={
            "content-type": "application/json", **headers,
        })  # fmt: skip
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


@pytest.fixture
def tokens():  # type: ignore[no-untyped-def]
    service = TokenService()
    yield service
    service.stop()


def test_no_byte_of_any_secret_reaches_the_cassette_its_wal_exports_logs_or_json(
    start_proxy, store, cassette: Path, tokens, caplog, tmp_path
):
    from forkpoint.api.options import Options, engine_config

    config = engine_config(
        Options(routes={"tools": tokens.url}, redact=("x-custom-thing",)), live=True
    )
    from forkpoint.runtime.proxy import ProxyThread

    thread = ProxyThread(store, config)
    thread.__enter__()
    run = thread.record(name="secrets").run
    with caplog.at_level(logging.DEBUG):
        assert send(thread.proxy.url, f"/tools/search?{QUERY}", BODY, HEADERS) == 200
        # an absolute-form request line with userinfo in it: its path is the route, its
        # host is not where it goes
        assert (
            send(
                thread.proxy.url,
                f"http://user:SECRET-userinfo@evil.example/tools/search?{QUERY}",
                BODY,
                HEADERS,
            )
            == 200
        )
        # a form-encoded token request
        parts = urlsplit(thread.proxy.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        conn.request(
            "POST", "/tools/oauth/token", body="grant_type=client_credentials&client_secret=SECRET-f1",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
        conn.getresponse().read()
        conn.close()
        thread.proxy.recorder.flush()
        shown = invoke("show", run.id, "--json", cassette=cassette)
        exports = [
            api.export_run(run.id, fmt=fmt, options=api.Options(cassette=cassette))
            for fmt in ("vcr", "jsonl", "har")
        ]
    # a replay whose secrets differ still matches, and its divergence report masks them too
    replaying = ProxyThread(store, engine_config(Options(redact=("x-custom-thing",)), live=False))
    replaying.__enter__()
    replaying.replay(run.id)
    other = {k: v.replace("SECRET", "OTHER") for k, v in HEADERS.items()}
    assert send(
        replaying.proxy.url, f"/tools/search?{QUERY.replace('SECRET', 'OTHER')}",
        {**BODY, "api_key": "OTHER-b1"}, other,
    ) == 200  # fmt: skip
    send(replaying.proxy.url, f"/tools/search?{QUERY}", {**BODY, "query": "other"}, HEADERS)
    replaying.close()
    thread.close()

    wal = cassette.with_name(cassette.name + "-wal")
    places = {
        "cassette": cassette.read_bytes(),
        "wal": wal.read_bytes() if wal.exists() else b"",
        "show --json": shown.output.encode(),
        "log": caplog.text.encode(),
        **{f"export {i}": text.encode() for i, text in enumerate(exports)},
    }
    stored = store.exchanges(run.id) + [e for r in store.list_runs() for e in store.exchanges(r.id)]
    places["records"] = repr(stored).encode()
    for where, content in places.items():
        assert b"SECRET" not in content, f"a secret in {where}: " + content[
            content.find(b"SECRET") - 60 : content.find(b"SECRET") + 30
        ].decode(errors="replace")
    assert b"refunds" in places["cassette"] or any(b"refunds" in e.request_body for e in stored)
    assert json.loads(stored[0].request_body)["max_tokens"] == 100


@pytest.mark.parametrize(
    "name, secret",
    [
        ("X-Subscription-Token", True), ("Ocp-Apim-Subscription-Key", True),
        ("x-goog-api-key", True), ("apiKey", True), ("client_secret", True),
        ("X-Amz-Credential", True), ("x-ratelimit-remaining-tokens", False),
        ("max_tokens", False), ("prompt_cache_key", False), ("idempotency-key", False),
        ("content-type", False), ("author", False),
    ],
)  # fmt: skip
def test_credential_names_are_told_from_ordinary_ones(name, secret):
    assert secret_name(name) is secret


def test_a_masked_body_keeps_every_other_byte_and_compressed_bodies_stay_compressed():
    import gzip

    redaction = Redaction()
    body = b'{"a" : 1,  "api_key":"sk-1", "note": "api_key \\"sk\\""}'
    assert (
        redaction.body(body, ())
        == b'{"a" : 1,  "api_key":"[redacted]", "note": "api_key \\"sk\\""}'
    )
    packed = redaction.body(gzip.compress(body), (("content-encoding", "gzip"),))
    assert b"sk-1" not in gzip.decompress(packed) and b'"a" : 1' in gzip.decompress(packed)
    untouched = b'{"q": "x", "max_tokens": 5}'
    assert redaction.body(untouched, ()) is untouched
    assert redaction.route("https://me:pw@h.example/v1?apikey=1&q=2") == (
        "https://%5Bredacted%5D@h.example/v1?apikey=%5Bredacted%5D&q=2"
    )
    assert redaction.text("cannot reach upstream http://h/x?token=abc: refused") == (
        "cannot reach upstream http://h/x?token=%5Bredacted%5D: refused"
    )


@pytest.mark.parametrize(
    "body, kept",
    [
        (b'{"messages": ["' + b"x" * 1_100_000 + b'"], "api_key": "sk-1"}', b'"messages"'),
        (b'{"api\\u005fkey": "sk-1", "n": 1}', b'"n": 1'),
        (b'{"deep": [[{"Authorization": "Bearer sk-1"}]], "n": 1}', b'"deep": [[{'),
        (b'{"prompt_tokens": 3, "password" :  "sk-1"}', b'"prompt_tokens": 3'),
    ],
)  # fmt: skip
def test_a_secret_is_masked_wherever_and_however_its_name_is_written(body, kept):
    masked = Redaction().body(body, ())
    assert b"sk-1" not in masked and kept in masked and b"[redacted]" in masked


def test_a_named_field_is_masked_and_a_numeric_one_is_not():
    redaction = Redaction(names=frozenset({"Session"}))
    assert redaction.body(b'{"session": "s-1", "max_tokens": 5}', ()) == (
        b'{"session": "[redacted]", "max_tokens": 5}'
    )


EVENTS = st.lists(
    st.sampled_from([
        b'data: {"delta": {"content": "hi"}}\n\n', b'data: {"token": "sk-1", "n": 1}\n\n',
        b'data: {"client_secret" : "s\\"k-2", "usage": {"total_tokens": 9}}\n\n',
        b'event: done\ndata: {"api_key": ""}\n\n', b": keep-alive\n\n",
        b'data: {"delta": {"content": "use sk-proj-Ab3dEf6hIj9kLm2nOp5q0123 now"}}\n\n',
    ]),
    min_size=1, max_size=6,
).map(b"".join)  # fmt: skip


@settings(deadline=None)
@given(EVENTS, st.lists(st.integers(min_value=0, max_value=400), max_size=8))
def test_a_stream_masked_chunk_by_chunk_reads_as_its_whole_body_masked(body, cuts):
    """However the stream was cut into chunks, its masked chunks join to the whole body
    masked, each at the time of a chunk it came from, in order, none empty."""
    points = sorted({0, *(c % (len(body) + 1) for c in cuts), len(body)})
    pairs = enumerate(itertools.pairwise(points))
    chunks = [Chunk(float(i), body[a:b]) for i, (a, b) in pairs]
    masked = Redaction().chunks(chunks, (("content-type", "text/event-stream"),))
    assert b"".join(c.data for c in masked) == Redaction().body(body, ())
    times = [c.offset_ms for c in masked]
    assert times == sorted(set(times)) and set(times) <= {c.offset_ms for c in chunks}
    joined = b"".join(c.data for c in masked)
    assert all(c.data for c in masked) and b"sk-1" not in joined and b"sk-proj" not in joined


def test_a_compressed_stream_with_a_secret_is_kept_masked_in_one_chunk():
    import gzip

    body = gzip.compress(b'data: {"token": "sk-1"}\n\ndata: [DONE]\n\n')
    chunks = [Chunk(1.0, body[:10]), Chunk(2.0, body[10:])]
    masked = Redaction().chunks(chunks, (("content-encoding", "gzip"),))
    assert [c.offset_ms for c in masked] == [1.0]
    assert gzip.decompress(masked[0].data) == b'data: {"token": "[redacted]"}\n\ndata: [DONE]\n\n'
    plain = [Chunk(1.0, b'data: {"n": 1}\n\n')]
    assert Redaction().chunks(plain, ()) is plain


def test_a_secret_streamed_over_sse_reaches_the_agent_but_not_the_cassette(store, tokens):
    from forkpoint.api.options import Options, engine_config
    from forkpoint.runtime.proxy import ProxyThread

    recording = ProxyThread(store, engine_config(Options(routes={"tools": tokens.url}), live=True))
    recording.__enter__()
    run = recording.record(name="streamed").run
    got = stream_from(recording.proxy.url, "/tools/mcp/events")
    recording.close()
    assert got == b"".join(STREAMED)  # the agent gets the token it asked for
    [recorded] = store.exchanges(run.id)
    assert b"SECRET" not in recorded.response_body and recorded.chunks is not None
    assert b"SECRET" not in b"".join(c.data for c in recorded.chunks)
    assert b'"expires_in": 3600' in recorded.response_body
    replaying = ProxyThread(store, engine_config(Options(), live=False))
    replaying.__enter__()
    replaying.replay(run.id)
    replayed = stream_from(replaying.proxy.url, "/tools/mcp/events")
    replaying.close()
    assert replayed == recorded.response_body and b"[redacted]" in replayed


def stream_from(url: str, path: str) -> bytes:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", path, body=b"{}", headers={"content-type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        return response.read()
    finally:
        conn.close()


# Credentials by their shape, wherever they are written: a key pasted into a prompt, a token
# a tool printed. Each is made here, so no real-looking key sits in the source.
KEYS = {
    "openai": "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5q" * 2,
    "anthropic": "sk-ant-api03-" + "x7Yz0Ab3dEf6hIj9kLm2" * 2,
    "aws": "AKIA" + "Q7RZ3WUXM2KD5N8P",
    "github": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2,
    "slack": "xoxb-" + "1234567890-0987654321-" + "aBcDeFgHiJkL",
    "google": "AIza" + "Sy" + "D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T",
    "stripe": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "openai-ephemeral": "ek_" + "68af3f0d09748190a0cd6a9b8a4ab1a7",  # a realtime session's
    "jwt": "eyJhbGciOiJIUzI1NiJ9."
    + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    + "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}
PEM = (
    "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\nBKcwggSjAgEAAoIBAQC7\\n"
    "-----END PRIVATE KEY-----"
)


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_credential_is_masked_by_its_shape_in_free_text(kind):
    key = KEYS[kind]
    body = json.dumps({"messages": [{"role": "user", "content": f"here is mine: {key}, thanks"}],
                       "max_tokens": 5}).encode()  # fmt: skip
    masked = Redaction().body(body, (("content-type", "application/json"),))
    assert key.encode() not in masked
    assert json.loads(masked)["messages"][0]["content"] == "here is mine: [redacted], thanks"
    assert Redaction().text(f"upstream said: bad key {key}") == "upstream said: bad key [redacted]"


def test_a_private_key_block_is_masked_whole():
    body = json.dumps({"content": f"deploy with\n{PEM}\nplease"}).encode()
    masked = Redaction().body(body, ())
    assert json.loads(masked)["content"] == "deploy with\n[redacted]\nplease"


@pytest.mark.parametrize(
    "text",
    [
        "a risk-assessment-framework-for-the-new-product-line",  # `sk-` inside a word
        "task-sk-" + "is-not-a-key-when-it-is-in-the-middle",
        "ASKIA" + "Q7RZ3WUXM2KD5N8P",  # a longer word
        "data:image/png;base64,iVBORw0KGgoAKIAQ7RZ3WUXM2KD5N8PAAAANSUhEUgAAAAEAAAAB",
        "the header eyJ is just text",
        "ghp_short",
    ],
)
def test_text_that_only_looks_like_a_credential_is_kept(text):
    body = json.dumps({"content": text}).encode()
    assert Redaction().body(body, ()) is body


def test_a_credential_in_a_binary_upload_is_left_alone():
    """Masking would change a file's bytes (a PDF's offsets, a zip's checksums): a multipart
    upload, or any body not text, is kept as it is; its text fields are read by name."""
    key = KEYS["openai"].encode()
    body = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.pdf"\r\n\r\n' + (
        b"%PDF-1.7 " + key + b"\r\n--b--\r\n"
    )
    assert Redaction().body(body, (("content-type", "multipart/form-data; boundary=b"),)) is body
    octets = b"\x00\x01" + key
    assert Redaction().body(octets, (("content-type", "application/octet-stream"),)) is octets


def test_a_key_in_a_prompt_never_reaches_the_cassette_and_a_replay_with_another_still_matches(
    store, cassette: Path, tokens
):
    from forkpoint.api.options import Options, engine_config
    from forkpoint.runtime.proxy import ProxyThread

    prompt = {"messages": [{"role": "user", "content": f"my key is {KEYS['openai']}"}]}
    recording = ProxyThread(store, engine_config(Options(routes={"tools": tokens.url}), live=True))
    recording.__enter__()
    run = recording.record(name="pasted").run
    assert send(recording.proxy.url, "/tools/chat", prompt, {}) == 200
    recording.close()
    wal = cassette.with_name(cassette.name + "-wal")
    for content in (cassette.read_bytes(), wal.read_bytes() if wal.exists() else b""):
        assert KEYS["openai"].encode() not in content
    [recorded] = store.exchanges(run.id)
    assert b"my key is [redacted]" in recorded.request_body
    replaying = ProxyThread(store, engine_config(Options(), live=False))
    replaying.__enter__()
    replaying.replay(run.id)
    other = {"messages": [{"role": "user", "content": f"my key is {KEYS['anthropic']}"}]}
    assert send(replaying.proxy.url, "/tools/chat", other, {}) == 200
    replaying.close()


def test_a_stream_that_is_not_text_is_kept_as_it_came():
    """A body of unknown length is kept chunk by chunk whatever it is: audio from a speech
    endpoint, a file. Its bytes may happen to read like a member or a key."""
    chunks = [
        Chunk(1.0, b'ID3\x00\x01"token": "abc"'),
        Chunk(2.0, b"\xff\xfb " + KEYS["aws"].encode()),
    ]
    for kind in ("audio/mpeg", "application/octet-stream"):
        assert Redaction().chunks(chunks, (("content-type", kind),)) is chunks


def test_a_realtime_sessions_ephemeral_key_is_masked_where_its_name_says_nothing():
    """OpenAI's realtime endpoints answer `{"client_secret": {"value": "ek_…"}}` and, newer,
    `{"value": "ek_…"}`: an object under the secret's name, or no name at all."""
    key = KEYS["openai-ephemeral"]
    for answer in ({"client_secret": {"value": key, "expires_at": 1756000000}}, {"value": key}):
        body = json.dumps(answer).encode()
        masked = Redaction().body(body, (("content-type", "application/json"),))
        assert key.encode() not in masked and b"[redacted]" in masked
    kept = json.dumps({"content": "peek_" + "a" * 30}).encode()  # `ek_` inside a word
    assert Redaction().body(kept, ()) is kept


@pytest.mark.parametrize(
    "answer, kept",
    [
        ({"credentials": {"type": "service_account", "client_email": "bot@p.example",
                          "private_key_id": "k-1"}, "n": 1}, '"n": 1'),
        ({"client_secret": {"value": "opaque-1", "expires_at": 1756000000}}, '"expires_at": 1756000000'),
        ({"user": {"password": ["opaque-1", "opaque-2"]}, "max_tokens": 5}, '"max_tokens": 5'),
    ],
)  # fmt: skip
def test_every_string_under_a_member_named_a_secret_is_masked(answer, kept):
    """A name that says secret, credential or password holds one whatever its shape: an
    object (a service account, an ephemeral key and its expiry) or a list."""
    body = json.dumps(answer).encode()
    masked = Redaction().body(body, (("content-type", "application/json"),))
    assert b"opaque-1" not in masked and b"service_account" not in masked
    assert b"bot@p.example" not in masked and kept.encode() in masked
    assert json.loads(masked)  # still JSON, every other byte kept
    auth = json.dumps({"auth": {"type": "oauth", "scopes": ["read"]}}).encode()
    assert Redaction().body(auth, ()) is auth  # `auth` names a scheme as often as a secret


def test_a_secret_in_json_carried_inside_a_string_is_masked_by_its_name():
    """A tool's answer goes back to the model as a string: `{"access_token": …}` arrives
    escaped inside the next request's tool message, where it must be masked as well."""
    inner = json.dumps({"access_token": "opaque-1", "note": 'say "hi"', "n": 1})
    body = json.dumps({"messages": [{"role": "tool", "content": inner}]}).encode()
    masked = Redaction().body(body, (("content-type", "application/json"),))
    assert b"opaque-1" not in masked
    carried = json.loads(json.loads(masked)["messages"][0]["content"])
    assert carried == {"access_token": "[redacted]", "note": 'say "hi"', "n": 1}
    quoted = json.dumps({"content": 'he said "token": "not json" once'}).encode()
    assert json.loads(Redaction().body(quoted, ()))["content"].startswith("he said")


# Secrets known from the request: an upstream that echoes what it was sent (a debugging
# endpoint, an error that quotes the key, a token endpoint that names it) gives them back
# where no name says what they are. Each value is masked wherever it appears in the exchange.
ECHOED = {
    "bearer": "ECHOED-bearer-7f3a9c2e41",
    "query": "ECHOED-query-5d8b0e6a93",
    "body": "ECHOED-body-2c7e9f14ab",
    "cookie": "ECHOED-cookie-0b3d5f7a19",
}


class EchoService(Service):
    """A tool API that gives back what it was sent: in its body, its headers, a stream cut in
    the middle of a value, an error text and websocket messages."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_get("/ws", self.socket)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        super().__init__(app, "echo-service", access_log=None)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        sent = (await request.read()).decode()
        seen = f"{request.headers.get('Authorization')} {request.query_string} {sent}"
        echo = {"Location": f"/next?{request.query_string}", "X-Seen": seen}
        if request.path.endswith("/stream"):
            event = f'data: {{"seen": {json.dumps(seen)}}}\n\n'.encode()
            cut = event.index(ECHOED["bearer"].encode()) + 9  # in the middle of the value
            stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", **echo})
            await stream.prepare(request)
            for part in (event[:cut], event[cut:], b"data: [DONE]\n\n"):
                await stream.write(part)
                await asyncio.sleep(0.02)
            await stream.write_eof()
            return stream
        if request.path.endswith("/refused"):
            return web.Response(status=401, text=f"invalid credentials: {seen}", headers=echo)
        return web.json_response({"seen": seen, "escaped": seen.replace("-", "\\u002d")},
                                 headers=echo)  # fmt: skip

    async def socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.send_str(json.dumps({"session": request.headers.get("Authorization")}))
        async for message in socket:
            await socket.send_str(f"you said {message.data}")
        return socket


@pytest.fixture
def echo() -> Iterator[EchoService]:
    service = EchoService()
    yield service
    service.stop()


def artifacts(store, cassette: Path, run_id: str, caplog) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    """Every place a recorded secret could be read back from: the cassette and its WAL, the
    records, `show --json`, every export format and the log."""
    wal = cassette.with_name(cassette.name + "-wal")
    places = {
        "cassette": cassette.read_bytes(),
        "wal": wal.read_bytes() if wal.exists() else b"",
        "records": repr([e for r in store.list_runs() for e in store.exchanges(r.id)]).encode(),
        "runs": repr(store.list_runs()).encode(),
        "show --json": invoke("show", run_id, "--json", cassette=cassette).output.encode(),
        "log": caplog.text.encode(),
    }
    for fmt in ("vcr", "jsonl", "har"):
        exported = api.export_run(run_id, fmt=fmt, options=api.Options(cassette=cassette))
        places[f"export {fmt}"] = exported.encode()
    return places


def assert_nowhere(secrets: Iterable[str], places: dict[str, bytes]) -> None:
    for secret in secrets:
        for where, content in places.items():
            at = content.find(secret.encode())
            assert at < 0, f"{secret} in {where}: " + content[at - 80 : at + 40].decode(
                errors="replace"
            )


def test_a_secret_the_upstream_echoes_back_is_masked_wherever_it_appears(
    store, cassette: Path, echo, caplog
):
    from forkpoint.api.options import Options, engine_config
    from forkpoint.runtime.proxy import ProxyThread

    recording = ProxyThread(store, engine_config(Options(routes={"tools": echo.url}), live=True))
    recording.__enter__()
    run = recording.record(name="echoed").run
    url = recording.proxy.url
    headers = {"Authorization": f"Bearer {ECHOED['bearer']}",
               "Cookie": f"session={ECHOED['cookie']}"}  # fmt: skip
    query = f"api_key={ECHOED['query']}"
    body = {"api_key": ECHOED["body"], "q": "refunds"}
    caplog.set_level(logging.WARNING, logger="websockets")  # the test's own client
    with caplog.at_level(logging.DEBUG):
        got = {}
        for path in ("/tools/echo", "/tools/stream", "/tools/refused"):
            got[path] = fetch(url, f"{path}?{query}", json.dumps(body).encode(), headers)
        with opened_socket(url, "/tools/ws", headers["Authorization"]) as socket:
            greeting = socket.recv(timeout=5)
            socket.send(f"my key is {ECHOED['bearer']}")
            answer = socket.recv(timeout=5)
        recording.proxy.recorder.flush()
        places = artifacts(store, cassette, run.id, caplog)
    recording.close()
    # the agent got every echo as the upstream sent it
    assert all(ECHOED["bearer"].encode() in data for _, _, data in got.values())
    assert got["/tools/refused"][0] == 401 and ECHOED["query"] in got["/tools/echo"][1]["X-Seen"]
    assert ECHOED["bearer"] in str(greeting) and ECHOED["bearer"] in str(answer)
    assert_nowhere(ECHOED.values(), places)
    recorded = store.exchanges(run.id)
    assert b"refunds" in recorded[0].request_body and b"[redacted]" in recorded[0].response_body


def fetch(
    url: str, path: str, body: bytes, headers: Mapping[str, str]
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=dict(headers))
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def opened_socket(url: str, path: str, authorization: str) -> ClientConnection:
    return connect(
        url.replace("http://", "ws://") + path, proxy=None, open_timeout=5,
        additional_headers={"Authorization": authorization},
    )  # fmt: skip


# Made here, as KEYS are: the shapes of newer providers' keys.
NEW_KEYS = {
    "groq": "gsk_" + "Ab3dEf6hIj9kLm2nOp5q" * 2 + "Rs8tUv1wXy4z",
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
    "xai": "xai-" + "Ab3dEf6hIj9kLm2nOp5q" * 4,
    "perplexity": "pplx-" + "Ab3dEf6hIj9kLm2nOp5q" * 2 + "Rs8tUv1w",
    "google-oauth": "ya29." + "a0AfB_byC" + "Ab3dEf6hIj9kLm2nOp5q" * 3,
    "gitlab": "glpat-" + "Ab3dEf6hIj9kLm2nOp5q",
}


def multipart(boundary: str, fields: Mapping[str, str], file: bytes) -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="notes.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    )
    parts.append(head.encode() + file + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def test_a_key_in_a_large_body_a_multipart_field_a_lowercase_header_or_a_header_value_is_masked(
    store, cassette: Path, tokens, caplog
):
    from forkpoint.api.options import Options, engine_config
    from forkpoint.runtime.proxy import ProxyThread

    recording = ProxyThread(store, engine_config(Options(routes={"tools": tokens.url}), live=True))
    recording.__enter__()
    run = recording.record(name="attacked").run
    url = recording.proxy.url
    pasted = KEYS["openai"]
    large = json.dumps({"messages": [
        {"role": "user", "content": "x" * (1 << 20) + f" and my key is {pasted}"},
        {"role": "user", "content": " ".join(NEW_KEYS.values())},
    ]}).encode()  # fmt: skip
    slack = "xoxb-" + "2048-4096-" + "ZyXwVuTsRqPo"
    file = b"a note that mentions sk-proj-" + b"N0tAKeyJustTextInAFile0123" + b" as is"
    upload = multipart("b0undary", {"token": slack, "channels": "C0123"}, file)
    jwt = KEYS["jwt"]
    headers = {
        "x-rapidapi-key": "SECRET-rapid-1",  # as Node and HTTP/2 send it
        "X-Amzn-Oidc-Data": jwt,
        "x-goog-iap-jwt-assertion": jwt,
        "X-Honeycomb-Team": "SECRET-honey-2",
    }
    with caplog.at_level(logging.DEBUG):
        assert fetch(url, "/tools/chat", large, {"content-type": "application/json"})[0] == 200
        form = "multipart/form-data; boundary=b0undary"
        assert fetch(url, "/tools/files.upload", upload, {"content-type": form})[0] == 200
        answer = json.dumps({"passphrase": "SECRET-phrase-3", "n": 1}).encode()
        assert fetch(url, "/tools/weather?appid=SECRET-owm-4&q=Paris", answer, headers)[0] == 200
        recording.proxy.recorder.flush()
        places = artifacts(store, cassette, run.id, caplog)
    recording.close()
    secrets = [pasted, slack, jwt, *NEW_KEYS.values(), "SECRET-"]
    assert_nowhere(secrets, places)
    chat, uploaded, weather = store.exchanges(run.id)
    assert len(chat.request_body) > 1 << 20 and b"my key is [redacted]" in chat.request_body
    assert file in uploaded.request_body  # a file's bytes are its own
    assert b"Paris" in weather.route.encode() and b'"n": 1' in weather.request_body


class AuthService(Service):
    """A model API behind Basic auth, as a self-hosted gateway may be: it notes the
    Authorization each request came with, and answers like Chat Completions."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.seen: list[tuple[str, str | None]] = []
        super().__init__(app, "auth-service", access_log=None)

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.seen.append((request.path, request.headers.get("Authorization")))
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "fine"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })  # fmt: skip


USERINFO_AGENT = """
import os, sys, urllib.request, openai
client = openai.OpenAI(max_retries=0)
print(client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
      .choices[0].message.content)
base = os.environ["OPENAI_BASE_URL"].removesuffix("/v1")
for path in ("/v1/models", "/tools/lookup"):
    with urllib.request.urlopen(base + path) as answer:  # no Authorization of its own
        print(answer.status)
"""


def test_an_upstream_with_userinfo_is_basic_auth_only_for_an_agent_without_its_own_and_never_stored(
    cassette: Path, tmp_path: Path
):
    from tests.runner import forkpoint

    service = AuthService()
    agent = tmp_path / "agent.py"
    agent.write_text(USERINFO_AGENT)
    host = service.url.removeprefix("http://")
    try:
        done = forkpoint(
            "record", "--upstream", f"http://gw-user:SECRET-userinfo-1@{host}",
            "--route", f"tools=http://tool-user:SECRET-userinfo-2@{host}",
            "--", sys.executable, str(agent),
            cassette=cassette, env={"OPENAI_API_KEY": "sk-agent-own-key"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["fine", "200", "200"]
        run = done.run_id
        forked = forkpoint(
            "fork", run, "--at", "0", "--upstream", f"http://fork-user:SECRET-userinfo-3@{host}",
            "--", sys.executable, str(agent),
            cassette=cassette, env={"OPENAI_API_KEY": "sk-agent-own-key"},
        )  # fmt: skip
        assert forked.returncode == 0, forked.stderr
    finally:
        service.stop()
    basic = "Basic " + base64.b64encode(b"gw-user:SECRET-userinfo-1").decode()
    tool = "Basic " + base64.b64encode(b"tool-user:SECRET-userinfo-2").decode()
    # the agent's own header goes through as it would without forkpoint; the URL's is used
    # only where the agent sent none
    assert service.seen[:3] == [
        ("/v1/chat/completions", "Bearer sk-agent-own-key"), ("/v1/models", basic),
        ("/lookup", tool),
    ]  # fmt: skip
    assert service.seen[3] == ("/v1/chat/completions", "Bearer sk-agent-own-key")
    places = {
        "cassette": cassette.read_bytes(),
        "log": (done.stderr + forked.stderr).encode(),
        "runs": invoke("runs", "--json", cassette=cassette).output.encode(),
    }
    for shown in (run, forked.run_id):
        places[f"show {shown}"] = invoke("show", shown, "--json", cassette=cassette).output.encode()
        for fmt in ("vcr", "jsonl", "har"):
            exported = api.export_run(shown, fmt=fmt, options=api.Options(cassette=cassette))
            places[f"export {fmt} {shown}"] = exported.encode()
    wal = cassette.with_name(cassette.name + "-wal")
    places["wal"] = wal.read_bytes() if wal.exists() else b""
    assert_nowhere(["SECRET-userinfo", "gw-user", "tool-user", "fork-user"], places)
