"""The SQLite cassette's schema, as numbered migrations.

`MIGRATIONS[n]` takes a cassette from schema version n to n + 1: a new cassette gets them all,
an older one opened for writing gets the ones it lacks, in one transaction. The version is
the file's `PRAGMA user_version`, and `PRAGMA application_id` marks the file as a cassette.
A read never migrates: a reader reads any version from READABLE_FROM on as it is.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 4
# The oldest version this forkpoint reads without migrating it.
READABLE_FROM = 1
# PRAGMA application_id marks the file as a forkpoint cassette ("fkpt").
APPLICATION_ID = 0x666B7074

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

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4]
assert len(MIGRATIONS) == SCHEMA_VERSION


def migrate(conn: sqlite3.Connection, found: int) -> None:
    """Apply the migrations after version `found`, inside the caller's transaction."""
    for script in MIGRATIONS[found:]:
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
