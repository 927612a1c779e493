"""The benchmark's client side: realistic requests and the three workloads.

Two kinds of request, each differing by its index, so a recording holds distinct exchanges and
a replay has to find each one by its body: `history`, a ~2 KB Chat Completions body (a short
tool-using history) with a few hand-written headers; and `sdk`, a 4 KB body of one long user
message with the headers and body the openai SDK itself builds (`sdk_request`). Every
response is checked: a proxy that answers fast but wrongly must not win.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence

import aiohttp
import httpx
import openai

Headers = dict[str, str]
HEADERS: Headers = {
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


# A paragraph of the kind agents paste into prompts: prose, paths, identifiers, numbers.
_PROSE = (
    "The retry budget in src/client/retry.py is shared by every connection of the pool, so a "
    "burst of 503s on one host starves the others; test_budget_{i} shows it with 3 hosts and "
    "a budget of 10. Keep one budget per connection, refill it at 0.5 tokens a second, and "
    "log the host (not the full URL) when a budget runs out. Step {i}: "
)
SDK_BODY = 4096  # bytes of each `sdk` request body
_SDK_DROP = {"host", "content-length", "connection"}  # the client's own for its next hop


class _Captured(httpx.BaseTransport):
    """The SDK's transport for `sdk_request`: keeps the request it is handed, answers 200."""

    def __init__(self) -> None:
        self.request: httpx.Request | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.request = request
        request.read()
        body = b'{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o","choices":[]}'
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})


def sdk_request(kind: str, index: int, *, stream: bool = False) -> tuple[Headers, bytes]:
    """The headers and body `openai.OpenAI().chat.completions.create` sends for one long user
    message (4 KB of body): built by the SDK, taken off its transport."""
    transport = _Captured()
    client = openai.OpenAI(
        api_key="sk-proj-" + "Bench0123456789abcdefXYZ" * 2, base_url="http://bench.invalid/v1",
        http_client=httpx.Client(transport=transport), max_retries=0,
    )  # fmt: skip
    head = f"Task {kind}-{index}. "
    text = head + _PROSE.format(i=index) * (SDK_BODY // len(_PROSE) + 1)
    size = len(_sdk_body(client, transport, "", stream))  # the body around the message
    _sdk_body(client, transport, text[: SDK_BODY - size], stream)
    assert transport.request is not None
    headers = {k: v for k, v in transport.request.headers.items() if k.lower() not in _SDK_DROP}
    return headers, transport.request.content


def _sdk_body(client: openai.OpenAI, transport: _Captured, text: str, stream: bool) -> bytes:
    if stream:  # a stream's answer is not read here: the SDK returns before it
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": text}], stream=True
        ).close()
    else:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": text}])
    assert transport.request is not None
    return transport.request.content


def new_client() -> aiohttp.ClientSession:
    """A keep-alive client; connections outlive the pauses between rounds."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=600))


async def post(
    client: aiohttp.ClientSession, url: str, body: bytes, headers: Headers = HEADERS
) -> None:
    async with client.post(url + ROUTE, data=body, headers=headers) as response:
        data = await response.read()
    if response.status != 200 or not data.endswith(b"}"):
        raise BadResponse(f"{url}: status {response.status}, body {data[:300]!r}")


async def sequential(
    client: aiohttp.ClientSession, url: str, bodies: Sequence[bytes], headers: Headers = HEADERS
) -> list[float]:
    """Latency in seconds of each request, sent one after another (c=1)."""
    latencies = []
    for body in bodies:
        started = time.perf_counter()
        await post(client, url, body, headers)
        latencies.append(time.perf_counter() - started)
    return latencies


async def concurrent(
    client: aiohttp.ClientSession,
    url: str,
    bodies: Sequence[bytes],
    concurrency: int,
    headers: Headers = HEADERS,
) -> float:
    """Seconds to get through `bodies` with `concurrency` requests always in flight."""
    pending = iter(bodies)  # shared: each worker takes the next body when it is free

    async def worker() -> None:
        for body in pending:
            await post(client, url, body, headers)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def stream(
    client: aiohttp.ClientSession, url: str, body: bytes, headers: Headers = HEADERS
) -> tuple[float, float]:
    """(time to first body byte, time to last byte) of one SSE response, in seconds."""
    started = time.perf_counter()
    async with client.post(url + ROUTE, data=body, headers=headers) as response:
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
    headers: Headers = HEADERS,
) -> list[tuple[float, float]]:
    """`stream` for each body, `concurrency` at a time; worker i starts `i * stagger` seconds
    late, so independent agents' streams do not all start on the same millisecond."""
    pending = iter(bodies)
    timings: list[tuple[float, float]] = []

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        for body in pending:
            timings.append(await stream(client, url, body, headers))

    await asyncio.gather(*(worker(i * stagger) for i in range(concurrency)))
    return timings


def p50(values: Sequence[float]) -> float:
    return statistics.median(values)


def p99(values: Sequence[float]) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]
