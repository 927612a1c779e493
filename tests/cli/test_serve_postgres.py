"""A fleet of `forkpoint serve` replicas on one PostgreSQL store: one run served by four at
once, a run recorded through one proxy and replayed, forked and resumed through another, a
replica killed under load, the database restarted under load, a store of another version."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psycopg

from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.models import Origin, RunStatus
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.pg import server_alone, unavailable
from tests.runner import command_env
from tests.runner import forkpoint as run_forkpoint

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(ROOT / "tests/e2e/agents/stateful_agent.py")]


def start_serve(store: str, upstream_url: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream_url,
         "--store", store],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=command_env(),
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line + process.stderr.read()  # type: ignore[union-attr]
    return process, line.split()[3]


def stop(process: subprocess.Popen[str], sig: int = signal.SIGINT) -> str:
    """Stop a replica; its log."""
    process.send_signal(sig)
    process.wait(60)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    log = process.stderr.read()
    process.stderr.close()
    return log


async def client(url: str, run: str, name: str, count: int, received: list[str]) -> None:
    """`count` chat requests one after another; each question fully answered is noted."""
    async with httpx.AsyncClient(base_url=f"{url}/r/{run}", timeout=60) as http:
        for index in range(count):
            question = f"{name}-{index}"
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
            try:
                answer = await http.post("/v1/chat/completions", json=body)
            except httpx.TransportError:
                continue  # its replica went away
            if answer.status_code == 200 and question in answer.text:
                received.append(question)


def questions(store: PostgresStore, run: str) -> list[tuple[int, str]]:
    return [
        (e.step, json.loads(e.request_body)["messages"][0]["content"])
        for e in store.exchanges(run)
    ]


def test_four_replicas_record_one_run_every_step_present_in_order(upstream, postgres_url):
    replicas = [start_serve(postgres_url, upstream.url) for _ in range(4)]
    received: list[str] = []
    try:
        asyncio.run(_clients([url for _, url in replicas], "shared", 3, 15, received))
    finally:
        logs = [stop(process) for process, _ in replicas]
    assert len(received) == 4 * 3 * 15, logs
    store = PostgresStore(postgres_url)
    stored = questions(store, "shared")
    store.close()
    assert [step for step, _ in stored] == list(range(180)), logs  # no gap, no duplicate
    assert sorted(q for _, q in stored) == sorted(received)
    for name in {q.rpartition("-")[0] for q in received}:  # each client's in the order sent
        mine = [int(q.rpartition("-")[2]) for _, q in stored if q.rpartition("-")[0] == name]
        assert mine == sorted(mine)


async def _clients(urls: list[str], run: str, per_replica: int, count: int,
                   received: list[str]) -> None:  # fmt: skip
    await asyncio.gather(*(
        client(url, run, f"r{r}c{c}", count, received)
        for r, url in enumerate(urls) for c in range(per_replica)
    ))  # fmt: skip


def agent(store: str, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_forkpoint(*args, "--store", store, "--", *AGENT,
                         env={"OPENAI_API_KEY": "k", **(env or {})})  # fmt: skip


def test_a_run_recorded_through_one_proxy_replays_forks_and_resumes_through_another(
    upstream, postgres_url
):
    crashed = agent(postgres_url, "record", "--name", "crashy", "--upstream", upstream.url,
                    env={"CRASH_AFTER": "4"})  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL, crashed.stderr
    upstream.upstream.reset()
    resumed = agent(postgres_url, "resume", "crashy", "--upstream", upstream.url)
    assert resumed.returncode == 0, resumed.stderr
    assert "restored_step=3 turn=3" in resumed.stderr
    assert upstream.request_count == 2  # only the turns never recorded went upstream
    upstream.stop()
    replayed = agent(postgres_url, "replay", "crashy")  # offline
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout.splitlines()[0]) == json.loads(
        resumed.stdout.splitlines()[0]
    )
    forked = agent(postgres_url, "fork", "crashy", "--at", "3", "--on-divergence", "fail")
    assert forked.returncode != 0  # the fork's step 3 goes live: there is no upstream now
    store = PostgresStore(postgres_url, read_only=True)
    run = store.find_run("crashy")
    assert run.status is RunStatus.FINISHED
    assert [e.step for e in store.exchanges(run.id)] == list(range(6))
    replay_run = store.find_run(replayed.run_id)
    assert [e.origin for e in store.exchanges(replay_run.id)] == [Origin.REPLAYED] * 6
    fork_run = store.find_run(forked.run_id)
    assert fork_run.parent_id == run.id and fork_run.fork_step == 3
    store.close()


def test_a_replica_killed_under_load_loses_nothing_its_clients_received(upstream, postgres_url):
    (doomed, doomed_url), (kept, kept_url) = (start_serve(postgres_url, upstream.url)
                                              for _ in range(2))  # fmt: skip
    received: list[str] = []

    async def load() -> None:
        async def kill_mid_load() -> None:
            while len(received) < 200:
                await asyncio.sleep(0.002)
            doomed.send_signal(signal.SIGKILL)

        await asyncio.gather(kill_mid_load(), _clients([doomed_url, kept_url], "shared", 4, 100,
                                                       received))  # fmt: skip

    try:
        asyncio.run(load())
    finally:
        doomed.wait(10)
        doomed.stdout.close(), doomed.stderr.close()  # type: ignore[union-attr]
        stop(kept)
    store = PostgresStore(postgres_url)
    stored = {q for _, q in questions(store, "shared")}
    store.close()
    lost = [q for q in received if q not in stored]
    assert 400 < len(received) < 800  # the kept replica's, and the doomed one's before it died
    assert not lost, f"{len(lost)} of {len(received)} received exchanges lost"


def restart_postgres() -> None:
    """Restart the server once no other worker's test runs (`tests.pg.server_alone`)."""
    version = os.listdir("/etc/postgresql")[0]
    with server_alone():
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip


