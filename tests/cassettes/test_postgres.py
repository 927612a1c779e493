"""The PostgreSQL store beyond the contract: its schema version, the same blob bytes as the
SQLite cassette, steps allocated across processes, and a server that cannot be reached."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.cassettes.postgres.connection import redact
from forkpoint.cassettes.postgres.schema import SCHEMA_VERSION
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Chunk, Run, Snapshot
from tests.cassettes.test_contract import conversation, exchange
from tests.pg import postgres_url as postgres_url  # the fixture


def test_the_schema_is_made_once_and_its_version_kept(postgres_url: str):
    first = PostgresStore(postgres_url)
    second = PostgresStore(postgres_url)  # finds it made
    assert first.schema_version == second.schema_version == SCHEMA_VERSION
    first.close(), second.close()
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT version FROM forkpoint_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]


@pytest.mark.parametrize(
    "version, word, modes",
    [(0, "older", [True]), (SCHEMA_VERSION + 1, "newer", [False, True])],
)  # a writer migrates an older store: there is none older than version 1 yet
def test_another_schema_version_is_refused_with_a_message(
    postgres_url: str, version: int, word: str, modes: list[bool]
):
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE forkpoint_schema SET version = %s", (version,))
    for read_only in modes:
        with pytest.raises(SchemaVersionError, match=f"schema version {version}, from an? {word}"):
            PostgresStore(postgres_url, read_only=read_only)
    with psycopg.connect(postgres_url) as conn:  # refused, not changed
        assert conn.execute("SELECT version FROM forkpoint_schema").fetchone() == (version,)


def test_a_schema_of_something_else_is_refused(postgres_url: str):
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE runs (x int)")
    with pytest.raises(CassetteError, match="not a forkpoint store"):
        PostgresStore(postgres_url)


def test_a_reader_creates_nothing(postgres_url: str):
    with pytest.raises(CassetteError, match="holds no forkpoint store yet"):
        open_store(postgres_url, read_only=True)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT to_regclass('forkpoint_schema')").fetchone() == (None,)
    store = open_store(postgres_url)
    assert isinstance(store, PostgresStore)
    store.create_run(Run("r1"))
    store.close()
    reader = open_store(postgres_url, read_only=True)
    with pytest.raises(CassetteError, match="reading only"):
        reader.create_run(Run("r2"))
    assert [r.id for r in reader.list_runs()] == ["r1"]
    reader.close()


def test_both_stores_hold_the_same_blob_bytes(postgres_url: str, tmp_path: Path):
    sqlite, postgres = SqliteStore(tmp_path / "c.db"), PostgresStore(postgres_url)
    exchanges = [exchange(i, conversation(i + 1)) for i in range(5)] + [
        exchange(5, chunks=[Chunk(1.0, b"data: x\n\n")], response_body=b"data: x\n\n")
    ]
    for store in (sqlite, postgres):
        store.create_run(Run("r1", created_at=1.0))
        store.add_exchanges(exchanges)
        store.add_snapshot(Snapshot("r1", 2, "agent", "application/json", b"{}" * 300))
    in_sqlite = sorted(sqlite.query("SELECT hash, size, codec, data FROM blobs"))
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT hash, size, codec, data FROM blobs").fetchall()
    assert sorted((h, s, c, bytes(d)) for h, s, c, d in rows) == in_sqlite
    assert len(in_sqlite) > 5
    assert sqlite.exchanges("r1") == postgres.exchanges("r1")
    sqlite.close(), postgres.close()


def test_processes_allocating_steps_of_one_run_never_share_one(postgres_url: str):
    store = PostgresStore(postgres_url)
    store.create_run(Run("r1"))
    store.close()
    code = (
        "import sys; from forkpoint.cassettes.postgres import PostgresStore; "
        "s = PostgresStore(sys.argv[1]); print(*(s.allocate_step('r1') for _ in range(200)))"
    )
    processes = [subprocess.Popen([sys.executable, "-c", code, postgres_url],
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]  # fmt: skip
    steps = [int(s) for p in processes for s in p.communicate(timeout=60)[0].split()]
    assert sorted(steps) == list(range(600))


def test_a_server_that_cannot_be_reached_is_a_clear_error():
    with pytest.raises(CassetteError, match="cannot reach the PostgreSQL store"):
        PostgresStore("postgresql://nobody:secret@127.0.0.1:1/test", retry_for=1.0)


def test_messages_never_show_the_password():
    assert redact("postgresql://u:secret@db.example:5433/x?a=b") == (
        "postgresql://u:***@db.example:5433/x?a=b"
    )
    assert redact("postgresql://db/x") == "postgresql://db/x"


def test_a_version_2_store_is_read_as_it_is_and_migrated_by_a_writer(postgres_url: str):
    store = PostgresStore(postgres_url)
    store.create_run(Run("old"))
    store.add_exchanges([exchange(0, run_id="old")])
    store.close()
    with psycopg.connect(postgres_url) as conn:  # as forkpoint left it before pieces
        conn.execute("ALTER TABLE exchanges DROP COLUMN response_pieces")
        conn.execute("UPDATE forkpoint_schema SET version = 2")
    reader = PostgresStore(postgres_url, read_only=True)
    assert [(e.step, e.pieces) for e in reader.exchanges("old")] == [(0, ())]
    assert list(reader.response_keys("old")) == [0]
    reader.close()
    with psycopg.connect(postgres_url) as conn:  # read, not migrated
        assert conn.execute("SELECT version FROM forkpoint_schema").fetchone() == (2,)
    writer = PostgresStore(postgres_url)
    assert writer.schema_version == SCHEMA_VERSION == 3
    assert [e.pieces for e in writer.exchanges("old")] == [()]
    writer.close()
