"""Readers right after a kill -9 (issue 25.14): `runs`, `show` and `export` show every exchange
whose answer reached its client, journaled or stored, and the run `crashed`; a live run stays
`running`; reading writes nothing: the cassette and the journals are byte-identical after.
Real processes throughout: `forkpoint record -- AGENT` and `serve` under load from real
clients, killed with SIGKILL, then the CLI's readers as subprocesses. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import RunStatus
from tests.cli.test_serve import children_of
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import command_env

AGENT = """
import sys, openai
client = openai.OpenAI(max_retries=0, timeout=30)
with open(sys.argv[1], "a") as out:
    for index in range(100_000):
        try:
            answer = client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": f"q{index}"}]
            )
        except Exception:  # its proxy was killed
            break
        out.write(answer.choices[0].message.content + "\\n")
        out.flush()
"""
LOCKER = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN EXCLUSIVE'); "
    "print('locked', flush=True); sys.stdin.readline()"
)


def forkpoint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkpoint", *args], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip


def files(cassette: Path | None, journals: Path) -> dict[str, str]:
    """The cassette file, its WAL and every journal file, each with its bytes' hash. A WAL
    that is not there reads as an empty one: a SQLite reader of a WAL file makes an empty WAL
    and its -shm (the shared-memory index, which read marks change) when the last writer left
    none; neither holds data."""
    found = [p for p in journals.rglob("*") if p.is_file()]
    hashes = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in found}
    if cassette is not None:
        wal = cassette.with_name(cassette.name + "-wal")
        hashes[str(cassette)] = hashlib.sha256(cassette.read_bytes()).hexdigest()
        hashes[str(wal)] = hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest()
    return hashes


def live_pids(pids: list[int]) -> list[int]:
    """Those of `pids` still running (a zombie has let its locks go)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def wait_gone(pids: list[int]) -> None:
    """Until the killed proxy's children (its writer process commits what it was handed, then
    exits; its agent stops at its next request) are gone."""
    deadline = time.monotonic() + 30
    while live_pids(pids):
        assert time.monotonic() < deadline, f"still running: {live_pids(pids)}"
        time.sleep(0.05)


def read_back(env: dict[str, str], store: list[str], run: str) -> tuple[dict, dict, set[str]]:
    """`runs --json`'s line for `run`, `show RUN --json`, and the questions `export RUN` holds."""
    listed = forkpoint(env, "runs", "--json", *store)
    assert listed.returncode == 0, listed.stderr
    line = next(x for x in map(json.loads, listed.stdout.splitlines()) if x["id"] == run)
    shown = forkpoint(env, "show", run, "--json", *store)
    assert shown.returncode == 0, shown.stderr
    exported = forkpoint(env, "export", run, "--format", "jsonl", *store)
    assert exported.returncode == 0, exported.stderr
    questions = set()
    for text in exported.stdout.splitlines()[1:]:
        body = json.loads(text)["exchange"]["request_body"]["text"]
        questions.add(json.loads(body)["messages"][0]["content"])
    return line, json.loads(shown.stdout), questions


def test_a_killed_record_is_read_whole_and_crashed_and_reading_writes_nothing(upstream, tmp_path):
    cassette, answers = tmp_path / "record.db", tmp_path / "answers.txt"
    env = command_env(env={"OPENAI_API_KEY": "k"})
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    record = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "record", "--cassette", str(cassette), "--upstream",
         upstream.url, "--name", "killed", "--", sys.executable, str(agent), str(answers)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    locker = None
    try:
        received = wait_for_answers(answers, 20)
        # the cassette then takes no writes: what follows is only in the journal
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(cassette)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        wait_for_answers(answers, received + 40)
        children = children_of(record.pid)
        record.send_signal(signal.SIGKILL)
        record.wait(10)
    finally:
        if record.poll() is None:
            record.kill()
            record.wait(10)
        if locker is not None:
            assert locker.stdin is not None and locker.stdout is not None
            locker.stdin.close()
            locker.wait(10)
            locker.stdout.close()
        assert record.stderr is not None
        record.stderr.close()
    wait_gone(children)
    got = answers.read_text().splitlines()
    stored = SqliteStore(cassette, create=False, read_only=True)
    try:
        run = stored.find_run("killed")
        in_store = stored.step_count(run.id)
        assert stored.get_run(run.id).status is RunStatus.RUNNING  # never ended: killed
    finally:
        stored.close()
    assert in_store < len(got), "nothing was left in the journal only"
    journals = cassette.with_name(cassette.name + ".journals")
    before = files(cassette, journals)
    line, shown, questions = read_back(env, ["--cassette", str(cassette)], run.id)
    assert files(cassette, journals) == before  # reading wrote nothing
    assert {answer.removeprefix("[gpt-4o] ") for answer in got} <= questions
    assert line["status"] == shown["status"] == "crashed"
    assert line["steps"] == shown["steps"] == len(shown["exchanges"]) >= len(got)
    assert line["held"] == sum(1 for e in shown["exchanges"] if e.get("journaled")) > 0
    assert [e["step"] for e in shown["exchanges"]] == list(range(shown["steps"]))
    listing = forkpoint(env, "runs", "--cassette", str(cassette))
    assert "crashed" in listing.stdout and "in the journal, not merged" in listing.stdout
    assert "forkpoint resume RUN" in listing.stderr
    text = forkpoint(env, "show", run.id, "--cassette", str(cassette))
    assert "[journal]" in text.stdout and "its forkpoint process is gone" in text.stdout
    assert files(cassette, journals) == before


