"""Uploads through the gateway on real sockets, with real clients (requests, curl, the openai
SDK): a body past its hold limit goes upstream as it arrives and into the cassette in pieces,
replays, and fails cleanly when its agent is too slow, sends too much or hangs up, or when the
upstream answers before reading it (issue 25.16)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import random
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest
import requests
from aiohttp import web

from forkpoint.engine.pieces import REQUEST_HOLD
from forkpoint.models import Origin
from forkpoint.runtime import certs
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.https import TestCA
from tests.https_services import HOST_A
from tests.services import Service

MIB = 2**20
FILE = {"Content-Type": "application/octet-stream"}


class Uploads(Service):
    """An upstream that reads each upload (and counts those cut short), answering with its
    size and sha256: `/v1/files` at once, `/v1/slow` reading slowly, `/v1/early` with a 413
    before reading a byte, `/v1/audio/transcriptions` as a transcription."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], int, str]] = []
        self.cut = 0
        super().__init__(self.app(), "uploads", auto_decompress=False, access_log=None)

    def app(self) -> web.Application:
        """Its routes, in an app of their own (one runner each)."""
        app = web.Application(client_max_size=2**31)
        app.router.add_post("/v1/files", self.files)
        app.router.add_post("/v1/slow", self.slow)
        app.router.add_post("/v1/early", self.early)
        app.router.add_post("/v1/audio/transcriptions", self.transcribe)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def _read(self, request: web.Request, pause: float = 0.0) -> tuple[int, str]:
        digest, size = hashlib.sha256(), 0
        try:
            async for data in request.content.iter_chunked(256 * 1024):
                digest.update(data)
                size += len(data)
                if pause:
                    await asyncio.sleep(pause)
        except (ConnectionError, asyncio.CancelledError):
            self.cut += 1
            raise
        self.received.append((dict(request.headers), size, digest.hexdigest()))
        return size, digest.hexdigest()

    async def files(self, request: web.Request) -> web.Response:
        size, digest = await self._read(request)
        return web.json_response({"size": size, "sha256": digest})

    async def slow(self, request: web.Request) -> web.Response:
        size, digest = await self._read(request, pause=0.1)
        return web.json_response({"size": size, "sha256": digest})

    async def early(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "too large for us"}, status=413)

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.received.append((dict(request.headers), len(body), hashlib.sha256(body).hexdigest()))
        return web.json_response({"model": json.loads(body)["model"], "size": len(body)})

    async def transcribe(self, request: web.Request) -> web.Response:
        await self._read(request)
        return web.json_response({"text": f"heard {len(self.received)}"})


@pytest.fixture
def uploads() -> Iterator[Uploads]:
    service = Uploads()
    yield service
    service.stop()


