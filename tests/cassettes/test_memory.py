"""The in-memory store: the `Store` contract as SqliteStore keeps it, without a file."""

from __future__ import annotations

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.errors import CassetteError, RunNotFound
from forkpoint.models import Exchange, Run, RunStatus, Snapshot


def exchange(run_id: str, step: int) -> Exchange:
    return Exchange(
        run_id=run_id, step=step, method="GET", route="/x", request_headers=(),
        request_body=b"", fingerprint="f",
    )  # fmt: skip


def test_runs_are_found_by_id_name_and_prefix():
    store = MemoryStore()
    store.create_run(Run(id="01AAAA1", name="ticket"))
    store.create_run(Run(id="01AAAA2", name="ticket"))
    store.create_run(Run(id="01BBBB1"))
    assert store.find_run("01BBBB1").id == "01BBBB1"
    assert store.find_run("ticket").id == "01AAAA2"  # the newest of that name
    assert store.find_run("01bbbb").id == "01BBBB1"
    with pytest.raises(RunNotFound, match="several runs"):
        store.find_run("01AAAA")
    with pytest.raises(RunNotFound, match="no run 'nope' in memory"):
        store.find_run("nope")
    assert [r.id for r in store.list_runs()] == ["01AAAA1", "01AAAA2", "01BBBB1"]


def test_values_go_in_and_out_as_copies():
    store = MemoryStore()
    run = Run(id="r")
    store.create_run(run)
    run.status = RunStatus.CRASHED
    assert store.get_run("r").status is RunStatus.RUNNING
    store.add_exchanges([exchange("r", 1), exchange("r", 0)])
    first = store.exchanges("r")[0]
    first.status = 500
    assert [e.step for e in store.exchanges("r")] == [0, 1] and store.exchanges("r")[
        0
    ].status is None
    assert store.step_count("r") == 2
    store.finish_run("r", RunStatus.DIVERGED, error="why", fork_step=3)
    finished = store.get_run("r")
    assert (finished.status, finished.error, finished.fork_step) == (RunStatus.DIVERGED, "why", 3)
    assert finished.ended_at is not None


def test_mistakes_are_cassette_errors():
    store = MemoryStore("tests/cassettes/t.yaml")
    store.create_run(Run(id="r"))
    with pytest.raises(CassetteError, match="already has a run r"):
        store.create_run(Run(id="r"))
    with pytest.raises(CassetteError, match=r"no run other in tests/cassettes/t\.yaml"):
        store.add_exchanges([exchange("other", 0)])
    with pytest.raises(RunNotFound):
        store.get_run("other")
    store.close()
    with pytest.raises(CassetteError, match="closed"):
        store.list_runs()


def test_snapshots_keep_the_newest_good_one_per_adapter():
    store = MemoryStore()
    store.create_run(Run(id="r"))
    for step, adapter, error in [
        (0, "memory", None),
        (2, "memory", None),
        (3, "memory", "timeout"),
        (1, "files", None),
    ]:
        store.add_snapshot(
            Snapshot(
                run_id="r",
                step=step,
                adapter=adapter,
                data=f"{adapter}{step}".encode(),
                error=error,
            )
        )
    assert [(s.step, s.adapter, s.data) for s in store.snapshots("r")] == [
        (0, "memory", b""), (1, "files", b""), (2, "memory", b""), (3, "memory", b""),
    ]  # fmt: skip
    latest = {s.adapter: s.data for s in store.latest_snapshots("r")}
    assert latest == {"memory": b"memory2", "files": b"files1"}
    assert {s.adapter: s.step for s in store.latest_snapshots("r", at_most=1)} == {
        "memory": 0,
        "files": 1,
    }
