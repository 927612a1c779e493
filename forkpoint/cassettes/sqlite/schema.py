"""The SQLite cassette's schema, as numbered migrations.

`MIGRATIONS[n]` takes a cassette from schema version n to n + 1: a new cassette gets them all,
an older one opened for writing gets the ones it lacks, in one transaction. The version is
the file's `PRAGMA user_version`, and `PRAGMA application_id` marks the file as a cassette.
A read never migrates: a reader reads any version from READABLE_FROM on as it is. A new
cassette's pages are PAGE_SIZE bytes (an older file keeps its own).
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 13
# The oldest version this forkpoint reads without migrating it.
READABLE_FROM = 1
# PRAGMA application_id marks the file as a forkpoint cassette ("fkpt").
APPLICATION_ID = 0x666B7074
# A new cassette's page size (bytes). Every table and index takes a page at least, and an
# empty cassette has 28 of them: at SQLite's default 4 KiB that was 112 KiB before the first
# run, as much as a 100-turn chat's own content. A blob larger than a page goes on in overflow
# pages of its own, so the page size does not limit what a body holds.
PAGE_SIZE = 1024
# The version whose blobs are numbered, in `contents`; `blobs` keeps those written before.
CONTENTS_FROM = 12

# Version 1, as sqlite-utils created it before the migrations existed.
_V1 = """
CREATE TABLE "runs" (
   "id" TEXT PRIMARY KEY, "name" TEXT, "labels" TEXT, "status" TEXT, "mode" TEXT,
   "parent_id" TEXT REFERENCES "runs"("id"), "fork_step" INTEGER, "change" TEXT,
   "created_at" REAL, "ended_at" REAL, "error" TEXT
);
CREATE TABLE "blobs" ("hash" TEXT PRIMARY KEY, "size" INTEGER, "codec" TEXT, "data" BLOB);
CREATE TABLE "exchanges" (
   "run_id" TEXT REFERENCES "runs"("id"), "step" INTEGER, "method" TEXT, "route" TEXT,
   "upstream" TEXT, "request_headers" TEXT, "request_body" TEXT, "fingerprint" TEXT,
   "status" INTEGER, "response_headers" TEXT, "response_body" TEXT, "streamed" INTEGER,
   "complete" INTEGER, "error" TEXT, "origin" TEXT, "started_at" REAL, "ttfb_ms" REAL,
   "duration_ms" REAL, "kind" TEXT, "dialect" TEXT, "model" TEXT, "input_tokens" INTEGER,
   "output_tokens" INTEGER, "cached_tokens" INTEGER, "reasoning_tokens" INTEGER,
   "tool_calls" TEXT, "finish_reason" TEXT, "text" TEXT,
   PRIMARY KEY ("run_id", "step")
);
CREATE TABLE "chunks" (
   "run_id" TEXT, "step" INTEGER, "seq" INTEGER, "offset_ms" REAL, "size" INTEGER,
   "end" INTEGER,
   PRIMARY KEY ("run_id", "step", "seq")
);
CREATE TABLE "snapshots" (
   "run_id" TEXT REFERENCES "runs"("id"), "step" INTEGER, "adapter" TEXT,
   "content_type" TEXT, "body" TEXT, "size" INTEGER, "error" TEXT, "taken_at" REAL,
   "duration_ms" REAL,
   PRIMARY KEY ("run_id", "step", "adapter")
);
CREATE INDEX "idx_runs_name" ON "runs" ("name");
CREATE INDEX "idx_exchanges_run_id_fingerprint" ON "exchanges" ("run_id", "fingerprint");
CREATE TABLE "experiments" (
   "name" TEXT PRIMARY KEY, "created_at" REAL, "ended_at" REAL, "spec" TEXT
);
CREATE TABLE "experiment_runs" (
   "experiment" TEXT REFERENCES "experiments"("name"), "seq" INTEGER,
   "source_id" TEXT REFERENCES "runs"("id"), "branch_id" TEXT REFERENCES "runs"("id"),
   "error" TEXT, "result" TEXT,
   PRIMARY KEY ("experiment", "seq")
);
"""

# Version 2: `runs.next_step`, the step a proxy takes next for the run (`allocate_step`), so
# proxies serving one run at once never number two exchanges alike; and the experiment tables
# for a version-1 cassette written before they existed.
_V2 = """
ALTER TABLE "runs" ADD COLUMN "next_step" INTEGER NOT NULL DEFAULT 0;
UPDATE "runs" SET "next_step" = coalesce(
   (SELECT max("step") + 1 FROM "exchanges" WHERE "exchanges"."run_id" = "runs"."id"), 0);
