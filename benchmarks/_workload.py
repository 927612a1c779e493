"""The benchmark's client side: realistic request bodies and the three workloads.

Every body is a ~2 KB Chat Completions request that differs by its index, so a recording holds
distinct exchanges and a replay has to find each one by its body. Every response is checked:
a proxy that answers fast but wrongly must not win.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence

import aiohttp

HEADERS = {
    "Content-Type": "application/json",
    "Authorization": "Bearer sk-bench-0000000000000000000000000000000000000000",
    "User-Agent": "OpenAI/Python 1.100.0",
    "Accept": "application/json",
}
ROUTE = "/v1/chat/completions"
_SYSTEM = (
    "You are a careful software engineering agent working in a Python repository. You read "
    "files before you change them, you run the test suite after every change, and you explain "
    "what you did in two or three sentences. Prefer small, reviewable diffs. Never invent APIs: "
    "when unsure, open the module and read it. Tools: read_file(path), write_file(path, text), "
    "run(cmd). Reply with a tool call when you need one, otherwise with your final answer. "
) * 3


class BadResponse(RuntimeError):
    """A target answered with an error status or a cut body: its numbers would be wrong."""


def chat_body(kind: str, index: int, *, stream: bool = False) -> bytes:
    """A ~2 KB Chat Completions request: a system prompt, a short tool-using history, a task."""
    task = f"Task {kind}-{index}: make tests/test_retry.py::test_budget_{index} pass."
    messages = [
        {"role": "system", "content": _SYSTEM},
        {"role": "user", "content": task},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{index:08d}", "type": "function",
            "function": {"name": "run", "arguments": json.dumps({"cmd": "pytest -x -q"})},
        }]},
        {"role": "tool", "tool_call_id": f"call_{index:08d}",
         "content": f"FAILED tests/test_retry.py::test_budget_{index} - assert 3 == 2"},
        {"role": "user", "content": "Go on; keep the change minimal."},
    ]  # fmt: skip
    body = {"model": "gpt-4o", "messages": messages, "temperature": 0.2, "max_tokens": 512,
            "stream": stream, "user": f"bench-{kind}"}  # fmt: skip
    return json.dumps(body).encode()


def new_client() -> aiohttp.ClientSession:
    """A keep-alive client; connections outlive the pauses between rounds."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=600))


async def post(client: aiohttp.ClientSession, url: str, body: bytes) -> None:
    async with client.post(url + ROUTE, data=body, headers=HEADERS) as response:
        data = await response.read()
    if response.status != 200 or not data.endswith(b"}"):
        raise BadResponse(f"{url}: status {response.status}, body {data[:300]!r}")


async def sequential(
    client: aiohttp.ClientSession, url: str, bodies: Sequence[bytes]
) -> list[float]:
    """Latency in seconds of each request, sent one after another (c=1)."""
    latencies = []
    for body in bodies:
        started = time.perf_counter()
        await post(client, url, body)
        latencies.append(time.perf_counter() - started)
    return latencies


async def concurrent(
    client: aiohttp.ClientSession, url: str, bodies: Sequence[bytes], concurrency: int
) -> float:
    """Seconds to get through `bodies` with `concurrency` requests always in flight."""
    pending = iter(bodies)  # shared: each worker takes the next body when it is free

    async def worker() -> None:
        for body in pending:
            await post(client, url, body)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def stream(client: aiohttp.ClientSession, url: str, body: bytes) -> tuple[float, float]:
    """(time to first body byte, time to last byte) of one SSE response, in seconds."""
    started = time.perf_counter()
    async with client.post(url + ROUTE, data=body, headers=HEADERS) as response:
        last = await response.content.readany()
        first_byte = time.perf_counter() - started
        while data := await response.content.readany():
            last = data
        last_byte = time.perf_counter() - started
    if response.status != 200 or not last.endswith(b"data: [DONE]\n\n"):
        raise BadResponse(f"{url}: stream status {response.status}, ends {last[-80:]!r}")
    return first_byte, last_byte


async def streams(
    client: aiohttp.ClientSession,
    url: str,
    bodies: Sequence[bytes],
    concurrency: int,
    *,
    stagger: float = 0.0,
) -> list[tuple[float, float]]:
    """`stream` for each body, `concurrency` at a time; worker i starts `i * stagger` seconds
    late, so independent agents' streams do not all start on the same millisecond."""
    pending = iter(bodies)
    timings: list[tuple[float, float]] = []

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        for body in pending:
            timings.append(await stream(client, url, body))

    await asyncio.gather(*(worker(i * stagger) for i in range(concurrency)))
    return timings


def p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def p99(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]