def postgres_is_local() -> bool:
    return os.path.isdir("/etc/postgresql") and os.geteuid() == 0


def test_a_database_restarted_under_load_loses_nothing(upstream, postgres_url):
    if not postgres_is_local():
        unavailable("the test restarts the local PostgreSQL cluster: it needs it and root")
    process, url = start_serve(postgres_url, upstream.url)
    received: dict[str, list[str]] = {"": [], "/r/named": []}
    outcomes: list[int] = []
    done = threading.Event()

    def load(prefix: str) -> None:
        """The default run (numbered by this proxy) or a named one (numbered by the store)."""
        with httpx.Client(base_url=url + prefix, timeout=60) as http:
            index = 0
            while not done.is_set():
                question = f"q-{index}"
                body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
                answer = http.post("/v1/chat/completions", json=body)
                outcomes.append(answer.status_code)
                if answer.status_code == 200:
                    received[prefix].append(question)
                index += 1

    loaders = [threading.Thread(target=load, args=(prefix,)) for prefix in received]
    for loader in loaders:
        loader.start()
    try:
        time.sleep(0.5)
        restart_postgres()
        time.sleep(1.0)
    finally:
        done.set()
        for loader in loaders:
            loader.join(60)
        log = stop(process)
    assert outcomes and set(outcomes) == {200}, log  # the proxy kept serving
    # An outage the store saw is said in forkpoint's words, and its end too; a restart quick
    # enough that no write met it (the pool reconnects between batches) is rightly not said.
    assert ("unreachable" in log) == ("is back after" in log), log
    assert "error connecting" not in log and "Traceback" not in log, log
    store = PostgresStore(postgres_url, read_only=True)
    runs = {run.id: run for run in store.list_runs()}
    named = [q for _, q in questions(store, "named")]
    (default,) = set(runs) - {"named"}
    stored = [q for _, q in questions(store, default)]
    store.close()
    assert stored == received[""], log  # every one, in order
    assert named == received["/r/named"], log


def test_a_store_of_another_version_is_refused_with_a_message(postgres_url):
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE forkpoint_schema SET version = 99")
    shown = run_forkpoint("runs", "--store", postgres_url)
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert "schema version 99, from a newer forkpoint" in shown.stderr
    assert "upgrade forkpoint" in shown.stderr
