"""The PostgreSQL store beyond the contract: its schema version, the same blob bytes as the
SQLite cassette, steps allocated across processes, and a server that cannot be reached."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from forkpoint.cassettes.headers import dump as dump_headers
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.cassettes.postgres.connection import redact
from forkpoint.cassettes.postgres.schema import SCHEMA_VERSION
from forkpoint.cassettes.rows import ADDED_IN
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Chunk, Run, Snapshot
from tests.cassettes.test_contract import conversation, exchange
from tests.cassettes.test_sqlite import a_batch_refused_while_packed_leaves_no_step_to_refer_to
from tests.cassettes.test_sqlite_versions import version_7_run
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


def test_both_stores_cut_bodies_into_the_same_blobs(postgres_url: str, tmp_path: Path):
    """The same segments by the same hashes; SQLite numbers them and compresses a run's
    against its earlier ones (schema 12), PostgreSQL keeps each alone by its hash."""
    sqlite, postgres = SqliteStore(tmp_path / "c.db"), PostgresStore(postgres_url)
    exchanges = [exchange(i, conversation(i + 1)) for i in range(5)] + [
        exchange(5, chunks=[Chunk(1.0, b"data: x\n\n")], response_body=b"data: x\n\n")
    ]
    for store in (sqlite, postgres):
        store.create_run(Run("r1", created_at=1.0))
        store.add_exchanges(exchanges)
        store.add_snapshot(Snapshot("r1", 2, "agent", "application/json", b"{}" * 300))
    in_sqlite = sorted(sqlite.query("SELECT lower(hex(hash)), size FROM contents"))
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT hash, size, codec FROM blobs").fetchall()
    assert sorted((h, s) for h, s, _ in rows) == in_sqlite
    assert len(in_sqlite) > 5 and {c for _, _, c in rows} == {"raw", "zstd"}
    assert {c for (c,) in sqlite.query("SELECT codec FROM contents")} == {"raw", "zstd", "zstd-dict"}
    assert sqlite.exchanges("r1") == postgres.exchanges("r1")
    assert sqlite.response_keys("r1") == postgres.response_keys("r1")
    sqlite.close(), postgres.close()


def test_processes_allocating_steps_of_one_run_never_share_one(postgres_url: str):
    store = PostgresStore(postgres_url)
    store.create_run(Run("r1"))
    store.close()
    code = (
        "import sys; from forkpoint.cassettes.postgres import PostgresStore; "
        "from forkpoint.models import new_ticket; s = PostgresStore(sys.argv[1]); "
        "print(*(s.number('r1', [t])[t] for t in (new_ticket() for _ in range(200))))"
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
        conn.execute("DROP TABLE tickets")
        for added in ("cache_write_tokens", "audio_tokens", "audio_seconds"):  # in version 4
            conn.execute(f"ALTER TABLE exchanges DROP COLUMN {added}")
        conn.execute("ALTER TABLE exchanges DROP COLUMN request_pieces")
        conn.execute("ALTER TABLE runs DROP COLUMN owner")
        conn.execute("ALTER TABLE exchanges DROP COLUMN asked_body")
        conn.execute("ALTER TABLE exchanges DROP COLUMN text_zstd")
        conn.execute("DROP TABLE parks, launches")  # in version 10
        conn.execute("UPDATE forkpoint_schema SET version = 2")
    reader = PostgresStore(postgres_url, read_only=True)
    assert reader.get_run("old").owner is None and reader.list_runs()[0].owner is None
    assert [(e.step, e.pieces, e.request_pieces, e.asked_body) for e in reader.exchanges("old")] == [
        (0, (), (), None)
    ]
    assert list(reader.response_keys("old")) == [0]
    reader.close()
    with psycopg.connect(postgres_url) as conn:  # read, not migrated
        assert conn.execute("SELECT version FROM forkpoint_schema").fetchone() == (2,)
    writer = PostgresStore(postgres_url)
    assert writer.schema_version == SCHEMA_VERSION
    assert [e.pieces for e in writer.exchanges("old")] == [()]
    writer.close()


def test_a_lost_server_is_said_in_forkpoint_s_words_not_the_pool_s(postgres_url: str, caplog):
    """Found by CI: after PostgreSQL restarted, `serve` logged psycopg's pool's own line
    (`error connecting in 'forkpoint': connection failed: …`) and none of its own. Here the
    store's connection is ended and new ones refused for 1.5 s (its role may not log in): the
    call waits, the log says the store is unreachable and back, and no line is the pool's."""
    import logging
    import threading
    import uuid

    from forkpoint.cassettes.postgres.connection import Database
    from tests.pg import SERVER, in_schema

    role = f"fp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        schema = admin.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT ALL ON SCHEMA {schema} TO {role}")
        database = None
        try:
            url = in_schema(SERVER.replace("//postgres@", f"//{role}@"), schema)
            database = Database(url, read_only=False)
            pid = database.run(lambda conn: conn.info.backend_pid)
            caplog.set_level(logging.WARNING)
            admin.execute(f"ALTER ROLE {role} NOLOGIN")
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            allowed = threading.Timer(1.5, admin.execute, (f"ALTER ROLE {role} LOGIN",))
            allowed.start()
            assert database.run(lambda conn: conn.execute("SELECT 1").fetchone()) == (1,)
            allowed.join()
        finally:
            if database is not None:
                database.close()
            admin.execute(f"REASSIGN OWNED BY {role} TO postgres")
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    said = [(record.name, record.getMessage()) for record in caplog.records]
    assert [name for name, _ in said] == ["forkpoint.cassettes.postgres.connection"] * 2, said
    assert "is unreachable" in said[0][1] and "is back after" in said[1][1], said
