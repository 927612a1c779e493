"""A response far over the recording limit, through a real `forkpoint serve` in record mode:
the agent gets every byte, the proxy and its writer stay within a memory bound, and the
cassette holds what was kept, marked incomplete with how much was not (issue 14.6)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import DEFAULT_MAX_RECORD_BODY
from tests.cli.test_serve import start_serve, stop, wait_for_rows

MIB = 2**20
SIZE = 512 * MIB
BOUND = 300 * MIB  # the proxy's and its writer's peak resident memory, together

# An upstream of 64 KiB pieces: /plain with a Content-Length, /sse chunked as an event stream.
UPSTREAM = textwrap.dedent("""
    import asyncio, sys
    from aiohttp import web

    PIECE = 64 * 1024
    SIZE = int(sys.argv[1])

    async def plain(request):
        response = web.StreamResponse(headers={
            "content-type": "application/octet-stream", "content-length": str(SIZE)})
        await response.prepare(request)
        piece = b"x" * PIECE
        for _ in range(SIZE // PIECE):
            await response.write(piece)
        await response.write_eof()
        return response

    async def sse(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        piece = b"data: " + b"y" * (PIECE - 8) + b"\\n\\n"
        for _ in range(SIZE // PIECE):
            await response.write(piece)
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


@pytest.fixture
def big_upstream() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(SIZE)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    port = process.stdout.readline().strip()
    assert port.isdigit(), port
    yield f"http://127.0.0.1:{port}"
    process.kill()
    process.wait(10)
    process.stdout.close()


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


def received(url: str) -> int:
    count = 0
    with httpx.stream("GET", url, headers={"x-forkpoint-run": "big"}, timeout=60) as answer:
        assert answer.status_code == 200
        for data in answer.iter_raw(1 * MIB):
            count += len(data)
    return count


def replayed(cassette: Path, route: str) -> tuple[int, str]:
    """What `serve --replay big` gives of the recording: the bytes, then how it ended."""
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--replay", "big",
         "--cassette", str(cassette)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line
    count, ending = 0, "end"
    try:
        with httpx.stream("GET", f"{line.split()[3]}/v1/{route}", timeout=60) as answer:
            try:
                for data in answer.iter_raw():  # as it comes: none held back when it cuts
                    count += len(data)
            except httpx.RemoteProtocolError:
                ending = "cut"
    finally:
        assert stop(process) == 0
    return count, ending


@pytest.mark.parametrize("route", ["plain", "sse"])
def test_a_huge_response_reaches_the_agent_whole_in_bounded_memory(big_upstream, tmp_path, route):
    cassette = tmp_path / "big.db"
    process, url = start_serve(cassette, big_upstream)
    try:
        assert received(f"{url}/v1/{route}") == SIZE  # the agent gets every byte
        wait_for_rows(cassette, 1)  # written, so the writer's peak is in too
        peak = peak_memory(process.pid)
    finally:
        assert stop(process) == 0
    print(f"{route}: proxy and writer peak {peak / MIB:.0f} MiB")
    assert peak < BOUND, f"peak {peak / MIB:.0f} MiB"
    store = SqliteStore(cassette)
    try:
        (kept,) = store.exchanges("big")
    finally:
        store.close()
    assert not kept.complete
    assert kept.error is not None and "recording limit" in kept.error
    kept_bytes = len(kept.response_body)
    assert DEFAULT_MAX_RECORD_BODY * 0.99 < kept_bytes <= DEFAULT_MAX_RECORD_BODY
    assert f"{SIZE - kept_bytes} bytes not recorded" in kept.error
    # a replay serves what was kept, every byte of it, then cuts, as for a stream cut when
    # recorded
    count, ending = replayed(cassette, route)
    assert (ending, count) == ("cut", kept_bytes)


def test_max_record_body_sets_the_limit_and_refuses_a_negative_one(tmp_path):
    small = 4 * MIB
    upstream = subprocess.Popen(
        [sys.executable, "-c", UPSTREAM, str(small)], stdout=subprocess.PIPE, text=True
    )
    assert upstream.stdout is not None
    port = upstream.stdout.readline().strip()
    cassette = tmp_path / "limit.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--cassette", str(cassette),
         "--upstream", f"http://127.0.0.1:{port}", "--max-record-body", "1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("forkpoint serving on "), line
        assert received(f"{line.split()[3]}/v1/plain") == small
        wait_for_rows(cassette, 1)
    finally:
        assert stop(process) == 0
        upstream.kill()
        upstream.wait(10)
        upstream.stdout.close()
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
