"""The default cassette: one SQLite file, written through sqlite-utils.

Tables: `runs`, `exchanges` (one row per step, with what its dialect read off it), `chunks`
(one row per streamed chunk: its offset and size, then an end marker row when the stream ended
cleanly, so a cut stream is visible in SQL), and `blobs` (body segments by sha256, compressed,
stored once). A body column holds the JSON list of its segments' hashes. `experiments` and
`experiment_runs` keep each experiment's spec and the branch run it forked from each run.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import sqlite_utils

from forkpoint.cassettes import blobs
from forkpoint.cassettes.sqlite.schema import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    create_experiment_tables,
    create_schema,
    cut_chunks,
    dump_headers,
    explain,
    load_headers,
    run_from_row,
)
from forkpoint.cassettes.store import StoredBranch, StoredExperiment
from forkpoint.errors import CassetteError, ConfigError, RunNotFound, SchemaVersionError
from forkpoint.models import (
    Exchange,
    Kind,
    Origin,
    Run,
    RunStatus,
    Snapshot,
    Summary,
    ToolCall,
    Usage,
)

KNOWN_BLOBS = 100_000


class BoundedSet:
    """A set that forgets its oldest members past `limit` (a dict keeps insertion order)."""

    def __init__(self, limit: int):
        self._items: dict[str, None] = {}
        self._limit = limit

    def __contains__(self, item: str) -> bool:
        return item in self._items

    def add(self, item: str) -> None:
        self._items[item] = None
        if len(self._items) > self._limit:
            del self._items[next(iter(self._items))]

    def clear(self) -> None:
        self._items.clear()


DEFAULT_PATH = Path(".forkpoint/forkpoint.db")
# Blobs at least this large are looked up before being compressed (bytes).
ASK_FIRST = 64 * 1024


class SqliteStore:
    """A `Store` on one SQLite file, safe to share between threads; other processes (the cassette
    writer, `forkpoint show` while a run records) open the same file alongside."""

    def __init__(self, path: str | Path, *, create: bool = True, busy_timeout_ms: int = 5000):
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise CassetteError(
                    f"no cassette at {self.path}: record a run first (forkpoint record -- CMD)"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # Hashes known to be stored: most segments of a request were stored by an earlier turn.
        # A rolled-back transaction would leave stale entries, so the set is dropped on error.
        self._known_blobs = BoundedSet(KNOWN_BLOBS)
        try:
            conn = sqlite3.connect(
                self.path, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
            self._conn = conn
            self.db = sqlite_utils.Database(conn)
            self._configure(busy_timeout_ms)
            self._check_or_create_schema()
        except sqlite3.DatabaseError as error:
            raise CassetteError(explain(self.path, error)) from error

    def _configure(self, busy_timeout_ms: int) -> None:
        # WAL: readers (`forkpoint show` while recording) never block the proxy's writer, and a
        # killed process loses at most its open transaction.
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across a process crash in WAL mode; only a power loss can drop the
        # last commits, and it costs no fsync per exchange.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        # Another process holding the write lock: wait this long before reporting it locked.
        self._conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # Exchanges must belong to a run that exists.
        self._conn.execute("PRAGMA foreign_keys=ON")

    def _read_pragma(self, name: str) -> int:
        return int(self._conn.execute(f"PRAGMA {name}").fetchone()[0])

    def _check_or_create_schema(self) -> None:
        if self._read_pragma("application_id") == 0 and not self.db.table_names():
            # Two processes may create the same new cassette at once (parallel `record`s):
            # the write lock makes one the creator, and the other then finds its schema.
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if not self.db.table_names():
                    create_schema(self.db)
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise
        app_id, version = self._read_pragma("application_id"), self._read_pragma("user_version")
        if app_id != APPLICATION_ID:
            raise CassetteError(f"{self.path} is an SQLite file but not a forkpoint cassette")
        if version != SCHEMA_VERSION:
            age = "an older" if version < SCHEMA_VERSION else "a newer"
            raise SchemaVersionError(
                f"{self.path} is a cassette of schema version {version}, from {age} forkpoint; "
                f"this forkpoint reads version {SCHEMA_VERSION} "
                + (
                    "(export its runs with the forkpoint that wrote it, then import them here)"
                    if version < SCHEMA_VERSION
                    else "(upgrade forkpoint to read it)"
                ),
                found=version,
                expected=SCHEMA_VERSION,
            )

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                with self._conn:
                    yield self._conn
            except sqlite3.OperationalError as error:
                self._known_blobs.clear()
                raise CassetteError(explain(self.path, error)) from error
            except BaseException:
                self._known_blobs.clear()
                raise

    # runs

    def create_run(self, run: Run) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    run.id, run.name, orjson.dumps(run.labels).decode(), run.status, run.mode,
                    run.parent_id, run.fork_step,
                    None if run.change is None else orjson.dumps(run.change).decode(),
                    run.created_at, run.ended_at, run.error,
                ),
            )  # fmt: skip

    def finish_run(
        self, run_id: str, status: RunStatus, *, error: str | None = None,
        fork_step: int | None = None,
    ) -> None:  # fmt: skip
        """Close a run; `fork_step` records where a replay that went live actually forked."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET status=?, ended_at=?, error=?, "
                "fork_step=coalesce(?, fork_step) WHERE id=?",
                (
                    status,
                    None if status is RunStatus.RUNNING else time.time(),
                    error,
                    fork_step,
                    run_id,
                ),
            )

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.path}", run_id=run_id)
        return run_from_row(row)

    def find_run(self, ref: str) -> Run:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM runs WHERE id=?", (ref,)).fetchall()
            if not rows:
                rows = self._conn.execute(
                    "SELECT * FROM runs WHERE name=? ORDER BY id DESC LIMIT 1", (ref,)
                ).fetchall()
            if not rows and len(ref) >= 4:
                rows = self._conn.execute(
                    "SELECT * FROM runs WHERE id LIKE ? LIMIT 2", (ref.upper() + "%",)
                ).fetchall()
        if len(rows) == 1:
            return run_from_row(rows[0])
        if len(rows) > 1:
            raise RunNotFound(f"{ref!r} matches several runs; give more of the id", run_id=ref)
        raise RunNotFound(f"no run {ref!r} in {self.path} (see: forkpoint runs)", run_id=ref)

    def list_runs(self) -> list[Run]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [run_from_row(row) for row in rows]

    def step_count(self, run_id: str) -> int:
        with self._lock:
            return int(
                self._conn.execute(
                    "SELECT count(*) FROM exchanges WHERE run_id=?", (run_id,)
                ).fetchone()[0]
            )

    def next_step(self, run_id: str) -> int:
        """The step after the run's highest: a crash may have left gaps below it."""
        with self._lock:
            (found,) = self._conn.execute(
                "SELECT max(step) FROM exchanges WHERE run_id=?", (run_id,)
            ).fetchone()
        return 0 if found is None else int(found) + 1

    # exchanges

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        with self._transaction() as conn:
            for exchange in exchanges:
                self._insert_exchange(conn, exchange)

    def _insert_exchange(self, conn: sqlite3.Connection, ex: Exchange) -> None:
        summary = ex.summary or Summary(kind=Kind.OTHER, dialect="generic")
        usage = summary.usage
        conn.execute(
            f"INSERT INTO exchanges VALUES ({','.join('?' * 28)})",
            (
                ex.run_id, ex.step, ex.method, ex.route, ex.upstream,
                dump_headers(ex.request_headers), self._put_body(conn, ex.request_body),
                ex.fingerprint, ex.status, dump_headers(ex.response_headers),
                self._put_body(conn, ex.response_body), int(ex.streamed), int(ex.complete),
                ex.error, ex.origin, ex.started_at, ex.ttfb_ms, ex.duration_ms,
                summary.kind, summary.dialect, summary.model,
                usage and usage.input, usage and usage.output,
                usage and usage.cached, usage and usage.reasoning,
                orjson.dumps([[c.name, c.arguments, c.id] for c in summary.tool_calls]).decode(),
                summary.finish_reason, summary.text,
            ),
        )  # fmt: skip
        if ex.chunks is not None:
            rows = [
                (ex.run_id, ex.step, seq, c.offset_ms, len(c.data), 0)
                for seq, c in enumerate(ex.chunks)
            ]
            if ex.complete:
                end = ex.duration_ms if ex.duration_ms is not None else 0.0
                rows.append((ex.run_id, ex.step, len(ex.chunks), end, 0, 1))
            conn.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?)", rows)

    def _put_body(
        self, conn: sqlite3.Connection, body: bytes, content_type: str | None = None
    ) -> str:
        hashes = []
        for segment in blobs.segments(body, content_type):
            digest = blobs.content_hash(segment)
            hashes.append(digest)
            if digest in self._known_blobs:
                continue
            # Not known here is nearly always new: compressing the odd small one stored
            # already (by another process, or before this one started) costs less than asking
            # first; a large one (a workspace file kept from the last snapshot) is worth asking.
            if len(segment) < ASK_FIRST or not self._stored(conn, digest):
                codec, data = blobs.compress(segment)
                conn.execute(
                    "INSERT OR IGNORE INTO blobs VALUES (?,?,?,?)",
                    (digest, len(segment), codec, data),
                )
            self._known_blobs.add(digest)
        return orjson.dumps(hashes).decode()

    @staticmethod
    def _stored(conn: sqlite3.Connection, digest: str) -> bool:
        return conn.execute("SELECT 1 FROM blobs WHERE hash=?", (digest,)).fetchone() is not None

    def _get_body(self, manifest: str) -> bytes:
        hashes = orjson.loads(manifest)
        if not hashes:
            return b""
        placeholders = ",".join("?" * len(hashes))
        rows = self._conn.execute(
            f"SELECT hash, codec, data FROM blobs WHERE hash IN ({placeholders})", hashes
        ).fetchall()
        found = {digest: blobs.decompress(codec, data) for digest, codec, data in rows}
        try:
            return b"".join(found[digest] for digest in hashes)
        except KeyError as missing:
            raise CassetteError(f"{self.path} lacks blob {missing}: the file is damaged") from None

    def response_keys(self, run_id: str) -> dict[int, str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT step, response_body FROM exchanges WHERE run_id=?", (run_id,)
            ).fetchall()
        return dict(rows)

    def exchanges(self, run_id: str, *, bodies: bool = True) -> list[Exchange]:
        with self._lock:
            self._conn.row_factory = sqlite3.Row
            try:
                rows = self._conn.execute(
                    "SELECT * FROM exchanges WHERE run_id=? ORDER BY step", (run_id,)
                ).fetchall()
                chunk_rows = self._conn.execute(
                    "SELECT step, offset_ms, size FROM chunks WHERE run_id=? AND end=0 "
                    "ORDER BY step, seq",
                    (run_id,),
                ).fetchall()
                result = [self._exchange_from_row(row, bodies) for row in rows]
            finally:
                self._conn.row_factory = None
        by_step: dict[int, list[tuple[float, int]]] = {}
        for chunk in chunk_rows:
            by_step.setdefault(chunk["step"], []).append((chunk["offset_ms"], chunk["size"]))
        for exchange in result:
            if exchange.chunks is not None:
                exchange.chunks = cut_chunks(exchange.response_body, by_step.get(exchange.step, []))
        return result

    def _exchange_from_row(self, row: sqlite3.Row, bodies: bool) -> Exchange:
        usage = None
        if row["input_tokens"] is not None:
            usage = Usage(
                row["input_tokens"], row["output_tokens"] or 0,
                row["cached_tokens"] or 0, row["reasoning_tokens"] or 0,
            )  # fmt: skip
        summary = Summary(
            kind=Kind(row["kind"]),
            dialect=row["dialect"],
            model=row["model"],
            usage=usage,
            tool_calls=tuple(ToolCall(n, a, i) for n, a, i in orjson.loads(row["tool_calls"])),
            finish_reason=row["finish_reason"],
            text=row["text"],
        )
        return Exchange(
            run_id=row["run_id"],
            step=row["step"],
            method=row["method"],
            route=row["route"],
            request_headers=load_headers(row["request_headers"]),
            request_body=self._get_body(row["request_body"]) if bodies else b"",
            fingerprint=row["fingerprint"],
            status=row["status"],
            response_headers=load_headers(row["response_headers"]),
            response_body=self._get_body(row["response_body"]) if bodies else b"",
            chunks=[] if row["streamed"] else None,
            complete=bool(row["complete"]),
            error=row["error"],
            origin=Origin(row["origin"]),
            upstream=row["upstream"],
            started_at=row["started_at"],
            ttfb_ms=row["ttfb_ms"],
            duration_ms=row["duration_ms"],
            summary=summary,
        )

    # snapshots

    def add_snapshot(self, snapshot: Snapshot) -> None:
        """Store a snapshot; a later one for the same (run, step, adapter) replaces it."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO snapshots VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    snapshot.run_id, snapshot.step, snapshot.adapter, snapshot.content_type,
                    self._put_body(conn, snapshot.data, snapshot.content_type),
                    len(snapshot.data), snapshot.error,
                    snapshot.taken_at, snapshot.duration_ms,
                ),
            )  # fmt: skip

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        """A run's snapshots by step, failed pulls included; `data=True` loads the state."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id, step, adapter, content_type, body, error, taken_at, duration_ms, "
                "size FROM snapshots WHERE run_id=? ORDER BY step, adapter",
                (run_id,),
            ).fetchall()
            return [
                Snapshot(run, step, adapter, content_type,
                         self._get_body(body) if data else b"", error, taken_at, duration_ms, size)
                for run, step, adapter, content_type, body, error, taken_at, duration_ms, size
                in rows
            ]  # fmt: skip

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        """For each adapter, its newest good snapshot at a step <= `at_most`, state loaded."""
        newest: dict[str, Snapshot] = {}
        for snapshot in self.snapshots(run_id):
            if snapshot.ok and (at_most is None or snapshot.step <= at_most):
                newest[snapshot.adapter] = snapshot
        with self._lock:
            for snapshot in newest.values():
                (body,) = self._conn.execute(
                    "SELECT body FROM snapshots WHERE run_id=? AND step=? AND adapter=?",
                    (run_id, snapshot.step, snapshot.adapter),
                ).fetchone()
                snapshot.data = self._get_body(body)
        return list(newest.values())

    # experiments

    def create_experiment(self, experiment: StoredExperiment) -> None:
        name, created_at, ended_at, spec = experiment
        with self._transaction() as conn:
            create_experiment_tables(self.db)  # a cassette from before experiments lacks them
            if conn.execute("SELECT 1 FROM experiments WHERE name=?", (name,)).fetchone():
                raise ConfigError(f"{self.path} already has an experiment {name!r}")
            conn.execute(
                "INSERT INTO experiments VALUES (?,?,?,?)",
                (name, created_at, ended_at, orjson.dumps(spec).decode()),
            )

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        seq, source_id, branch_id, error, result = branch
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO experiment_runs VALUES (?,?,?,?,?,?)",
                (name, seq, source_id, branch_id, error, orjson.dumps(result).decode()),
            )

    def finish_experiment(self, name: str, *, ended_at: float) -> None:
        with self._transaction() as conn:
            conn.execute("UPDATE experiments SET ended_at=? WHERE name=?", (ended_at, name))

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        found = self._experiments("WHERE name=?", (name,))
        if not found:
            raise ConfigError(
                f"no experiment {name!r} in {self.path} (see: forkpoint experiment list)"
            )
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, source_id, branch_id, error, result FROM experiment_runs "
                "WHERE experiment=? ORDER BY seq",
                (name,),
            ).fetchall()
        return found[0], [StoredBranch(s, src, b, e, orjson.loads(r)) for s, src, b, e, r in rows]

    def list_experiments(self) -> list[StoredExperiment]:
        return self._experiments("ORDER BY created_at, name", ())

    def _experiments(self, where: str, params: Sequence[Any]) -> list[StoredExperiment]:
        with self._lock:
            if not self.db["experiments"].exists():
                return []
            rows = self._conn.execute(f"SELECT * FROM experiments {where}", params).fetchall()
        return [StoredExperiment(n, c, e, orjson.loads(spec)) for n, c, e, spec in rows]

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only SQL for reports and tests."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()
