"""The PostgreSQL store's schema, as numbered migrations, and the check made on open.

`MIGRATIONS[n]` takes a store from version n to n + 1 (a new one: append its SQL and the
version follows). The version is the one row of `forkpoint_schema`. A writer takes an advisory
lock before it looks at anything, so replicas starting at once make or migrate the schema once,
one after the other: a lookup made before another replica's CREATE commits would otherwise be
answered from this backend's catalog cache ("no such table") after the lock is granted, and
the CREATE fail with `relation "forkpoint_schema" already exists`. The lookups read pg_class
with the statement's own snapshot, not the cache. The tables and columns are the SQLite
cassette's (version 2), so rows convert alike (`cassettes.rows`) and blobs hold the same bytes.
"""

from __future__ import annotations

import psycopg

from forkpoint.errors import CassetteError, SchemaVersionError

SCHEMA_VERSION = 11
READABLE_FROM = 1
# pg_advisory_xact_lock key for schema changes ("fkpt").
LOCK_KEY = 0x666B7074

_V1 = """
CREATE TABLE runs (
   id text PRIMARY KEY, name text, labels text, status text, mode text,
   parent_id text REFERENCES runs(id), fork_step integer, change text,
   created_at double precision, ended_at double precision, error text,
   next_step bigint NOT NULL DEFAULT 0
);
CREATE TABLE blobs (hash text PRIMARY KEY, size bigint, codec text, data bytea);
CREATE TABLE exchanges (
   run_id text REFERENCES runs(id), step integer, method text, route text, upstream text,
   request_headers text, request_body text, fingerprint text, status integer,
   response_headers text, response_body text, streamed integer, complete integer,
   error text, origin text, started_at double precision, ttfb_ms double precision,
   duration_ms double precision, kind text, dialect text, model text, input_tokens bigint,
   output_tokens bigint, cached_tokens bigint, reasoning_tokens bigint, tool_calls text,
   finish_reason text, text text,
   PRIMARY KEY (run_id, step)
);
CREATE TABLE chunks (
   run_id text, step integer, seq integer, offset_ms double precision, size integer,
   "end" integer,
   PRIMARY KEY (run_id, step, seq)
);
CREATE TABLE snapshots (
   run_id text REFERENCES runs(id), step integer, adapter text, content_type text,
   body text, size bigint, error text, taken_at double precision,
   duration_ms double precision,
   PRIMARY KEY (run_id, step, adapter)
);
CREATE INDEX runs_name ON runs (name);
CREATE INDEX exchanges_run_id_fingerprint ON exchanges (run_id, fingerprint);
CREATE TABLE experiments (
   name text PRIMARY KEY, created_at double precision, ended_at double precision, spec text
);
CREATE TABLE experiment_runs (
   experiment text REFERENCES experiments(name), seq integer,
   source_id text REFERENCES runs(id), branch_id text REFERENCES runs(id),
   error text, result text,
   PRIMARY KEY (experiment, seq)
)
"""

# Version 2: `exchanges.note`, how a served answer was chosen when it was no exact match.
_V2 = """
ALTER TABLE exchanges ADD COLUMN note text
"""

# Version 3: `exchanges.response_pieces`, as in the SQLite cassette's version 4.
_V3 = """
ALTER TABLE exchanges ADD COLUMN response_pieces text
"""

# Version 4: `tickets`, as in the SQLite cassette's version 5.
_V4 = """
CREATE TABLE tickets (
   run_id text, ticket bigint, step integer,
   PRIMARY KEY (run_id, ticket)
)
"""

# Version 5: `exchanges.cache_write_tokens`, `audio_tokens` and `audio_seconds`, as in the
# SQLite cassette's version 6.
_V5 = """
ALTER TABLE exchanges ADD COLUMN cache_write_tokens bigint,
   ADD COLUMN audio_tokens bigint, ADD COLUMN audio_seconds double precision
"""

# Version 6: `exchanges.request_pieces`, as in the SQLite cassette's version 7.
_V6 = """
ALTER TABLE exchanges ADD COLUMN request_pieces text
"""

# Version 7: `runs.owner`, as in the SQLite cassette's version 8.
_V7 = """
ALTER TABLE runs ADD COLUMN owner text
"""

