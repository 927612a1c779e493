"""The PostgreSQL store's schema, as numbered migrations, and the check made on open.

`MIGRATIONS[n]` takes a store from version n to n + 1. The version is the one row of
`forkpoint_schema`; creating or migrating holds an advisory lock, so replicas starting at once
make the schema once. The tables and columns are the SQLite cassette's (version 2), so rows
convert alike (`cassettes.rows`) and blobs hold the same bytes.
"""

from __future__ import annotations

import psycopg

from forkpoint.errors import CassetteError, SchemaVersionError

SCHEMA_VERSION = 3
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

MIGRATIONS: list[str] = [_V1, _V2, _V3]
assert len(MIGRATIONS) == SCHEMA_VERSION


def _version(conn: psycopg.Connection) -> int | None:
    """The store's version; None for a schema without forkpoint's tables."""
    found = conn.execute("SELECT to_regclass('forkpoint_schema')").fetchone()
    if found is None or found[0] is None:
        tables = conn.execute("SELECT to_regclass('runs')").fetchone()
        if tables is not None and tables[0] is not None:
            raise CassetteError("its schema has a runs table but is not a forkpoint store")
        return None
    row = conn.execute("SELECT version FROM forkpoint_schema").fetchone()
    return 0 if row is None else int(row[0])


def check_or_create(conn: psycopg.Connection, label: str, *, read_only: bool) -> int:
    """Create, migrate or accept the schema; the version it has now. Runs in one
    transaction (the caller's)."""
    version = _version(conn)
    if version is None or (version < SCHEMA_VERSION and not read_only):
        if read_only:
            raise CassetteError(f"{label} holds no forkpoint store yet: record a run first")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        version = _version(conn)  # another replica may have made it meanwhile
        if version is None:
            conn.execute("CREATE TABLE forkpoint_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO forkpoint_schema VALUES (0)")
            version = 0
        if version < SCHEMA_VERSION:
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
