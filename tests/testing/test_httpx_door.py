"""The in-process door against the socket it stands in for: the same client, the same answer.

Each case is an answer a raw upstream writes byte by byte (a JSON body, a stream, gzip, no
content, an error, a body until EOF, a cut, a dropped connection), fetched through one proxy
twice, once over its socket and once through `forkpoint.testing.httpx_door`, with httpx and
httpx2, sync and async; recording, then replaying what was recorded. What the client sees
(status, reason, headers but Date, body, or the error it raised) and what the proxy recorded
must be the same both ways.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import importlib
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.engine.config import EngineConfig, OnHangup, Routes
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.testing.httpx_door import MODULES, route
from tests.raw_server import RawServer

CLIENTS = [importlib.import_module(name) for name in MODULES]
DATE = "Date: Tue, 01 Dec 2026 00:00:00 GMT\r\n"
JSON = b'{"id": "chatcmpl-1", "choices": [{"message": {"content": "hi"}}]}'
EVENTS = [b'data: {"delta": "a"}\n\n', b'data: {"delta": "b"}\n\n', b"data: [DONE]\n\n"]
ZIPPED = gzip.compress(JSON)
BIG = 64 << 20


def _chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)


ANSWERS: dict[str, list[bytes] | None] = {
    "json": [
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(JSON)}\r\n"
        f"{DATE}x-request-id: req_1\r\n\r\n".encode()
        + JSON
    ],
    "sse": [
        f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{DATE}"
        "Transfer-Encoding: chunked\r\n\r\n".encode(),
        *[_chunked([event]) for event in EVENTS],
        b"0\r\n\r\n",
    ],
    "gzip": [
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(ZIPPED)}\r\n{DATE}\r\n".encode()
        + ZIPPED
    ],
    "empty": [f"HTTP/1.1 204 No Content\r\n{DATE}\r\n".encode()],
    "error": [
        f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        f"retry-after: 1\r\nContent-Length: 17\r\n{DATE}\r\n".encode()
        + b'{"error": "slow"}'
    ],
    "eof": [f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n{DATE}\r\n".encode(), b"until eof"],
    "cut": [
        f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n{DATE}"
        "Transfer-Encoding: chunked\r\n\r\n".encode(),
        _chunked(EVENTS[:1]),
    ],
    "drop": None,
}


class Upstream(RawServer):
    """Writes each case's answer in its parts, 10 ms apart, then closes the connection; also
    `drip` (a chunk every 50 ms), `stall` (a head, then nothing), `big` (64 MiB) and `upload`
    (the sha256 of the body it read)."""

    def __init__(self) -> None:
        self.sent = 0
        super().__init__()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        case = head.split(b" ")[1].decode().rsplit("/", 1)[-1]
        try:
            if case in ANSWERS:
                for part in ANSWERS[case] or []:
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.01)
            elif case == "drip":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for index in range(100):
                    writer.write(_chunked([b"piece %d\n" % index]))
                    await writer.drain()
                    await asyncio.sleep(0.05)
            elif case == "stall":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(3)
            elif case == "upload":  # reads the body its head announces, answers its digest
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                digest = hashlib.sha256(await reader.readexactly(length)).hexdigest().encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n" + digest)
            elif case == "big":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG)
                block = bytes(range(256)) * 4096
                for _ in range(BIG // len(block)):
                    writer.write(block)
                    await writer.drain()
                    self.sent += len(block)
        except ConnectionError:
            pass
        finally:
            writer.close()


@dataclass
class Seen:
    """What a client saw of one answer."""

    status: int | None = None
    reason: str | None = None
    headers: list[tuple[str, str]] | None = None
    body: bytes | None = None
    error: str | None = None


def fetch(httpx: Any, url: str, *, asynchronous: bool) -> Seen:
    seen = Seen()

    def keep(response: Any) -> None:
        seen.status, seen.reason = response.status_code, response.reason_phrase
        seen.headers = [(k, v) for k, v in response.headers.items() if k.lower() != "date"]

    try:
        if asynchronous:

            async def go() -> None:
                async with httpx.AsyncClient() as client:
                    async with client.stream("POST", url, content=b'{"q": 1}') as response:
                        keep(response)
                        seen.body = b"".join([part async for part in response.aiter_bytes()])

            asyncio.run(go())
        else:
            with httpx.Client() as client:
                with client.stream("POST", url, content=b'{"q": 1}') as response:
                    keep(response)
                    seen.body = b"".join(response.iter_bytes())
    except httpx.TransportError as error:
        seen.error = type(error).__name__
    return seen


def recorded(store: Any, run_id: str) -> list[tuple[Any, ...]]:
    return [
        (e.route, e.status, e.response_headers, e.response_body, e.complete, bool(e.error))
        for e in store.exchanges(run_id)
    ]


@pytest.fixture
def upstream():  # type: ignore[no-untyped-def]
    server = Upstream()
    yield server
    server.stop()


def routed(monkeypatch: pytest.MonkeyPatch, thread: Any) -> None:
    host, port = thread.proxy.url.removeprefix("http://").split(":")
    route(monkeypatch, thread.local_door(), (host, int(port)))


def both_ways(
    monkeypatch: pytest.MonkeyPatch, thread: Any, runs: dict[str, str], httpx: Any, **how: bool
) -> dict[str, list[Seen]]:
    """Every case fetched over the socket, then through the door, each way in its own run."""
    seen: dict[str, list[Seen]] = {}
    for way, run in runs.items():
        if way == "in-process":
            routed(monkeypatch, thread)
        urls = [f"{thread.proxy.url}/r/{run}/up/{case}" for case in ANSWERS]
        seen[way] = [fetch(httpx, url, **how) for url in urls]
        monkeypatch.undo()
    return seen


@pytest.fixture(params=["sqlite", "memory"])
def proxies(request, store, start_proxy):  # type: ignore[no-untyped-def]
    """`start_proxy` and its store: the test's cassette, or a store in memory (the pytest
    plugin's, whose replays the door answers on the client's own thread)."""
    if request.param == "sqlite":
        yield start_proxy, store
        return
    memory, threads = MemoryStore(), []

    def start(upstream_url, *, routes=None):  # type: ignore[no-untyped-def]
        thread = ProxyThread(memory, EngineConfig(routes=Routes.of(upstream_url, routes)))
        threads.append(thread)
        thread.__enter__()
        return thread

    yield start, memory
    for thread in threads:
        thread.close()


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("httpx", CLIENTS, ids=MODULES)
def test_a_client_sees_and_the_proxy_records_the_same_through_either_door(
    proxies, upstream, monkeypatch, httpx, asynchronous
):
    start_proxy, store = proxies
    thread = start_proxy(None, routes={"up": upstream.url})
    runs = {"socket": "run-socket", "in-process": "run-local"}
    seen = both_ways(monkeypatch, thread, runs, httpx, asynchronous=asynchronous)
    assert seen["in-process"] == seen["socket"]
    assert seen["socket"][0].body == JSON and seen["socket"][2].body == JSON  # gzip decoded
    assert seen["socket"][-2].error and seen["socket"][-1].error  # the cut and the drop
    thread.proxy.recorder.flush(10)
    assert recorded(store, "run-local") == recorded(store, "run-socket")

    # replayed: each way from a replay of what the socket recorded, with the upstream gone
    upstream.stop()
    replaying = start_proxy(None, routes={"up": upstream.url})
    replays = {way: replaying.replay("run-socket").run.id for way in runs}
    again = both_ways(monkeypatch, replaying, replays, httpx, asynchronous=asynchronous)
    assert again["in-process"] == again["socket"]
    assert [s.body for s in again["socket"]] == [s.body for s in seen["socket"]]
    replaying.proxy.recorder.flush(10)
    assert recorded(store, replays["in-process"]) == recorded(store, replays["socket"])


@pytest.mark.parametrize("httpx", CLIENTS, ids=MODULES)
def test_an_upload_in_pieces_is_recorded_and_replayed_alike_through_either_door(
    proxies, upstream, monkeypatch, httpx
):
    body = bytes(range(256)) * (6 << 12)  # 6 MiB: past the 4 MiB a file's body is held to
    digest = hashlib.sha256(body).hexdigest().encode()

    def uploads(thread: Any, runs: dict[str, str]) -> dict[str, tuple[int, bytes]]:
        answers = {}
        for way, run in runs.items():
            if way == "in-process":
                routed(monkeypatch, thread)
            with httpx.Client() as client:
                answer = client.post(f"{thread.proxy.url}/r/{run}/up/upload", content=body)
            answers[way] = (answer.status_code, answer.content)
            monkeypatch.undo()
        thread.proxy.recorder.flush(10)
        return answers

    def kept(store: Any, run: str) -> list[tuple[Any, ...]]:
        return [  # a piece's time is the door's own
            (e.request_body, [(p.digest, p.size) for p in e.request_pieces], e.request_size,
             e.fingerprint, e.response_body)
            for e in store.exchanges(run)
        ]  # fmt: skip

    start_proxy, store = proxies
    thread = start_proxy(None, routes={"up": upstream.url})
    runs = {"socket": "upload-socket", "in-process": "upload-local"}
    assert uploads(thread, runs) == dict.fromkeys(runs, (200, digest))
    [(held, pieces, size, _, _)] = kept(store, "upload-socket")
    assert (held, size) == (body[: 4 << 20], len(body)) and pieces
    assert kept(store, "upload-local") == kept(store, "upload-socket")
    upstream.stop()  # replayed both ways from what the socket recorded, offline
    replaying = start_proxy(None, routes={"up": upstream.url})
    replays = {way: replaying.replay("upload-socket").run.id for way in runs}
    assert uploads(replaying, replays) == dict.fromkeys(runs, (200, digest))
    assert kept(store, replays["in-process"]) == kept(store, replays["socket"])


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("httpx", CLIENTS, ids=MODULES)
def test_a_replay_in_memory_is_answered_on_the_clients_thread_while_the_loop_is_busy(
    upstream, monkeypatch, httpx, asynchronous
):
    store, loop = MemoryStore(), LoopThread("test-proxy")
    config = EngineConfig(routes=Routes.of(None, {"up": upstream.url}))
    cases = ("json", "gzip", "error", "cut")
    try:
        recording = ProxyThread(store, config, loop=loop)
        with recording:
            source = recording.record().run.id
            url = f"{recording.proxy.url}/r/{source}/up"
            seen = [fetch(httpx, f"{url}/{case}", asynchronous=False) for case in cases]
        replaying = ProxyThread(store, config, loop=loop)
        with replaying:
            run = replaying.replay(source).run.id
            routed(monkeypatch, replaying)
            busy = threading.Event()

            def hold() -> None:
                busy.set()
                time.sleep(2)

            loop.loop.call_soon_threadsafe(hold)
            assert busy.wait(5)
            started = time.monotonic()
            url = f"{replaying.proxy.url}/r/{run}/up"
            again = [fetch(httpx, f"{url}/{case}", asynchronous=asynchronous) for case in cases]
            took = time.monotonic() - started
            monkeypatch.undo()
    finally:
        loop.close()
    assert took < 1, f"the replay waited {took:.2f} s for the proxy's busy loop"
    assert again == seen
    replayed = store.exchanges(run)
    assert [e.origin.value for e in replayed] == ["replayed"] * len(cases)
    assert [e.response_body for e in replayed] == [e.response_body for e in store.exchanges(source)]
    assert [e.complete for e in replayed] == [True, True, True, False]


@pytest.mark.parametrize("httpx", CLIENTS, ids=MODULES)
def test_a_stall_is_a_read_timeout_and_a_hang_up_is_recorded_as_over_a_socket(
    start_proxy, store, upstream, monkeypatch, httpx
):
    thread = start_proxy(None, routes={"up": upstream.url}, on_hangup=OnHangup.CANCEL)
    run = thread.record().run
    routed(monkeypatch, thread)
    with httpx.Client(timeout=httpx.Timeout(5, read=0.3)) as client:
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{thread.proxy.url}/up/stall")
        assert time.monotonic() - started < 2
        with client.stream("POST", f"{thread.proxy.url}/up/drip") as response:
            first = next(response.iter_raw())
    assert first == b"piece 0\n"
    deadline = time.monotonic() + 10
    while store.step_count(run.id) < 2 and time.monotonic() < deadline:
        thread.proxy.recorder.flush(1)
        time.sleep(0.01)
    stall, drip = store.exchanges(run.id)
    assert "client disconnected" in (stall.error or "")
    assert drip.complete is False and "client disconnected" in (drip.error or "")
    assert drip.response_body.startswith(b"piece 0\n") and b"piece 99" not in drip.response_body


def test_an_answer_not_read_is_held_a_window_at_a_time_and_arrives_whole(
    start_proxy, upstream, monkeypatch
):
    httpx = CLIENTS[0]
    thread = start_proxy(None, routes={"up": upstream.url})
    thread.record()
    routed(monkeypatch, thread)
    digest = hashlib.sha256()
    with httpx.Client() as client:
        with client.stream("GET", f"{thread.proxy.url}/up/big") as response:
            chunks = response.iter_raw()
            digest.update(next(chunks))
            time.sleep(1.0)  # the agent busy elsewhere: the gateway must wait, not buffer
            held = upstream.sent
            for chunk in chunks:
                digest.update(chunk)
    assert held < BIG // 3, f"{held} bytes were read from the upstream for an agent reading none"
    expected = hashlib.sha256(bytes(range(256)) * 4096 * (BIG // (256 * 4096))).hexdigest()
    assert digest.hexdigest() == expected


def test_other_addresses_go_over_the_network_as_before(start_proxy, upstream, monkeypatch):
    httpx = CLIENTS[0]
    thread = start_proxy(None, routes={"up": upstream.url})
    routed(monkeypatch, thread)
    with httpx.Client() as client:
        response = client.post(f"{upstream.url}/json", content=b"{}")
    assert (response.status_code, response.content) == (200, JSON)


def test_an_answer_left_open_is_hung_up_on_when_the_door_closes(start_proxy, store, upstream):
    httpx = CLIENTS[0]
    thread = start_proxy(None, routes={"up": upstream.url}, on_hangup=OnHangup.CANCEL)
    run = thread.record().run
    door = thread.local_door()
    host, port = thread.proxy.url.removeprefix("http://").split(":")
    monkeypatch = pytest.MonkeyPatch()
    route(monkeypatch, door, (host, int(port)))
    try:
        client = httpx.Client()
        response = client.send(
            client.build_request("POST", f"{thread.proxy.url}/up/drip"), stream=True
        )
        assert next(response.iter_raw()) == b"piece 0\n"  # then neither read nor closed
        door.close()  # as the test's proxy stops
        deadline = time.monotonic() + 5
        while store.step_count(run.id) < 1 and time.monotonic() < deadline:
            thread.proxy.recorder.flush(1)
            time.sleep(0.01)
    finally:
        monkeypatch.undo()
    [drip] = store.exchanges(run.id)
    assert drip.complete is False and "client disconnected" in (drip.error or "")
    assert b"piece 99" not in drip.response_body
