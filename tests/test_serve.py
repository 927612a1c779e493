"""`forkpoint serve` as a long-lived process: many runs, a clean stop and a kill -9."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from forkpoint.cassettes.models import RunStatus
from forkpoint.cassettes.sqlite import SqliteStore


def start_serve(cassette: Path, upstream_url: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream_url,
         "--cassette", str(cassette)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line
    return process, line.split()[3]


def stop(process: subprocess.Popen[str], sig: int = signal.SIGINT) -> int:
    process.send_signal(sig)
    try:
        return process.wait(10)
    finally:
        assert process.stdout is not None
        process.stdout.close()


def ask(url: str, question: str, run: str | None = None) -> str:
    headers = {"X-Forkpoint-Run": run} if run else None
    with openai.OpenAI(
        base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers=headers
    ) as client:
        answer = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}]
        )
    return answer.choices[0].message.content or ""


def wait_for_rows(cassette: Path, count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        store = SqliteStore(cassette)
        try:
            if store.query("SELECT count(*) FROM exchanges")[0][0] >= count:
                return
        finally:
            store.close()
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} exchanges committed")


def test_serve_records_each_run_and_closes_them_on_sigint(upstream, tmp_path):
    cassette = tmp_path / "serve.db"
    process, url = start_serve(cassette, upstream.url)
    try:
        assert ask(url, "one", run="ticket-1") == "[gpt-4o] one"
        assert ask(f"{url}/r/ticket-2", "two") == "[gpt-4o] two"
        assert ask(url, "three", run="ticket-1") == "[gpt-4o] three"
    finally:
        assert stop(process) == 0
    store = SqliteStore(cassette)
    runs = {run.id: run for run in store.list_runs()}
    assert {k: v.status for k, v in runs.items()} == {
        "ticket-1": RunStatus.FINISHED,
        "ticket-2": RunStatus.FINISHED,
    }
    assert [e.step for e in store.exchanges("ticket-1")] == [0, 1]
    store.close()


def test_a_killed_proxy_leaves_a_cassette_with_every_completed_exchange(upstream, tmp_path):
    cassette = tmp_path / "killed.db"
    process, url = start_serve(cassette, upstream.url)
    for index in range(5):
        ask(url, f"question {index}", run="crashy")
    wait_for_rows(cassette, 5)
    stop(process, signal.SIGKILL)
    store = SqliteStore(cassette)
    assert store.get_run("crashy").status is RunStatus.RUNNING  # never closed: it was killed
    assert [e.step for e in store.exchanges("crashy")] == list(range(5))
    store.close()
    # …and a new proxy goes on appending to the same run
    process, url = start_serve(cassette, upstream.url)
    try:
        ask(url, "after the crash", run="crashy")
    finally:
        stop(process)
    store = SqliteStore(cassette)
    assert [e.step for e in store.exchanges("crashy")] == list(range(6))
    store.close()