def test_a_version_6_store_reads_back_identical_before_and_after_its_migration(
    postgres_url: str,
):
    older = ADDED_IN["text_zstd"]["postgres"] - 1  # the version before references
    store = PostgresStore(postgres_url)
    store.create_run(Run("old", created_at=1.0))
    recorded = version_7_run()  # the same run: PostgreSQL's version 6 is SQLite's 7
    store.add_exchanges(recorded[:4])
    store.add_exchanges(recorded[4:])
    store.close()
    with psycopg.connect(postgres_url) as conn:  # as forkpoint wrote it at version 6
        for ex in recorded:
            assert ex.summary is not None
            conn.execute(
                "UPDATE exchanges SET request_headers=%s, response_headers=%s, text=%s "
                "WHERE run_id='old' AND step=%s",
                (dump_headers(ex.request_headers), dump_headers(ex.response_headers),
                 ex.summary.text, ex.step),
            )  # fmt: skip
        conn.execute("ALTER TABLE exchanges DROP COLUMN text_zstd")
        conn.execute("DROP TABLE parks, launches")  # a later version's
        conn.execute("UPDATE forkpoint_schema SET version = %s", (older,))
        before = conn.execute("SELECT * FROM exchanges ORDER BY step").fetchall()
    reader = PostgresStore(postgres_url, read_only=True)
    assert reader.schema_version == older and reader.exchanges("old") == recorded
    reader.close()
    writer = PostgresStore(postgres_url)
    assert writer.schema_version == SCHEMA_VERSION
    assert writer.exchanges("old") == recorded
    later = [replace(e, step=e.step + 6) for e in recorded]
    writer.add_exchanges(later)
    assert writer.exchanges("old") == [*recorded, *later]
    writer.close()
    with psycopg.connect(postgres_url) as conn:
        after = conn.execute("SELECT * FROM exchanges WHERE step < 6 ORDER BY step").fetchall()
    assert [row[:-1] for row in after] == before


def test_a_batch_refused_while_packed_leaves_no_step_to_refer_to(postgres_url: str):
    store = PostgresStore(postgres_url)
    a_batch_refused_while_packed_leaves_no_step_to_refer_to(store)
    store.close()
