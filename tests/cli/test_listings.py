"""What `runs`, `snapshots` and `experiment list` print: JSON lines as their --help says, and the
runs as a tree a reader can follow."""

from __future__ import annotations

import json

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import StoredExperiment
from forkpoint.models import Mode, Run, RunStatus, Snapshot
from tests.runner import invoke


def family(path):  # type: ignore[no-untyped-def]
    """root ─ a (fork) ─ a1 (its fork), then b (a later fork of root), and another root."""
    store = SqliteStore(path)
    runs = [
        Run("01R0", name="root", status=RunStatus.FINISHED, created_at=1.0),
        Run("01R1", name="a", parent_id="01R0", fork_step=2, mode=Mode.FORK, created_at=2.0),
        Run("01R2", name="a1", parent_id="01R1", fork_step=3, mode=Mode.FORK, created_at=3.0),
        Run("01R3", name="b", parent_id="01R0", fork_step=1, mode=Mode.FORK, created_at=4.0),
        Run("01R4", name="other", created_at=5.0),
    ]
    for run in runs:
        store.create_run(run)
    return store


def test_the_runs_tree_tells_a_grandchild_from_a_later_sibling(tmp_path):
    family(tmp_path / "c.db").close()
    listed = invoke("runs", cassette=tmp_path / "c.db")
    assert listed.exit_code == 0, listed.output
    ids = [line[:30].rstrip() for line in listed.stdout.splitlines()[1:]]
    assert ids == [
        "01R0",
        "├─ 01R1",
        "│  └─ 01R2",
        "└─ 01R3",
        "01R4",
    ]


def test_runs_json_is_one_object_per_line_as_its_help_says(tmp_path):
    family(tmp_path / "c.db").close()
    assert "one per line" in invoke("runs", "--help").stdout
    printed = invoke("runs", "--json", cassette=tmp_path / "c.db").stdout
    lines = printed.splitlines()
    assert len(lines) == 5
    documents = [json.loads(line) for line in lines]
    assert [d["id"] for d in documents] == ["01R0", "01R1", "01R2", "01R3", "01R4"]
    assert documents[2]["parent_id"] == "01R1" and documents[0]["steps"] == 0


def test_snapshots_json_is_one_object_per_line(tmp_path):
    store = family(tmp_path / "c.db")
    for step in (0, 2):
        store.add_snapshot(Snapshot("01R0", step, "http", "application/json", b'{"n": %d}' % step))
    store.close()
    assert "one per line" in invoke("snapshots", "--help").stdout
    printed = invoke("snapshots", "01R0", "--json", cassette=tmp_path / "c.db").stdout
    assert [json.loads(line)["step"] for line in printed.splitlines()] == [0, 2]


def test_experiment_list_json_is_one_object_per_line(tmp_path):
    store = family(tmp_path / "c.db")
    spec = {"at": "first-llm", "change": {"model": "gpt-4o-mini"}}
    store.create_experiment(StoredExperiment("one", 1.0, 2.0, spec))
    store.create_experiment(StoredExperiment("two", 3.0, None, spec))
    store.close()
    assert "one per line" in invoke("experiment", "list", "--help").stdout
    printed = invoke("experiment", "list", "--json", cassette=tmp_path / "c.db").stdout
    assert [json.loads(line)["name"] for line in printed.splitlines()] == ["one", "two"]
