"""Several `forkpoint serve` processes on one SQLite cassette, serving one run at once: every
exchange lands with its own step, in arrival order, and nothing is dropped."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import openai
import orjson

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.cli.test_serve import ask, stop


def start_serve(cassette: Path, upstream_url: str) -> tuple[subprocess.Popen[str], str]:
    """`serve` with its log kept, to show that nothing was refused."""
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream_url,
         "--cassette", str(cassette)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line
    return process, line.split()[3]


def stopped(*proxies: subprocess.Popen[str]) -> str:
    """Stop the proxies (Ctrl-C); what they logged."""
    for proxy in proxies:
        stop(proxy)
    logs = ""
    for proxy in proxies:
        assert proxy.stderr is not None
        logs += proxy.stderr.read()
        proxy.stderr.close()
    return logs


def questions(store: SqliteStore, run: str) -> list[tuple[int, str]]:
    return [
        (e.step, orjson.loads(e.request_body)["messages"][0]["content"])
        for e in store.exchanges(run)
    ]


def test_two_proxies_on_one_file_number_one_runs_steps_in_arrival_order(upstream, tmp_path):
    cassette = tmp_path / "fleet.db"
    a, url_a = start_serve(cassette, upstream.url)
    b, url_b = start_serve(cassette, upstream.url)
    try:
        for index in range(20):
            url = url_a if index % 2 == 0 else url_b
            assert ask(f"{url}/r/shared", f"q{index}") == f"[gpt-4o] q{index}"
    finally:
        logs = stopped(a, b)
    store = SqliteStore(cassette)
    try:
        assert questions(store, "shared") == [(i, f"q{i}") for i in range(20)], logs
    finally:
        store.close()
    assert "IntegrityError" not in logs and "could not write" not in logs, logs


async def _concurrent(urls: list[str], run: str, per_proxy: int) -> None:
    async def client(url: str, who: int) -> None:
        async with openai.AsyncOpenAI(base_url=f"{url}/r/{run}/v1", api_key="k",
                                      max_retries=0) as c:  # fmt: skip
            for index in range(per_proxy):
                await c.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"p{who}-{index}"}]
                )

    await asyncio.gather(*(client(url, who) for who, url in enumerate(urls) for _ in range(4)))


def test_two_proxies_under_concurrent_load_lose_no_step(upstream, tmp_path):
    cassette = tmp_path / "fleet-load.db"
    a, url_a = start_serve(cassette, upstream.url)
    b, url_b = start_serve(cassette, upstream.url)
    try:
        asyncio.run(_concurrent([url_a, url_b], "busy", 25))
    finally:
        logs = stopped(a, b)
    store = SqliteStore(cassette)
    try:
        steps = [e.step for e in store.exchanges("busy", bodies=False)]
    finally:
        store.close()
    assert steps == list(range(200)), logs