def data(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def wait_for(condition, what: str, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_an_upload_goes_upstream_as_sent_into_the_cassette_in_pieces_and_replays(
    start_proxy, store, uploads
):
    body = data(20 * MIB)
    recording = start_proxy(uploads.url)
    run = recording.record().run
    answer = requests.post(recording.proxy.url + "/v1/files", data=body, headers=FILE)
    assert answer.json() == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    [(headers, _, _)] = uploads.received
    assert headers["Content-Length"] == str(len(body))  # framed as the agent framed it
    recording.close()
    [exchange] = store.exchanges(run.id)
    assert exchange.request_body == body[:REQUEST_HOLD] and exchange.request_size == len(body)
    rest = b"".join(store.piece(piece) for piece in exchange.request_pieces)
    assert rest == body[REQUEST_HOLD:] and exchange.complete
    replaying = start_proxy(None)
    replaying.replay(run.id)
    other = requests.post(replaying.proxy.url + "/v1/files", data=body[:-1] + b"!", headers=FILE)
    report = other.json()["error"]["message"]
    assert other.status_code == 400 and "step 0" in report and "body (in pieces)" in report
    again = requests.post(replaying.proxy.url + "/v1/files", data=body, headers=FILE)
    assert again.status_code == 200 and again.json() == answer.json()
    assert len(uploads.received) == 1  # the replay went nowhere


def test_a_chunked_upload_goes_on_chunked(start_proxy, store, uploads):
    body = data(9 * MIB, seed=1)
    recording = start_proxy(uploads.url)
    run = recording.record().run
    parts = (body[at : at + MIB] for at in range(0, len(body), MIB))
    answer = requests.post(recording.proxy.url + "/v1/files", data=parts, headers=FILE)
    assert answer.json()["sha256"] == hashlib.sha256(body).hexdigest()
    [(headers, _, _)] = uploads.received
    assert headers.get("Transfer-Encoding") == "chunked" and "Content-Length" not in headers
    recording.close()
    [exchange] = store.exchanges(run.id)
    assert exchange.request_size == len(body)


def test_an_audio_upload_replays_with_the_openai_sdk_whatever_its_boundary(
    start_proxy, store, uploads
):
    audio = data(6 * MIB, seed=2)
    recording = start_proxy(uploads.url)
    run = recording.record().run
    client = openai.OpenAI(base_url=recording.proxy.url + "/v1", api_key="sk-test", max_retries=0)
    heard = client.audio.transcriptions.create(model="whisper-1", file=("a.mp3", audio))
    assert heard.text == "heard 1"
    recording.close()
    [exchange] = store.exchanges(run.id)
    assert exchange.request_pieces  # a multipart body of 6 MiB
    replaying = start_proxy(None)
    replaying.replay(run.id)
    client = openai.OpenAI(base_url=replaying.proxy.url + "/v1", api_key="sk-other", max_retries=0)
    again = client.audio.transcriptions.create(model="whisper-1", file=("a.mp3", audio))
    assert again.text == "heard 1" and len(uploads.received) == 1


def test_a_gzip_upload_goes_as_sent_and_a_corrupt_one_is_refused_before_it_goes(
    start_proxy, store, uploads
):
    body = gzip.compress(data(6 * MIB, seed=3), compresslevel=1)
    headers = {**FILE, "Content-Encoding": "gzip"}
    recording = start_proxy(uploads.url)
    recording.record()
    answer = requests.post(recording.proxy.url + "/v1/files", data=body, headers=headers)
    assert answer.json()["sha256"] == hashlib.sha256(body).hexdigest()
    corrupt = b"\x1f\x8bnot gzip at all" + body[16:]
    refused = requests.post(recording.proxy.url + "/v1/files", data=corrupt, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "forkpoint_bad_encoding"
    assert len(uploads.received) == 1


def raw_request(url: str, head: bytes) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    sock.sendall(head)
    return sock


def answer_of(sock: socket.socket) -> bytes:
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return answer


def test_a_body_trickled_a_byte_at_a_time_is_cut_at_the_client_timeout(start_proxy, store, uploads):
    """Before: each byte started the clock again, and 1,000 such connections stayed open."""
    thread = start_proxy(uploads.url, client_timeout=1)
    run = thread.record().run
    head = b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    pending = {raw_request(thread.proxy.url, head): b"" for _ in range(20)}
    answers: list[bytes] = []
    started = time.monotonic()
    while pending and time.monotonic() - started < 5:
        for sock in pending:
            with contextlib.suppress(OSError):
                sock.send(b"x")  # a byte every 0.2 s, well within any per-byte timer
        for sock in select.select(list(pending), [], [], 0.2)[0]:
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            pending[sock] += chunk
            if not chunk:  # answered, then closed
                answers.append(pending.pop(sock))
                sock.close()
    took = time.monotonic() - started
    for sock in pending:
        sock.close()
    assert not pending, f"{len(pending)} of 20 still open after {took:.1f} s"
    assert took < 3
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:200]
        assert json.loads(body)["error"]["type"] == "forkpoint_client_timeout"
    assert uploads.received == [] and store.exchanges(run.id) == []


def test_a_head_trickled_a_byte_at_a_time_is_closed_at_the_client_timeout(start_proxy, uploads):
    thread = start_proxy(uploads.url, client_timeout=1)
    thread.record()
    sock = raw_request(thread.proxy.url, b"POST /v1/files HTTP/1.1\r\nHost: x\r\n")
    started, closed = time.monotonic(), False
    while not closed and time.monotonic() - started < 5:
        try:
            sock.send(b"a")  # a header line that never ends, a byte every 0.2 s
            closed = bool(select.select([sock], [], [], 0.2)[0]) and sock.recv(4096) == b""
        except OSError:
            closed = True
    sock.close()
    assert closed and time.monotonic() - started < 3


def test_an_upload_that_stalls_past_its_hold_limit_is_a_408_and_a_cut_upstream(
    start_proxy, store, uploads
):
    thread = start_proxy(uploads.url, client_timeout=1)
    run = thread.record().run
    size = 6 * MIB
    sock = raw_request(
        thread.proxy.url,
        b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % size,
    )
    sock.sendall(data(5 * MIB))  # past the hold limit: on its way upstream
    started = time.monotonic()
    answer = answer_of(sock)  # then nothing more
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408") and b"--client-timeout" in answer, answer[:300]
    assert time.monotonic() - started < 3
    wait_for(lambda: uploads.cut == 1, "the upstream saw no cut")
    assert uploads.received == []
    thread.close()
    assert store.exchanges(run.id) == []


def test_a_slow_upstream_does_not_spend_the_agents_time(start_proxy, store, uploads):
    body = data(6 * MIB, seed=4)
    thread = start_proxy(uploads.url, client_timeout=1)
    run = thread.record().run
    started = time.monotonic()
    answer = requests.post(thread.proxy.url + "/v1/slow", data=body, headers=FILE)
    assert answer.status_code == 200 and answer.json()["size"] == len(body)
    assert time.monotonic() - started > 1.5  # the upstream took longer than the agent may
    thread.close()
    assert [e.request_size for e in store.exchanges(run.id)] == [len(body)]


def test_a_body_over_max_body_is_a_413_and_nothing_is_recorded(start_proxy, store, uploads):
    thread = start_proxy(uploads.url, max_body=6 * MIB)
    run = thread.record().run
    said = requests.post(thread.proxy.url + "/v1/files", data=data(7 * MIB), headers=FILE)
    assert said.status_code == 413  # its Content-Length says so: refused before a byte is read
    assert said.json()["error"]["type"] == "forkpoint_body_too_large"
    assert uploads.received == [] and uploads.cut == 0
    body = data(10 * MIB, seed=5)
    parts = (body[at : at + MIB] for at in range(0, len(body), MIB))
    try:
        chunked = requests.post(thread.proxy.url + "/v1/files", data=parts, headers=FILE)
        assert chunked.status_code == 413
    except requests.ConnectionError:
        pass  # the proxy closed the connection on a client still sending
    wait_for(lambda: uploads.cut == 1, "the upstream saw no cut")
    thread.close()
    assert uploads.received == [] and store.exchanges(run.id) == []


def test_curl_asking_to_continue_with_a_body_over_max_body_is_refused_before_it_sends(
    start_proxy, store, uploads, tmp_path
):
    thread = start_proxy(uploads.url, max_body=6 * MIB)
    thread.record()
    path = tmp_path / "big.bin"
    path.write_bytes(data(7 * MIB))
    done = subprocess.run(  # curl asks `Expect: 100-continue` for a body over 1 MiB
        ["curl", "-sS", "--max-time", "20", "-w", "\n%{http_code} %{size_upload}",
         "--data-binary", f"@{path}", thread.proxy.url + "/v1/files"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    body, _, status = done.stdout.rpartition("\n")
    code, sent = status.split()
    assert code == "413" and json.loads(body)["error"]["type"] == "forkpoint_body_too_large"
    assert float(sent) < MIB  # it never sent its body
    assert uploads.received == []


def test_an_agent_that_hangs_up_mid_upload_leaves_nothing_and_the_proxy_serves_on(
    start_proxy, store, uploads
):
    thread = start_proxy(uploads.url)
    run = thread.record().run
    sock = raw_request(
        thread.proxy.url,
        b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        b"Content-Length: %d\r\n\r\n" % (20 * MIB),
    )
    sock.sendall(data(6 * MIB))
    sock.close()
    wait_for(lambda: uploads.cut == 1, "the upstream saw no cut")
    small = requests.post(thread.proxy.url + "/v1/files", data=b"small", headers=FILE)
    assert small.json()["size"] == 5
    thread.close()
    assert [e.request_body for e in store.exchanges(run.id)] == [b"small"]


def test_an_answer_before_the_whole_upload_is_recorded_with_all_the_agent_sent(
    start_proxy, store, uploads
):
    """The upstream answers 413 before reading: an agent that sends on (requests) has all its
    body recorded, so the exchange replays; one that stops once answered (curl) gets the
    answer within a second, recorded with the body as far as it came and a note."""
    body = data(12 * MIB, seed=6)
    recording = start_proxy(uploads.url)
    run = recording.record().run
    answer = requests.post(recording.proxy.url + "/v1/early", data=body, headers=FILE)
    assert answer.status_code == 413 and answer.json() == {"error": "too large for us"}
    path = Path(store.path).parent / "upload.bin"
    path.write_bytes(body)
    started = time.monotonic()
    done = subprocess.run(
        ["curl", "-sS", "--max-time", "20", "-H", "Content-Type: application/octet-stream",
         "--data-binary", f"@{path}", recording.proxy.url + "/v1/early"],
        capture_output=True, check=False,
    )  # fmt: skip
    assert json.loads(done.stdout) == {"error": "too large for us"}, done.stderr
    assert time.monotonic() - started < 10
    recording.close()
    whole, cut = store.exchanges(run.id)
    assert (whole.status, whole.request_size, whole.note) == (413, len(body), None)
    assert cut.status == 413 and cut.request_size < len(body)
    assert cut.note is not None and "as far as it came" in cut.note
    replaying = start_proxy(None)
    replaying.replay(run.id)
    again = requests.post(replaying.proxy.url + "/v1/early", data=body, headers=FILE)
    assert again.status_code == 413 and uploads.received == []


def test_a_replay_that_goes_live_on_an_upload_sends_it_whole(start_proxy, store, uploads):
    from forkpoint.engine.config import OnDivergence

    body = data(6 * MIB, seed=7)
    recording = start_proxy(uploads.url)
    run = recording.record().run
    requests.post(recording.proxy.url + "/v1/files", data=b"first", headers=FILE)
    recording.close()
    replaying = start_proxy(uploads.url)
    replayed = replaying.replay(run.id, on_divergence=OnDivergence.LIVE).run
    answer = requests.post(replaying.proxy.url + "/v1/files", data=body, headers=FILE)
    assert answer.json()["sha256"] == hashlib.sha256(body).hexdigest()  # kept aside, sent whole
    replaying.close()
    [live] = store.exchanges(replayed.id)
    assert live.origin is Origin.LIVE and live.request_size == len(body)


def test_a_control_request_in_pieces_is_refused(start_proxy, uploads):
    thread = start_proxy(uploads.url)
    thread.record()
    refused = requests.post(
        thread.proxy.url + "/_forkpoint/adapters", data=io.BytesIO(data(5 * MIB)), headers=FILE
    )
    assert refused.status_code == 413


def test_an_upload_through_the_interceptor_goes_on_as_it_arrives(start_proxy, store, tmp_path):
    ca = TestCA(tmp_path / "ca")
    confdir = tmp_path / "config" / "forkpoint"
    certs.ca_cert(confdir)
    service = Uploads()
    thread = LoopThread("uploads-https")
    runner = web.AppRunner(service.app(), access_log=None, auto_decompress=False)

    async def serve() -> str:
        await runner.setup()
        await web.TCPSite(runner, HOST_A, 0, ssl_context=ca.server_context([HOST_A])).start()
        return f"https://{HOST_A}:{runner.addresses[0][1]}"

    async def close() -> None:
        await runner.cleanup()
        await asyncio.sleep(0.01)

    url = thread.call(serve())
    try:
        proxy = start_proxy(
            None, intercept=InterceptOptions(confdir=confdir, upstream_ca=str(ca.cert_path))
        )
        run = proxy.record().run.id
        interceptor = proxy.proxy.interceptor
        assert interceptor is not None
        via = interceptor.url.replace("http://", f"http://{run}:@")
        body = data(12 * MIB, seed=8)
        with requests.Session() as http:
            http.trust_env = False
            http.proxies = {"https": via}
            http.verify = str(certs.ca_cert(confdir))
            answer = http.post(f"{url}/v1/files", data=body, headers=FILE)
        assert answer.json() == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        proxy.close()
        [exchange] = store.exchanges(run)
        assert exchange.request_size == len(body) and exchange.request_pieces
    finally:
        thread.call(close())
        thread.close()
        service.stop()


def test_a_fork_changes_the_model_of_a_request_too_large_to_hold(start_proxy, store, uploads):
    """JSON past 32 MiB goes in pieces; a fork's change still rewrites it, read whole."""
    from forkpoint.engine.changes import Change

    recording = start_proxy(uploads.url)
    parent = recording.record().run.id
    requests.post(recording.proxy.url + "/v1/chat/completions", json={"model": "m", "n": 1})
    recording.close()
    forking = start_proxy(uploads.url)
    child = forking.fork(parent, at=1, change=Change(model="other")).run.id
    requests.post(forking.proxy.url + "/v1/chat/completions", json={"model": "m", "n": 1})
    image = "A" * (33 * MIB)  # a conversation of screenshots, say
    asked = {"model": "m", "messages": [{"role": "user", "content": image}]}
    answer = requests.post(forking.proxy.url + "/v1/chat/completions", json=asked)
    assert answer.json() == {"model": "other", "size": uploads.received[-1][1]}
    forking.close()
    live = store.exchanges(child)[-1]
    assert live.request_pieces and live.request_size == len(json.dumps(asked))
