"""Cassettes of an older schema: a writer migrates them in one transaction, a reader reads them
as they are and never writes to the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from forkpoint.cassettes.rows import ADDED_IN, EXCHANGE_COLUMNS, dump_headers
from forkpoint.cassettes.sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import StoredExperiment
from forkpoint.models import Run
from tests.cassettes.test_contract import exchange


@pytest.fixture
def version_1(tmp_path: Path) -> Path:
    """A cassette as forkpoint wrote it before migrations: schema 1, a run with steps 0-2."""
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(MIGRATIONS[0])
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute("PRAGMA user_version=1")
        conn.execute("INSERT INTO runs (id, labels, status, mode, created_at) "
                     "VALUES ('old', '{}', 'crashed', 'record', 1.0)")  # fmt: skip
        for step in range(3):
            values = dict.fromkeys(c for c in EXCHANGE_COLUMNS if c not in ADDED_IN)
            values.update(run_id="old", step=step, method="GET", route="/x",
                          request_headers=dump_headers(()), request_body="[]",
                          fingerprint="f", response_headers="[]", response_body="[]",
                          streamed=0, complete=1, origin="live", started_at=1.0,
                          kind="other", dialect="generic", tool_calls="[]")  # fmt: skip
            conn.execute(f"INSERT INTO exchanges VALUES ({','.join('?' * len(values))})",
                         tuple(values.values()))  # fmt: skip
    conn.close()
    return path


def test_a_reader_reads_version_1_as_it_is_without_writing(version_1: Path):
    before = version_1.read_bytes()
    store = SqliteStore(version_1, read_only=True)
    assert store.schema_version == 1
    assert store.get_run("old").status == "crashed"
    assert [(e.step, e.pieces) for e in store.exchanges("old")] == [(0, ()), (1, ()), (2, ())]
    assert store.response_keys("old") == {0: "[]", 1: "[]", 2: "[]"}  # no pieces column
    assert store.next_step("old") == 3 and store.list_experiments() == []
    store.close()
    assert version_1.read_bytes() == before
    assert sorted(p.name for p in version_1.parent.iterdir()) == ["v1.db"]


def test_a_writer_migrates_version_1_and_goes_on_after_its_steps(version_1: Path):
    store = SqliteStore(version_1)
    assert store.schema_version == SCHEMA_VERSION
    assert store.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert store.allocate_step("old") == 3
    store.add_exchanges([exchange(3, run_id="old")])
    store.create_run(Run("new"))
    assert store.allocate_step("new") == 0
    assert [e.step for e in store.exchanges("old")] == [0, 1, 2, 3]
    store.close()


def test_a_failed_migration_leaves_the_file_as_it_was(version_1: Path):
    with sqlite3.connect(version_1) as conn:  # a column the migration adds, already there
        conn.execute('ALTER TABLE runs ADD COLUMN "next_step" INTEGER')
    before = version_1.read_bytes()
    with pytest.raises(Exception, match="duplicate column"):
        SqliteStore(version_1)
    assert version_1.read_bytes() == before
    with sqlite3.connect(version_1) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
    conn.close()


def test_a_version_1_cassette_from_before_experiments_gains_their_tables(version_1: Path):
    with sqlite3.connect(version_1) as conn:
        conn.execute("DROP TABLE experiment_runs")
        conn.execute("DROP TABLE experiments")
    conn.close()
    reader = SqliteStore(version_1, read_only=True)
    assert reader.list_experiments() == []
    reader.close()
    store = SqliteStore(version_1)
    store.create_experiment(StoredExperiment("first", 1.0, None, {}))
    assert store.get_experiment("first") == (StoredExperiment("first", 1.0, None, {}), [])
    store.close()
