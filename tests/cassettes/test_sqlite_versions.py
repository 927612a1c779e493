"""Cassettes of an older schema: a writer migrates them in one transaction, a reader reads them
as they are and never writes to the file."""

from __future__ import annotations

import contextlib
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from forkpoint.cassettes.headers import dump as dump_headers
from forkpoint.cassettes.rows import ADDED_IN, EXCHANGE_COLUMNS
from forkpoint.cassettes.sqlite.schema import (
    APPLICATION_ID,
    CONTENTS_FROM,
    MIGRATIONS,
    SCHEMA_VERSION,
)
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import StoredExperiment
from forkpoint.models import Chunk, Exchange, Kind, Run, Summary, Usage
from tests.cassettes.old import BEFORE_REFERENCES, old_cassette
from tests.cassettes.test_contract import conversation, exchange
from tests.cassettes.test_sqlite import SDK_HEADERS, openai_answer_headers
from tests.cassettes.test_sqlite_contents import chat


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
    read = [(e.step, e.pieces, e.request_pieces) for e in store.exchanges("old")]
    assert read == [(0, (), ()), (1, (), ()), (2, (), ())]
    assert store.response_keys("old") == {0: "[]", 1: "[]", 2: "[]"}  # no pieces column
    assert store.next_step("old") == 3 and store.list_experiments() == []
    store.close()
    assert version_1.read_bytes() == before
    assert sorted(p.name for p in version_1.parent.iterdir()) == ["v1.db"]


def test_a_writer_migrates_version_1_and_goes_on_after_its_steps(version_1: Path):
    store = SqliteStore(version_1)
    assert store.schema_version == SCHEMA_VERSION
    assert store.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert store.number("old", [-1]) == {-1: 3}
    store.add_exchanges([exchange(3, run_id="old")])
    store.create_run(Run("new"))
    assert store.number("new", [-1]) == {-1: 0}
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


def version_7_run() -> list[Exchange]:
    """A run as the openai SDK records it: the same request headers every time, answers with
    the same names and changing values, a stream, long answers."""
    recorded = []
    for step in range(6):
        text = f"Answer {step}: your order ships today. " * 12
        summary = Summary(Kind.LLM, "openai_chat", "gpt-4o", Usage(100 + step, 40), (), "stop",
                          text)  # fmt: skip
        chunks = [Chunk(1.5, b"data: {}\n\n"), Chunk(9.0, b"data: [DONE]\n\n")] if step == 3 else None
        recorded.append(exchange(
            step, conversation(step + 1), run_id="old", request_headers=SDK_HEADERS,
            response_headers=openai_answer_headers(step), summary=summary, chunks=chunks,
            response_body=b"".join(c.data for c in chunks) if chunks else f"{step}".encode(),
            duration_ms=10.0, started_at=1700000000.0 + step,
        ))  # fmt: skip
    return recorded


@pytest.fixture
def version_7(tmp_path: Path) -> Path:
    """A cassette as forkpoint wrote it at schema 7: header lists whole, the text as it is."""
    return old_cassette(tmp_path / "v7.db", BEFORE_REFERENCES, {"old": version_7_run()})


def test_a_version_7_cassette_reads_back_identical_before_and_after_its_migration(
    version_7: Path,
):
    reader = SqliteStore(version_7, read_only=True)
    assert reader.schema_version == BEFORE_REFERENCES
    assert reader.exchanges("old") == version_7_run()
    reader.close()
    with contextlib.closing(sqlite3.connect(version_7)) as conn:
        before = conn.execute("SELECT * FROM exchanges ORDER BY step").fetchall()
    store = SqliteStore(version_7)
    assert store.schema_version == SCHEMA_VERSION
    assert store.exchanges("old") == version_7_run()
    assert [row[:-1] for row in store.query("SELECT * FROM exchanges ORDER BY step")] == before
    later = [replace(e, step=e.step + 6, started_at=e.started_at + 6) for e in version_7_run()]
    store.add_exchanges(later[:2])
    store.add_exchanges(later[2:])
    assert store.exchanges("old") == [*version_7_run(), *later]
    assert store.exchanges("old", bodies=False)[6:] == [
        replace(e, request_body=b"", response_body=b"",
                chunks=None if e.chunks is None else [replace(c, data=b"") for c in e.chunks])
        for e in later
    ]  # fmt: skip
    store.close()


# The version before blobs were numbered (schema 12): its blobs by hash in `blobs`.
BEFORE_NUMBERS = CONTENTS_FROM - 1


def test_a_version_11_cassette_is_read_as_it_is_then_migrated_keeping_its_blobs(tmp_path: Path):
    recorded = chat(5, "old")
    path = old_cassette(tmp_path / "v11.db", BEFORE_NUMBERS, {"old": recorded})
    before = path.read_bytes()
    reader = SqliteStore(path, read_only=True)
    assert reader.schema_version == BEFORE_NUMBERS
    assert reader.exchanges("old") == recorded
    old_keys = reader.response_keys("old")
    reader.close()
    assert path.read_bytes() == before  # a reader never writes, not even to migrate
    store = SqliteStore(path)
    assert store.schema_version == SCHEMA_VERSION
    assert store.exchanges("old") == recorded and store.response_keys("old") == old_keys
    assert store.query("SELECT count(*) FROM contents") == [(0,)]  # nothing rewritten
    # the same run again, and more of it: new blobs numbered, the old ones kept by hash
    store.create_run(Run("new"))
    again = chat(7, "new")
    store.add_exchanges(again)
    assert store.exchanges("new") == again and store.exchanges("old") == recorded
    assert store.query("SELECT count(*) FROM blobs")[0][0] > 0
    assert store.query("SELECT count(*) FROM contents")[0][0] > 0
    # equal answers compare equal across the formats (`diff`)
    assert {k for s, k in store.response_keys("new").items() if s < 5} == set(old_keys.values())
    store.close()
    assert SqliteStore(path, read_only=True).exchanges("old") == recorded


def test_a_version_11_cassette_with_no_blob_loses_its_empty_table(tmp_path: Path):
    path = old_cassette(tmp_path / "v11.db", BEFORE_NUMBERS, {})
    SqliteStore(path).close()
    with closing(sqlite3.connect(path)) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    assert "blobs" not in tables and "contents" in tables
    assert page == 4096  # an older file keeps its pages: only a VACUUM could change them