CREATE TABLE IF NOT EXISTS "experiments" (
   "name" TEXT PRIMARY KEY, "created_at" REAL, "ended_at" REAL, "spec" TEXT
);
CREATE TABLE IF NOT EXISTS "experiment_runs" (
   "experiment" TEXT REFERENCES "experiments"("name"), "seq" INTEGER,
   "source_id" TEXT REFERENCES "runs"("id"), "branch_id" TEXT REFERENCES "runs"("id"),
   "error" TEXT, "result" TEXT,
   PRIMARY KEY ("experiment", "seq")
);
"""

# Version 3: `exchanges.note`, how a served answer was chosen when it was no exact match.
_V3 = """
ALTER TABLE "exchanges" ADD COLUMN "note" TEXT;
"""

# Version 4: `exchanges.response_pieces`, the pieces (blobs) a body too large to hold goes on
# in after its held part: [[sha256, size, offset_ms], ...]. An older forkpoint would serve the
# held part alone, so it refuses the file by its version.
_V4 = """
ALTER TABLE "exchanges" ADD COLUMN "response_pieces" TEXT;
"""

# Version 5: `tickets`, the step each request of a run several proxies serve was given when
# its proxy's recorder wrote it (`Store.number`): a request is answered without waiting on the
# store, and a journal merged twice numbers nothing twice.
_V5 = """
CREATE TABLE "tickets" (
   "run_id" TEXT, "ticket" INTEGER, "step" INTEGER,
   PRIMARY KEY ("run_id", "ticket")
);
"""

# Version 6: the usage a price needs beside input, output, cached and reasoning tokens: tokens
# written to a prompt cache (Anthropic prices them apart), audio tokens and audio seconds (a
# transcription's). Older rows read them as 0.
_V6 = """
ALTER TABLE "exchanges" ADD COLUMN "cache_write_tokens" INTEGER;
ALTER TABLE "exchanges" ADD COLUMN "audio_tokens" INTEGER;
ALTER TABLE "exchanges" ADD COLUMN "audio_seconds" REAL;
"""

# Version 7: `exchanges.request_pieces`, the same for a request body too large to hold (an
# upload): the pieces after its held part. Its fingerprint is the whole body's.
_V7 = """
ALTER TABLE "exchanges" ADD COLUMN "request_pieces" TEXT;
"""

# Version 8: `runs.owner`, the forkpoint process recording a run (host, boot, journal), so a
# reader can tell a run whose process is gone (`runtime.recording.owners`).
_V8 = """
ALTER TABLE "runs" ADD COLUMN "owner" TEXT;
"""

# Version 9: `exchanges.asked_body`, the request body as its agent sent it where a fork's
# change rewrote what went upstream (`request_body`): what matching reads. NULL: the same.
_V9 = """
ALTER TABLE "exchanges" ADD COLUMN "asked_body" TEXT;
"""

# Version 10: what repeats is stored once. `exchanges.text_zstd`, a summary's text compressed
# (then `text` is NULL); and header columns that hold an earlier step's list with the values
# that differ (`cassettes.headers`), which an older forkpoint would not read, so it refuses the
# file by its version. Rows written before keep their lists whole and read as they are.
_V10 = """
ALTER TABLE "exchanges" ADD COLUMN "text_zstd" BLOB;
"""

# Version 11: park and wake (`cassettes.sqlite.parks`). `parks`: a run's pending request, kept
# in an exchange's columns (its body a list of blobs), its state (parked, answered, waking,
# woken), what it waits on, its deadline, who answered it when, who took its wake; partial
# indexes find the waiting, the answered and the due ones without reading the woken ones.
# `launches`: how a run's agent was started (command, cwd, non-secret env), to wake it.
_V11 = """
CREATE TABLE "parks" (
   "run_id" TEXT REFERENCES "runs"("id"), "step" INTEGER, "state" TEXT NOT NULL,
   "waits_on" TEXT, "parked_at" REAL, "deadline" REAL, "answered_at" REAL,
   "answered_by" TEXT, "woken_at" REAL, "claimed_by" TEXT,
   "method" TEXT, "route" TEXT, "upstream" TEXT, "request_headers" TEXT,
   "request_body" TEXT, "fingerprint" TEXT, "status" INTEGER, "response_headers" TEXT,
   "response_body" TEXT, "streamed" INTEGER, "complete" INTEGER, "error" TEXT,
   "origin" TEXT, "started_at" REAL, "ttfb_ms" REAL, "duration_ms" REAL, "kind" TEXT,
   "dialect" TEXT, "model" TEXT, "input_tokens" INTEGER, "output_tokens" INTEGER,
   "cached_tokens" INTEGER, "reasoning_tokens" INTEGER, "tool_calls" TEXT,
   "finish_reason" TEXT, "text" TEXT, "note" TEXT, "response_pieces" TEXT,
   "cache_write_tokens" INTEGER, "audio_tokens" INTEGER, "audio_seconds" REAL,
   "request_pieces" TEXT, "asked_body" TEXT, "text_zstd" BLOB,
   PRIMARY KEY ("run_id", "step")
);
CREATE INDEX "parks_parked" ON "parks" ("run_id", "step") WHERE state = 'parked';
CREATE INDEX "parks_awake" ON "parks" ("state", "run_id", "step")
   WHERE state IN ('answered', 'waking');
