"""`forkpoint copy`: runs moved between an SQLite file and PostgreSQL, both ways, replay the
same bytes after the move with the upstream gone."""

from __future__ import annotations

from pathlib import Path

import httpx

from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.models import Launch, Park, Run, RunStatus, Snapshot
from forkpoint.runtime.proxy import ProxyThread
from tests.cassettes.test_contract import conversation, exchange
from tests.cassettes.test_contract_parks import answer_to, pending
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import forkpoint

REQUESTS = [
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "plain"}]},
    {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "streamed"}]},
    {"model": "gpt-4o", "messages": [{"role": "user", "content": "again"}]},
]


def answers(url: str) -> list[bytes]:
    with httpx.Client(base_url=url, timeout=30) as client:
        return [client.post("/v1/chat/completions", json=body).content for body in REQUESTS]


def recorded(location: str, upstream_url: str) -> tuple[str, list[bytes]]:
    store = open_store(location)
    thread = ProxyThread(store, EngineConfig(routes=Routes.of(upstream_url)))
    try:
        session = thread.record(name="ticket")
        with thread as proxy:
            got = answers(proxy.url)
    finally:
        store.close()
    return session.run.id, got


def replayed(location: str, run_id: str) -> list[bytes]:
    store = open_store(location)
    thread = ProxyThread(store, EngineConfig(routes=Routes()))  # offline: no upstream at all
    try:
        thread.replay(run_id)
        with thread as proxy:
            return answers(proxy.url)
    finally:
        store.close()


def test_sqlite_to_postgres_and_back_replays_the_same_bytes(
    upstream, postgres_url: str, tmp_path: Path
):
    first, back = tmp_path / "first.db", tmp_path / "back.db"
    run_id, live = recorded(str(first), upstream.url)
    store = SqliteStore(first)
    store.add_snapshot(Snapshot(run_id, 1, "agent", "application/json", b'{"memo": 1}'))
    store.close()
    upstream.stop()
    done = forkpoint("copy", first, postgres_url)
    assert done.returncode == 0, done.stderr
    assert "copied 1 runs (3 steps)" in done.stderr
    assert replayed(postgres_url, run_id) == live
    again = forkpoint("copy", postgres_url, back, "ticket")
    assert again.returncode == 0, again.stderr
    assert replayed(str(back), run_id) == live
    source, there = SqliteStore(first, read_only=True), SqliteStore(back, read_only=True)
    assert there.get_run(run_id) == source.get_run(run_id)
    assert there.exchanges(run_id) == source.exchanges(run_id)
    assert there.snapshots(run_id, data=True) == source.snapshots(run_id, data=True)
    source.close(), there.close()


def test_a_copy_brings_a_forks_parent_and_rewrites_nothing(postgres_url: str, tmp_path: Path):
    source = SqliteStore(tmp_path / "s.db")
    source.create_run(Run("01PARENT"))
    source.create_run(Run("01CHILD", parent_id="01PARENT", fork_step=0))
    source.close()
    target = open_store(postgres_url)
    target.create_run(Run("01PARENT", name="theirs"))
    target.close()
    done = forkpoint("copy", tmp_path / "s.db", postgres_url, "01CHILD")
    assert done.returncode == 0, done.stderr
    assert "copied 1 runs (0 steps), 1 already there" in done.stderr
    target = open_store(postgres_url, read_only=True)
    assert target.get_run("01PARENT").name == "theirs"  # left as it was
    assert target.get_run("01CHILD").parent_id == "01PARENT"
    target.close()


def test_a_parked_run_copied_stays_parked_answerable_and_wakeable(
    postgres_url: str, tmp_path: Path
):
    """Before, `copy` left a parked run's park and launch behind: the copy said `parked` and
    waited on nothing (an answer was refused, nothing could wake it)."""
    source = SqliteStore(tmp_path / "s.db")
    source.create_run(Run("01PARKED"))
    source.add_exchanges([exchange(0, conversation(0), run_id="01PARKED")])
    park = Park(pending("01PARKED", 1), "rule 'POST /approvals*'", deadline=4102444800.0)
    source.park(park)
    launch = Launch("01PARKED", ("python", "agent.py"), str(tmp_path), needs=("OPENAI_API_KEY",))
    source.set_launch(launch)
    source.close()
    done = forkpoint("copy", tmp_path / "s.db", postgres_url)
    assert done.returncode == 0, done.stderr
    target = open_store(postgres_url)
    try:
        assert target.get_run("01PARKED").status is RunStatus.PARKED
        assert target.parked("01PARKED") == park and target.launch("01PARKED") == launch
        target.answer(answer_to(park), by="cli")
        assert target.claim_wake("01PARKED", 1, by="waker")
    finally:
        target.close()
    listed = forkpoint("runs", "--status", "parked", cassette=tmp_path / "s.db")
    assert "01PARKED" in listed.stdout  # the source keeps its own, untouched


def test_copy_from_nowhere_is_a_clear_error(tmp_path: Path):
    done = forkpoint("copy", tmp_path / "absent.db", tmp_path / "t.db")
    assert done.returncode == 2 and "no cassette at" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "t.db").exists()
