"""A response of hundreds of MiB through a real `forkpoint serve`: recorded whole, in pieces,
and replayed byte-exact, with the proxy's and its writer's memory flat in both (issue 14.6);
an answer the agent fully got is in the cassette, pieces and all, after a kill -9."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import DEFAULT_HOLD_BODY
from tests.cli.test_serve import children_of, start_serve, stop, wait_for_rows

MIB = 2**20
SIZE = 384 * MIB
# The proxy's and its writer's peak resident memory, together, recording or replaying SIZE:
# well under the body, so no part of the chain holds it whole. (Measured: about 90 MiB with
# the writer thread, 160-190 with a writer process, for 384 MiB as for 1 GiB.)
BOUND = 224 * MIB
BLOCK = 64 * 1024

# An upstream of 64 KiB blocks, each different (block i is sha256(i) repeated), so a piece out
# of place or served twice changes the hash: /plain with a Content-Length, /sse chunked as an
# event stream.
UPSTREAM = textwrap.dedent("""
    import asyncio, hashlib, sys
    from aiohttp import web

    BLOCK = 64 * 1024
    SIZE = int(sys.argv[1])

    def block(i):
        return hashlib.sha256(str(i).encode()).digest() * (BLOCK // 32)

    async def plain(request):
        response = web.StreamResponse(headers={
            "content-type": "application/octet-stream", "content-length": str(SIZE)})
        await response.prepare(request)
        for i in range(SIZE // BLOCK):
            await response.write(block(i))
        await response.write_eof()
        return response

    async def sse(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(SIZE // BLOCK):
            await response.write(block(i))
        await response.write_eof()
        return response

    async def main():
        app = web.Application()
        app.router.add_get("/v1/plain", plain)
        app.router.add_get("/v1/sse", sse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


def expected(size: int) -> str:
    """The sha256 of what the upstream sends, computed as it is, block by block."""
    digest = hashlib.sha256()
    for i in range(size // BLOCK):
        digest.update(hashlib.sha256(str(i).encode()).digest() * (BLOCK // 32))
    return digest.hexdigest()


def start_upstream(size: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(size)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    assert port.isdigit(), port
    return process, f"http://127.0.0.1:{port}"


def stop_upstream(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait(10)
    assert process.stdout is not None
    process.stdout.close()


@pytest.fixture
def big_upstream() -> Iterator[str]:
    process, url = start_upstream(SIZE)
    yield url
    stop_upstream(process)


def peak_memory(pid: int) -> int:
    """VmHWM of a process and every process under it, in bytes."""
    total = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            total += int(line.split()[1]) * 1024
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += peak_memory(int(child))
    return total


def fetched(url: str, run: str | None = "big") -> tuple[int, str, str]:
    """What a client gets, hashed as it comes (never held whole): its size, its sha256, and
    how it ended."""
    count, digest, ending = 0, hashlib.sha256(), "end"
    headers = {"x-forkpoint-run": run} if run else {}
    with httpx.stream("GET", url, headers=headers, timeout=60) as answer:
        assert answer.status_code == 200
        try:
            for data in answer.iter_raw(1 * MIB):
                count += len(data)
                digest.update(data)
        except httpx.RemoteProtocolError:
            ending = "cut"
    return count, digest.hexdigest(), ending


@pytest.mark.parametrize("route", ["plain", "sse"])
def test_a_huge_response_is_recorded_whole_and_replayed_exact_in_flat_memory(
    big_upstream, tmp_path, route
):
    whole = expected(SIZE)
    cassette = tmp_path / "big.db"
    process, url = start_serve(cassette, big_upstream)
    try:
        assert fetched(f"{url}/v1/{route}") == (SIZE, whole, "end")  # the agent gets it all
        wait_for_rows(cassette, 1)  # written, so the writer's peak is in too
        recording = peak_memory(process.pid)
    finally:
        assert stop(process) == 0
    store = SqliteStore(cassette)
    try:
        (kept,) = store.exchanges("big")
    finally:
        store.close()
    assert kept.complete and kept.error is None
    assert kept.body_size == SIZE and len(kept.response_body) <= DEFAULT_HOLD_BODY
    assert kept.pieces and (kept.chunks is not None) == (route == "sse")

    process, url = start_serve(cassette, None, "--replay", "big")
    try:
        assert fetched(f"{url}/v1/{route}", run=None) == (SIZE, whole, "end")
        wait_for_rows(cassette, 2)  # the replay's own run names the same pieces
        replaying = peak_memory(process.pid)
    finally:
        assert stop(process) == 0
    store = SqliteStore(cassette)
    try:
        (replay_run,) = [run for run in store.list_runs() if run.id != "big"]
        (again,) = store.exchanges(replay_run.id)
    finally:
        store.close()
    # the replay's record names the pieces it served, without storing them again
    assert [p.digest for p in again.pieces] == [p.digest for p in kept.pieces]
    print(f"{route}: peak {recording / MIB:.0f} MiB recording, {replaying / MIB:.0f} replaying")
    assert recording < BOUND, f"recording peak {recording / MIB:.0f} MiB"
    assert replaying < BOUND, f"replaying peak {replaying / MIB:.0f} MiB"


def test_the_pieces_of_an_answer_the_agent_got_survive_a_kill_9(tmp_path):
    size = 96 * MIB
    upstream, upstream_url = start_upstream(size)
    cassette = tmp_path / "killed.db"
    try:
        process, url = start_serve(cassette, upstream_url)
        try:
            got = fetched(f"{url}/v1/plain")
        finally:  # at once: the writer is still behind the answer the agent has
            for pid in [process.pid, *children_of(process.pid)]:
                os.kill(pid, signal.SIGKILL)
            process.wait(10)
            assert process.stdout is not None
            process.stdout.close()
        assert got == (size, expected(size), "end")
        # the next forkpoint on the cassette merges what the killed one journaled, as it starts
        process, url = start_serve(cassette, upstream_url)
        try:  # an answer, so it is serving (and Ctrl-C stops it cleanly)
            httpx.get(f"{url}/v1/none", headers={"x-forkpoint-run": "probe"}, timeout=10)
        finally:
            assert stop(process) == 0
    finally:
        stop_upstream(upstream)
    store = SqliteStore(cassette)
    try:
        (kept,) = store.exchanges("big")
        digest = hashlib.sha256(kept.response_body)
        for piece in kept.pieces:
            digest.update(store.piece(piece))
    finally:
        store.close()
    assert kept.complete and kept.body_size == size
    assert digest.hexdigest() == expected(size)


def test_max_record_body_caps_what_is_recorded_and_refuses_a_negative_one(tmp_path):
    small = 4 * MIB
    upstream, upstream_url = start_upstream(small)
    cassette = tmp_path / "limit.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--cassette", str(cassette),
         "--upstream", upstream_url, "--max-record-body", "1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("forkpoint serving on "), line
        assert fetched(f"{line.split()[3]}/v1/plain")[0] == small
        wait_for_rows(cassette, 1)
    finally:
        assert stop(process) == 0
        stop_upstream(upstream)
    store = SqliteStore(cassette)
    try:
        (kept,) = store.exchanges("big")
    finally:
        store.close()
    assert len(kept.response_body) == MIB and not kept.complete
    assert kept.error is not None and f"{small - MIB} bytes not recorded" in kept.error
    refused = subprocess.run(
        [sys.executable, "-m", "forkpoint", "serve", "--max-record-body", "-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "--max-record-body" in refused.stderr
    assert "Traceback" not in refused.stderr
