"""Experiments in a cassette: the `Store` methods, kept alike by SQLite and by memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlite_utils

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.schema import create_schema
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store, StoredBranch, StoredExperiment
from forkpoint.errors import ConfigError
from forkpoint.models import Run

SPEC = {"at": "first-llm", "change": {"model": "gpt-4o-mini"}, "select": ["label:batch=demo"]}


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: Store = SqliteStore(tmp_path / "c.db") if request.param == "sqlite" else MemoryStore()
    for run_id in ("p1", "p2", "b1"):
        opened.create_run(Run(run_id))
    yield opened
    opened.close()


def test_an_experiment_and_its_branches_round_trip(store: Store):
    store.create_experiment(StoredExperiment("mini", 10.0, None, SPEC))
    store.add_experiment_branch("mini", StoredBranch(1, "p2", None, "no model call", {"at": None}))
    store.add_experiment_branch(
        "mini", StoredBranch(0, "p1", "b1", None, {"at": 0, "check": {"passed": True}})
    )
    experiment, branches = store.get_experiment("mini")
    assert experiment == StoredExperiment("mini", 10.0, None, SPEC)
    assert [b.seq for b in branches] == [0, 1]  # in selection order, whatever order they ended
    assert branches[0] == StoredBranch(0, "p1", "b1", None, {"at": 0, "check": {"passed": True}})
    store.finish_experiment("mini", ended_at=12.5)
    store.create_experiment(StoredExperiment("later", 11.0, None, {}))
    assert [(e.name, e.ended_at) for e in store.list_experiments()] == [
        ("mini", 12.5),
        ("later", None),
    ]


def test_names_are_unique_and_unknown_names_are_clear(store: Store):
    store.create_experiment(StoredExperiment("mini", 10.0, None, SPEC))
    with pytest.raises(ConfigError, match="already has an experiment 'mini'"):
        store.create_experiment(StoredExperiment("mini", 11.0, None, SPEC))
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        store.get_experiment("nope")


def test_a_cassette_from_before_experiments_gains_their_tables(tmp_path: Path):
    db = sqlite_utils.Database(tmp_path / "old.db")
    create_schema(db)
    db.execute("DROP TABLE experiment_runs")
    db.execute("DROP TABLE experiments")
    db.conn.commit()
    db.close()
    store = SqliteStore(tmp_path / "old.db")
    try:
        assert store.list_experiments() == []
        store.create_experiment(StoredExperiment("first", 1.0, None, {}))
        assert store.get_experiment("first") == (StoredExperiment("first", 1.0, None, {}), [])
    finally:
        store.close()