def wait_for_answers(answers: Path, count: int) -> int:
    deadline = time.monotonic() + 60
    while True:
        got = len(answers.read_text().splitlines()) if answers.exists() else 0
        if got >= count:
            return got
        assert time.monotonic() < deadline, f"the agent got {got} answers of {count}"
        time.sleep(0.02)


async def load(
    url: str, count: int, received: list[str], *, kill: int | None = None,
    children: list[int] | None = None,
) -> None:  # fmt: skip
    """`count` requests, 32 at a time, from a real client; each question answered whole is
    noted. Once `len(received)` reaches `kill` (a process id's count of answers, as
    (pid, answers) in `kill`), the proxy is killed with SIGKILL, its children noted first."""
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
        slots = asyncio.Semaphore(32)

        async def one(index: int) -> None:
            async with slots:
                try:
                    answer = await client.chat.completions.create(
                        model="gpt-4o", messages=[{"role": "user", "content": f"q{index}"}]
                    )
                except openai.APIError:
                    return  # cut by the kill
                received.append(answer.choices[0].message.content or "")
                if kill is not None and children is not None and len(received) == KILL_AT:
                    children.extend(children_of(kill))
                    os.kill(kill, signal.SIGKILL)

        await asyncio.gather(*(one(index) for index in range(count)))


KILL_AT = 400


def serve_killed_under_load(store: list[str], env: dict[str, str], upstream_url: str) -> tuple[
    str, list[str]
]:  # fmt: skip
    """A `serve` killed under load (its default run, which it owns): the run's id and the
    answers its client received. While it lives, readers show the run `running`."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream_url,
         *store],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    received: list[str] = []
    children: list[int] = []
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("forkpoint serving on "), line
        url = line.split()[3]
        asyncio.run(load(url, 5, received))
        listed = forkpoint(env, "runs", "--json", *store)
        assert listed.returncode == 0, listed.stderr
        (run,) = map(json.loads, listed.stdout.splitlines())
        assert run["status"] == "running"  # its serve lives: a live run is never crashed
        asyncio.run(load(url, KILL_AT * 3, received, kill=serve.pid, children=children))
        assert serve.wait(10) == -signal.SIGKILL
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(10)
        assert serve.stdout is not None
        serve.stdout.close()
    wait_gone(children)
    return run["id"], received


def test_a_serve_killed_under_load_is_read_whole_and_crashed(upstream, tmp_path):
    cassette = tmp_path / "serve.db"
    env = command_env()
    store = ["--cassette", str(cassette)]
    run_id, received = serve_killed_under_load(store, env, upstream.url)
    journals = cassette.with_name(cassette.name + ".journals")
    before = files(cassette, journals)
    line, shown, questions = read_back(env, store, run_id)
    assert files(cassette, journals) == before  # reading wrote nothing
    assert {answer.removeprefix("[gpt-4o] ") for answer in received} <= questions
    assert line["status"] == shown["status"] == "crashed"
    assert line["steps"] == shown["steps"] >= len(received) >= KILL_AT
    print(f"{len(received)} received, {line['held']} read from the journal")


def pg_tables(url: str) -> str:
    """A hash of every row of the store's tables: equal when nothing was written."""
    import psycopg

    query = "SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM {} t"
    with psycopg.connect(url) as conn:
        tables = ("runs", "exchanges", "tickets", "chunks", "blobs")
        return "".join(str(conn.execute(query.format(table)).fetchone()) for table in tables)


def test_a_serve_killed_under_load_on_postgresql_is_read_whole_and_crashed(
    upstream, tmp_path, postgres_url
):
    state = tmp_path / "state"  # where the PostgreSQL store's journals are kept
    env = command_env(env={"XDG_STATE_HOME": str(state)})
    store = ["--store", postgres_url]
    run_id, received = serve_killed_under_load(store, env, upstream.url)
    before, tables = files(None, state), pg_tables(postgres_url)
    line, shown, questions = read_back(env, store, run_id)
    assert files(None, state) == before and pg_tables(postgres_url) == tables
    assert {answer.removeprefix("[gpt-4o] ") for answer in received} <= questions
    assert line["status"] == shown["status"] == "crashed"
    assert line["steps"] == shown["steps"] >= len(received) >= KILL_AT


def test_a_killed_record_on_postgresql_is_read_whole_and_crashed(upstream, tmp_path, postgres_url):
    state, answers = tmp_path / "state", tmp_path / "answers.txt"
    env = command_env(env={"OPENAI_API_KEY": "k", "XDG_STATE_HOME": str(state)})
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    record = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "record", "--store", postgres_url, "--upstream",
         upstream.url, "--name", "killed", "--", sys.executable, str(agent), str(answers)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        wait_for_answers(answers, 60)
        children = children_of(record.pid)
        record.send_signal(signal.SIGKILL)
        record.wait(10)
    finally:
        if record.poll() is None:
            record.kill()
            record.wait(10)
    wait_gone(children)
    got = answers.read_text().splitlines()
    store = ["--store", postgres_url]
    shown = json.loads(forkpoint(env, "show", "killed", "--json", *store).stdout)
    before, tables = files(None, state), pg_tables(postgres_url)
    line, shown, questions = read_back(env, store, shown["id"])
    assert files(None, state) == before and pg_tables(postgres_url) == tables
    assert {answer.removeprefix("[gpt-4o] ") for answer in got} <= questions
    assert line["status"] == shown["status"] == "crashed"
    assert [e["step"] for e in shown["exchanges"]] == list(range(shown["steps"]))
    assert shown["steps"] >= len(got)