CREATE INDEX "parks_due" ON "parks" ("deadline", "run_id")
   WHERE state = 'parked' AND deadline IS NOT NULL;
CREATE TABLE "launches" (
   "run_id" TEXT PRIMARY KEY REFERENCES "runs"("id"), "command" TEXT, "cwd" TEXT,
   "env" TEXT, "needs" TEXT, "options" TEXT, "waker" TEXT, "on_wake" TEXT
);
"""

# Version 12: what a cassette stores for each exchange beyond its new content is made small
# (issue 27.10). `contents` holds the blobs written from now on, each numbered (`id`), which
# a body column's manifest names instead of its 64-digit hash; its sha256 is kept as 32 bytes
# (`hash`, unique: a blob is stored once). `base`: for a blob compressed against its run's
# earlier ones (codec `zstd-dict`, `cassettes.deltas`), the JSON list of their numbers, all
# lower than its own. `blobs` keeps the rows written before, which their manifests name by
# hash (a new cassette, or one with no blob yet, has none: `migrate` drops it). Rows written
# from now on also keep a fingerprint of 64 hex digits as its 32 bytes, no tool calls as NULL,
# and header references as flat lists (`cassettes.headers`). The index on fingerprints goes:
# nothing looks exchanges up by one (a replay loads its run's and matches in memory).
_V12 = """
DROP INDEX "idx_exchanges_run_id_fingerprint";
CREATE TABLE "contents" (
   "id" INTEGER PRIMARY KEY, "hash" BLOB NOT NULL UNIQUE, "size" INTEGER NOT NULL,
   "codec" TEXT NOT NULL, "data" BLOB NOT NULL, "base" TEXT
);
"""

# Version 13: `parks.claimed_at`, when a wake was claimed: a claim older than its lease whose
# run recorded nothing since is taken again (`ParkStore.claim_wake`). Only claims read it.
_V13 = """
ALTER TABLE "parks" ADD COLUMN "claimed_at" REAL;
"""

MIGRATIONS: list[str] = [
    _V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10, _V11, _V12, _V13,
]  # fmt: skip
assert len(MIGRATIONS) == SCHEMA_VERSION


def migrate(conn: sqlite3.Connection, found: int) -> None:
    """Apply the migrations after version `found`, inside the caller's transaction."""
    for script in MIGRATIONS[found:]:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    if found < CONTENTS_FROM and conn.execute("SELECT 1 FROM blobs LIMIT 1").fetchone() is None:
        conn.execute('DROP TABLE "blobs"')  # nothing names a blob by hash: it stays empty
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def has_blobs(conn: sqlite3.Connection, version: int) -> bool:
    """Whether the file has the `blobs` table (every one before CONTENTS_FROM has)."""
    if version < CONTENTS_FROM:
        return True
    query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='blobs'"
    return conn.execute(query).fetchone() is not None
