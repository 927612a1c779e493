"""`forkpoint serve` as a long-lived process: many runs, a clean stop and a kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import RunStatus


def start_serve(
    cassette: Path, upstream_url: str | None, *args: str, own_group: bool = False
) -> tuple[subprocess.Popen[str], str]:
    """`serve` on `cassette` (with ARGS; `--upstream` unless None), once it listens; its URL."""
    upstream = [] if upstream_url is None else ["--upstream", upstream_url]
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", *upstream,
         "--cassette", str(cassette), *args],
        stdout=subprocess.PIPE, text=True, start_new_session=own_group,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line
    return process, line.split()[3]


def stop(process: subprocess.Popen[str], sig: int = signal.SIGINT, *, group: bool = False) -> int:
    if group:  # as Ctrl-C in a terminal does: the proxy and the processes it started
        os.killpg(process.pid, sig)
    else:
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


async def burst(url: str, run: str, count: int) -> None:
    """`count` requests, 32 at a time: enough traffic for the proxy to move its writing to a
    writer process."""
    async with openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="k", max_retries=0, default_headers={"X-Forkpoint-Run": run}
    ) as client:
        slots = asyncio.Semaphore(32)

        async def one(index: int) -> None:
            async with slots:
                await client.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": f"q{index}"}]
                )

        await asyncio.gather(*(one(index) for index in range(count)))


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_ctrl_c_under_load_commits_everything_the_writer_process_took(upstream, tmp_path):
    cassette = tmp_path / "busy.db"
    process, url = start_serve(cassette, upstream.url, own_group=True)
    sent = 0
    try:
        # The proxy moves its writing to a process past PROMOTE_AT exchanges a second, which
        # a machine busy with other tests may not reach in one burst: another, until it does.
        while sent < 2000 and (sent < 400 or not children_of(process.pid)):
            asyncio.run(burst(url, "busy", 200))
            sent += 200
        assert children_of(process.pid), "no writer process under load"
    finally:
        assert stop(process, group=True) == 0
    store = SqliteStore(cassette)
    assert store.get_run("busy").status is RunStatus.FINISHED
    assert [e.step for e in store.exchanges("busy", bodies=False)] == list(range(sent))
    store.close()
