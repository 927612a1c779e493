"""kill -9 at a random moment under load, of `forkpoint serve` or of its writer process: no
exchange whose response fully reached its client is missing from the cassette once the next
forkpoint has merged the journals (issue 14.1).

Each round starts two proxies on one cassette and loads both (plain requests and streams, on
each proxy's default run and on a run both serve); each is a trial: at a random moment its
victim (the proxy, or its writer process if it has one, then the proxy) is killed. The next
round's proxies merge what the killed ones left; a last `forkpoint serve` merges the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.cli.test_serve import children_of, start_serve, stop

ROUNDS = 25  # two trials each
WORKERS = 12  # per proxy: 3 in 4 on its default run, 1 in 4 on the run both proxies serve
STREAM_EVERY = 4  # one request in 4 is streamed
FIRST_ANSWER = 30.0  # seconds a proxy may take to answer its first request

pytestmark = pytest.mark.slow


@dataclass
class Trial:
    name: str
    victim: str = "proxy"
    received: set[str] = field(default_factory=set)
    orphans: list[int] = field(default_factory=list)  # writer processes left running


async def load(url: str, trial: Trial, shared_run: str, stopped: asyncio.Event) -> None:
    async def worker(index: int, http: aiohttp.ClientSession) -> None:
        headers = {"x-forkpoint-run": shared_run} if index % 4 == 3 else {}
        sent = 0
        while not stopped.is_set():
            question = f"{trial.name}-w{index}-{sent}"
            stream = sent % STREAM_EVERY == 1
            sent += 1
            body = {"model": "gpt-4o", "stream": stream,
                    "messages": [{"role": "user", "content": question}]}  # fmt: skip
            try:
                async with http.post(f"{url}/v1/chat/completions", json=body,
                                     headers=headers) as response:  # fmt: skip
                    await response.read()  # to its last byte, or it raises
                    if response.status == 200:
                        trial.received.add(question)
            except (TimeoutError, aiohttp.ClientError, OSError):
                await asyncio.sleep(0.01)  # the proxy is gone

    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        await asyncio.gather(*(worker(index, http) for index in range(WORKERS)))


async def kill_at_random(process: subprocess.Popen[str], trial: Trial, rng: random.Random,
                         stopped: asyncio.Event) -> None:  # fmt: skip
    # at a random moment once answers flow: on a busy machine the first can take longer than
    # the whole window, and a trial that received nothing tests nothing
    deadline = time.monotonic() + FIRST_ANSWER
    while not trial.received and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(rng.uniform(0.05, 0.7))
    writers = children_of(process.pid)
    if writers and rng.random() < 0.7:
        trial.victim = "writer"
        os.kill(writers[0], signal.SIGKILL)  # the proxy writes from its own process from now on
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        writers = []
    else:
        trial.orphans = writers  # left to finish what they took
    process.send_signal(signal.SIGKILL)
    await asyncio.to_thread(process.wait, 10)
    stopped.set()


async def round_of_two(cassette: Path, upstream_url: str, number: int,
                       rng: random.Random) -> list[Trial]:  # fmt: skip
    started = await asyncio.gather(*(asyncio.to_thread(start_serve, cassette, upstream_url)
                                     for _ in range(2)))  # fmt: skip
    trials = [Trial(f"r{number}p{index}") for index in range(2)]
    jobs = []
    for (process, url), trial in zip(started, trials, strict=True):
        stopped = asyncio.Event()
        jobs += [load(url, trial, f"shared-{number}", stopped),
                 kill_at_random(process, trial, rng, stopped)]  # fmt: skip
    try:
        await asyncio.gather(*jobs)
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.kill()
            process.wait(10)
            assert process.stdout is not None
            process.stdout.close()
    return trials


def wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                break
            if state == "Z":
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"writer process {pid} still running after {timeout} s")


def stored_questions(cassette: Path) -> Counter[str]:
    store = SqliteStore(cassette)
    try:
        found: Counter[str] = Counter()
        for run in store.list_runs():
            for exchange in store.exchanges(run.id):
                found[json.loads(exchange.request_body)["messages"][0]["content"]] += 1
        return found
    finally:
        store.close()


def test_kill_9_under_load_loses_no_exchange_a_client_received(upstream, tmp_path, capfd):
    cassette = tmp_path / "trials.db"
    rng = random.Random(os.environ.get("FORKPOINT_TRIALS_SEED", time.time_ns()))
    began = time.monotonic()
    trials: list[Trial] = []
    for number in range(ROUNDS):
        trials += asyncio.run(round_of_two(cassette, upstream.url, number, rng))
    wait_gone([pid for trial in trials for pid in trial.orphans])
    process, url = start_serve(cassette, upstream.url)  # the next forkpoint merges the rest
    try:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "last"}]}
        httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)  # serving: Ctrl-C works
    finally:
        assert stop(process) == 0
    stored = stored_questions(cassette)
    assert not (tmp_path / "trials.db.journals").exists() or not any(
        (tmp_path / "trials.db.journals").glob("*.journal")
    ), "a journal was left unmerged"

    lost = {trial.name: trial.received - stored.keys() for trial in trials}
    received = sum(len(trial.received) for trial in trials)
    victims = Counter(trial.victim for trial in trials)
    with capfd.disabled():
        print(f"\nkill -9 trials: {len(trials)} ({victims['proxy']} of the proxy, "
              f"{victims['writer']} of its writer process, then the proxy) in "
              f"{time.monotonic() - began:.0f} s: lost {sum(map(len, lost.values()))} of "
              f"{received} exchanges the clients received")  # fmt: skip
    assert all(trial.received for trial in trials), "a trial received nothing"
    # every proxy kept a journal: one without could lose what it served (none did, this time)
    assert "cannot keep a journal" not in capfd.readouterr().err
    assert not any(lost.values()), {  # who was killed, how many were lost, the first of them
        name: (trial.victim, len(lost[name]), sorted(lost[name])[:5])
        for trial in trials
        if lost[name := trial.name]
    }
    duplicated = [question for question, count in stored.items() if count > 1]
    assert not duplicated, f"recorded twice: {duplicated[:5]}"
