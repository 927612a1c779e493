"""The default cassette: one SQLite file, written through sqlite-utils.

Tables: `runs`, `exchanges` (one row per step, with what its dialect read off it), `chunks`
(one row per streamed chunk: its offset and size, then an end marker row when the stream ended
cleanly, so a cut stream is visible in SQL), and `blobs` (body segments by sha256, compressed,
stored once). A body column holds the JSON list of its segments' hashes.
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
from forkpoint.cassettes.models import (
    Chunk,
    Exchange,
    Headers,
    Kind,
    Mode,
    Origin,
    Run,
    RunStatus,
    Summary,
    ToolCall,
    Usage,
)
from forkpoint.errors import CassetteError, RunNotFound, SchemaVersionError

SCHEMA_VERSION = 1
# PRAGMA application_id marks the file as a forkpoint cassette ("fkpt").
APPLICATION_ID = 0x666B7074
DEFAULT_PATH = Path(".forkpoint/forkpoint.db")


class SqliteStore:
    """A `Store` on one SQLite file, safe to share between the event loop and a writer thread."""

    def __init__(self, path: str | Path, *, create: bool = True, busy_timeout_ms: int = 5000):
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise CassetteError(
                    f"no cassette at {self.path}: record a run first (forkpoint record -- CMD)"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(
                self.path, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
            self._conn = conn
            self.db = sqlite_utils.Database(conn)
            self._configure(busy_timeout_ms)
            self._check_or_create_schema()
        except sqlite3.DatabaseError as error:
            raise CassetteError(_explain(self.path, error)) from error

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

    def _check_or_create_schema(self) -> None:
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if app_id == 0 and not self.db.table_names():
            with self._conn:
                self._create_schema()
            return
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

    def _create_schema(self) -> None:
        db = self.db
        db.table("runs").create(
            {
                "id": str, "name": str, "labels": str, "status": str, "mode": str,
                "parent_id": str, "fork_step": int, "change": str, "created_at": float,
                "ended_at": float, "error": str,
            },
            pk="id",
            foreign_keys=[("parent_id", "runs", "id")],
        )  # fmt: skip
        db.table("blobs").create({"hash": str, "size": int, "codec": str, "data": bytes}, pk="hash")
        db.table("exchanges").create(
            {
                "run_id": str, "step": int, "method": str, "route": str, "upstream": str,
                "request_headers": str, "request_body": str, "fingerprint": str,
                "status": int, "response_headers": str, "response_body": str,
                "streamed": int, "complete": int, "error": str, "origin": str,
                "started_at": float, "ttfb_ms": float, "duration_ms": float,
                "kind": str, "dialect": str, "model": str, "input_tokens": int,
                "output_tokens": int, "cached_tokens": int, "reasoning_tokens": int,
                "tool_calls": str, "finish_reason": str, "text": str,
            },
            pk=("run_id", "step"),
            foreign_keys=[("run_id", "runs", "id")],
        )  # fmt: skip
        db.table("chunks").create(
            {"run_id": str, "step": int, "seq": int, "offset_ms": float, "size": int, "end": int},
            pk=("run_id", "step", "seq"),
        )
        db.table("runs").create_index(["name"])
        db.table("exchanges").create_index(["run_id", "fingerprint"])
        db.execute(f"PRAGMA application_id={APPLICATION_ID}")
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                with self._conn:
                    yield self._conn
            except sqlite3.OperationalError as error:
                raise CassetteError(_explain(self.path, error)) from error

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
                (status, time.time(), error, fork_step, run_id),
            )

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.path}", run_id=run_id)
        return _run_from_row(row)

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
            return _run_from_row(rows[0])
        if len(rows) > 1:
            raise RunNotFound(f"{ref!r} matches several runs; give more of the id", run_id=ref)
        raise RunNotFound(f"no run {ref!r} in {self.path} (see: forkpoint runs)", run_id=ref)

    def list_runs(self) -> list[Run]:
        with self._lock:
            rows = self._conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        return [_run_from_row(row) for row in rows]

    def step_count(self, run_id: str) -> int:
        with self._lock:
            return int(
                self._conn.execute(
                    "SELECT count(*) FROM exchanges WHERE run_id=?", (run_id,)
                ).fetchone()[0]
            )

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
                _dump_headers(ex.request_headers), self._put_body(conn, ex.request_body),
                ex.fingerprint, ex.status, _dump_headers(ex.response_headers),
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

    def _put_body(self, conn: sqlite3.Connection, body: bytes) -> str:
        hashes = []
        for segment in blobs.split(body):
            digest = blobs.content_hash(segment)
            hashes.append(digest)
            if conn.execute("SELECT 1 FROM blobs WHERE hash=?", (digest,)).fetchone() is None:
                codec, data = blobs.compress(segment)
                conn.execute(
                    "INSERT INTO blobs VALUES (?,?,?,?)", (digest, len(segment), codec, data)
                )
        return orjson.dumps(hashes).decode()

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
                exchange.chunks = _cut_chunks(
                    exchange.response_body, by_step.get(exchange.step, [])
                )
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
            request_headers=_load_headers(row["request_headers"]),
            request_body=self._get_body(row["request_body"]) if bodies else b"",
            fingerprint=row["fingerprint"],
            status=row["status"],
            response_headers=_load_headers(row["response_headers"]),
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

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only SQL for reports and tests."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _cut_chunks(body: bytes, sizes: list[tuple[float, int]]) -> list[Chunk]:
    chunks, position = [], 0
    for offset_ms, size in sizes:
        chunks.append(Chunk(offset_ms, body[position : position + size]))
        position += size
    return chunks


def _dump_headers(headers: Headers) -> str:
    return orjson.dumps([list(pair) for pair in headers]).decode()


def _load_headers(text: str | None) -> Headers:
    return tuple((name, value) for name, value in orjson.loads(text or "[]"))


def _run_from_row(row: tuple[Any, ...]) -> Run:
    (id_, name, labels, status, mode, parent, fork_step, change, created, ended, error) = row
    return Run(
        id=id_,
        name=name,
        labels=orjson.loads(labels or "{}"),
        status=RunStatus(status),
        mode=Mode(mode),
        parent_id=parent,
        fork_step=fork_step,
        change=None if change is None else orjson.loads(change),
        created_at=created,
        ended_at=ended,
        error=error,
    )


def _explain(path: Path, error: sqlite3.DatabaseError) -> str:
    text = str(error)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process (still locked after the busy timeout)"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a readable SQLite cassette ({text})"
    return f"{path}: {text}"