# Version 8: `exchanges.asked_body`, as in the SQLite cassette's version 9.
_V8 = """
ALTER TABLE exchanges ADD COLUMN asked_body text
"""

# Version 9: `exchanges.text_zstd` and header columns that refer to an earlier step's, as in
# the SQLite cassette's version 10.
_V9 = """
ALTER TABLE exchanges ADD COLUMN text_zstd bytea
"""

# Version 10: `parks` and `launches`, as in the SQLite cassette's version 11 (park and wake).
_V10 = """
CREATE TABLE parks (
   run_id text REFERENCES runs(id), step integer, state text NOT NULL, waits_on text,
   parked_at double precision, deadline double precision, answered_at double precision,
   answered_by text, woken_at double precision, claimed_by text,
   method text, route text, upstream text, request_headers text, request_body text,
   fingerprint text, status integer, response_headers text, response_body text,
   streamed integer, complete integer, error text, origin text,
   started_at double precision, ttfb_ms double precision, duration_ms double precision,
   kind text, dialect text, model text, input_tokens bigint, output_tokens bigint,
   cached_tokens bigint, reasoning_tokens bigint, tool_calls text, finish_reason text,
   text text, note text, response_pieces text, cache_write_tokens bigint,
   audio_tokens bigint, audio_seconds double precision, request_pieces text,
   asked_body text, text_zstd bytea,
   PRIMARY KEY (run_id, step)
);
CREATE INDEX parks_parked ON parks (run_id, step) WHERE state = 'parked';
CREATE INDEX parks_awake ON parks (state, run_id, step) WHERE state IN ('answered', 'waking');
CREATE INDEX parks_due ON parks (deadline, run_id)
   WHERE state = 'parked' AND deadline IS NOT NULL;
CREATE TABLE launches (
   run_id text PRIMARY KEY REFERENCES runs(id), command text, cwd text, env text,
   needs text, options text, waker text, on_wake text
)
"""

# Version 11: `parks.claimed_at`, as in the SQLite cassette's version 13 (a wake's lease).
_V11 = """
ALTER TABLE parks ADD COLUMN claimed_at double precision
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _version(conn: psycopg.Connection) -> int | None:
    """The store's version; None for a schema without forkpoint's tables."""
    found = {
        name
        for (name,) in conn.execute(
            "SELECT relname FROM pg_catalog.pg_class WHERE relname IN ('forkpoint_schema', "
            "'runs') AND relnamespace = (SELECT oid FROM pg_catalog.pg_namespace "
            "WHERE nspname = current_schema())"
        ).fetchall()
    }
    if "forkpoint_schema" not in found:
        if "runs" in found:
            raise CassetteError("its schema has a runs table but is not a forkpoint store")
        return None
    row = conn.execute("SELECT version FROM forkpoint_schema").fetchone()
    return 0 if row is None else int(row[0])


def check_or_create(conn: psycopg.Connection, label: str, *, read_only: bool) -> int:
    """Create, migrate or accept the schema; the version it has now. Runs in one
    transaction (the caller's); a writer's holds the advisory lock from its first statement."""
    if not read_only:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    version = _version(conn)
    if version is None and read_only:
        raise CassetteError(f"{label} holds no forkpoint store yet: record a run first")
    if version is None:
        conn.execute("CREATE TABLE forkpoint_schema (version integer NOT NULL)")
        conn.execute("INSERT INTO forkpoint_schema VALUES (0)")
        version = 0
    if version < SCHEMA_VERSION and not read_only:
        for script in MIGRATIONS[version:]:
            conn.execute(script)  # type: ignore[call-overload]  # our own constant SQL
        conn.execute("UPDATE forkpoint_schema SET version = %s", (SCHEMA_VERSION,))
        version = SCHEMA_VERSION
    if version > SCHEMA_VERSION or version < READABLE_FROM:
        older = version < SCHEMA_VERSION
        raise SchemaVersionError(
            f"{label} is a store of schema version {version}, from "
            f"{'an older' if older else 'a newer'} forkpoint; this forkpoint reads versions "
            f"{READABLE_FROM} to {SCHEMA_VERSION} "
            + ("(copy its runs out with the forkpoint that wrote it)" if older
               else "(upgrade forkpoint to use it)"),
            found=version,
            expected=SCHEMA_VERSION,
        )  # fmt: skip
    return version
