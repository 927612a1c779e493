"""Benchmark: reading a YAML text cassette, the per-test setup cost of the pytest plugin.

Two cassettes are written with `text.write`, of 3 and of 100 Chat Completions exchanges (every
third one streamed, 24 events with their `[offset, size]` chunks; OpenAI's response headers; a
request that grows with the conversation, so it is shown indented; `accept: */*`, as httpx
sends it). Each is read `--rounds` times by `text.read` and by the reader it replaced,
reimplemented here as the reference (its error message shortened): the alias pre-pass
(`yaml.parse`, run because the text holds a `*`), then `yaml.load` with CSafeLoader. Reported:
the mean milliseconds per read of each, and their ratio. Both must give the same exchanges.

    .venv/bin/python benchmarks/text_read.py              # about 15 s
    .venv/bin/python benchmarks/text_read.py --rounds 20  # quicker
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from forkpoint.cassettes.formats import text
from forkpoint.cassettes.formats.interop import run_from_json
from forkpoint.errors import CassetteError
from forkpoint.models import Chunk, Exchange, Run

SIZES = (3, 100)
STREAM_EVERY = 3
EVENTS = 24
START = 1_780_000_000.0
SYSTEM = "You are a support agent for an online shop. Be brief, check policy first. " * 4
RESPONSE_HEADERS = (
    ("date", "Tue, 01 Dec 2026 17:00:00 GMT"),
    ("content-type", "application/json"),
    ("openai-organization", "user-abc123"),
    ("openai-processing-ms", "412"),
    ("openai-version", "2020-10-01"),
    ("x-ratelimit-limit-requests", "10000"),
    ("x-ratelimit-remaining-requests", "9999"),
    ("x-ratelimit-reset-requests", "6ms"),
    ("x-request-id", "req_0123456789abcdef"),
    ("cf-cache-status", "DYNAMIC"),
    ("server", "cloudflare"),
)


def chat(step: int) -> Exchange:
    """One model call of a conversation that has had `step` turns; a stream every third."""
    history = [{"role": "system", "content": SYSTEM}]
    for turn in range(step % 8):
        history += [
            {"role": "user", "content": f"Where is order A{turn}? It is late."},
            {"role": "assistant", "content": f"Order A{turn} ships tomorrow, says the tracker."},
        ]
    stream = step % STREAM_EVERY == STREAM_EVERY - 1
    request = {"model": "gpt-4o", "messages": history, "stream": stream}
    answer = f"Order A{step} was delivered on Monday; a refund is due within five days."
    if not stream:
        return _exchange(step, request, _completion(step, answer), None)
    events = [_event(step, word + " ") for word in (answer.split(" ") * EVENTS)[: EVENTS - 1]]
    events.append(b"data: [DONE]\n\n")
    chunks = [Chunk(round(12.5 + 20.25 * i, 3), event) for i, event in enumerate(events)]
    return _exchange(step, request, b"".join(events), chunks)


def _completion(step: int, answer: str) -> bytes:
    message = {"role": "assistant", "content": answer}
    return json.dumps(
        {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 120 + step, "completion_tokens": 18, "total_tokens": 138},
        }
    ).encode()


def _event(step: int, content: str) -> bytes:
    delta = {"index": 0, "delta": {"content": content}}
    chunk = {"id": f"chatcmpl-{step}", "object": "chat.completion.chunk", "choices": [delta]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _exchange(
    step: int, request: dict[str, Any], body: bytes, chunks: list[Chunk] | None
) -> Exchange:
    headers = RESPONSE_HEADERS
    if chunks is not None:
        headers = (*headers[:1], ("content-type", "text/event-stream"), *headers[2:])
    return Exchange(
        run_id="bench", step=step, method="POST", route="/v1/chat/completions",
        request_headers=(("content-type", "application/json"), ("accept", "*/*"),
                         ("user-agent", "OpenAI/Python 1.54.0")),
        request_body=json.dumps(request, separators=(",", ":")).encode(), fingerprint="",
        status=200, response_headers=headers, response_body=body, chunks=chunks,
        upstream="https://api.openai.com/v1/chat/completions",
        started_at=START + step, ttfb_ms=310.5, duration_ms=812.25,
    )  # fmt: skip


def read_before(path: Path) -> tuple[Run, list[Exchange]]:
    """The reader as it was: an event pass refusing aliases, then PyYAML's own constructor."""
    content = path.read_text(encoding="utf-8")
    if "*" in content:
        for event in yaml.parse(content, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise CassetteError(f"{path}: a YAML alias")
    document = yaml.load(content, Loader=yaml.CSafeLoader)
    meta = document.get("forkpoint") or {}
    run = run_from_json(meta.get("run"), ("forkpoint", "run"), default_name=path.stem)
    interactions = enumerate(document["interactions"])
    exchanges = [
        text._exchange(run.id, i, item, {}, ("interactions", i)) for i, item in interactions
    ]
    return run, exchanges


def mean_ms(readers: list[Callable[[Path], object]], path: Path, rounds: int) -> list[float]:
    """Mean wall milliseconds of one read by each reader, after a read to warm the caches. The
    readers take turns, so a machine that gets busier slows them alike."""
    totals = [0.0] * len(readers)
    for read in readers:
        read(path)
    for _ in range(rounds):
        for index, read in enumerate(readers):
            started = time.perf_counter()
            read(path)
            totals[index] += time.perf_counter() - started
    return [total / rounds * 1000 for total in totals]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    rounds = parser.parse_args().rounds
    print(f"{'exchanges':>9} {'bytes':>8} {'before ms':>10} {'after ms':>9} {'after/before':>13}")
    with tempfile.TemporaryDirectory() as work:
        for size in SIZES:
            path = Path(work) / f"chat_{size}.yaml"
            text.write(path, Run(id="bench", name="bench"), [chat(i) for i in range(size)])
            assert read_before(path) == text.read(path), "the readers disagree"
            before, after = mean_ms([read_before, text.read], path, rounds)
            print(f"{size:>9} {path.stat().st_size:>8} {before:>10.2f} {after:>9.2f} "
                  f"{after / before:>12.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
