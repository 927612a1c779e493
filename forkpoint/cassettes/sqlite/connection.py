"""The SQLite cassette's file: opening it, checking or migrating its schema, and one connection
shared by threads behind a lock.

A reader opens the file read-only and never writes to it, not even its header: a cassette of
another version is refused as it is, an older one is read as it is, and a cassette on a
read-only filesystem can still be read. A writer creates, migrates and switches the file to
WAL only once the version check has passed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from forkpoint.cassettes.sqlite.schema import (
    APPLICATION_ID,
    READABLE_FROM,
    SCHEMA_VERSION,
    migrate,
)
from forkpoint.errors import CassetteError, SchemaVersionError


class Connection:
    """The cassette file at `path`, open for writing, or for reading only (`read_only`)."""

    def __init__(self, path: Path, *, create: bool, read_only: bool, busy_timeout_ms: int) -> None:
        self.path = path
        self.read_only = read_only
        self.lock = threading.RLock()
        self._closed = False
        if not path.exists():
            if read_only or not create:
                raise CassetteError(
                    f"no cassette at {path}: record a run first (forkpoint record -- CMD)"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = self._connect(busy_timeout_ms)
            self.version = self._check_or_create()
            if not read_only:
                # WAL: readers (`forkpoint show` while recording) never block the proxy's
                # writer, and a killed process loses at most its open transaction.
                self.conn.execute("PRAGMA journal_mode=WAL")
                # NORMAL is durable across a process crash in WAL mode; only a power loss can
                # drop the last commits, and it costs no fsync per exchange.
                self.conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as error:
            raise CassetteError(explain(path, error)) from error
        except BaseException:
            if hasattr(self, "conn"):
                self.conn.close()
            raise

    def _connect(self, busy_timeout_ms: int) -> sqlite3.Connection:
        def connect(target: str | Path, uri: bool = False) -> sqlite3.Connection:
            # Autocommit: every write transaction is an explicit BEGIN IMMEDIATE (`writing`).
            return sqlite3.connect(
                target, uri=uri, check_same_thread=False, isolation_level=None,
                timeout=busy_timeout_ms / 1000,
            )  # fmt: skip

        if self.read_only:
            conn = connect(f"file:{quote(str(self.path))}?mode=ro", uri=True)
            try:
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                # A WAL cassette where its -shm file cannot be made (a read-only directory or
                # filesystem): read the file as it is, without locking.
                conn.close()
                conn = connect(f"file:{quote(str(self.path))}?immutable=1", uri=True)
        else:
            conn = connect(self.path)
        # Another process holding the write lock: wait this long before reporting it locked.
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        # Exchanges must belong to a run that exists.
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _pragma(self, name: str) -> int:
        return int(self.conn.execute(f"PRAGMA {name}").fetchone()[0])

    def _empty(self) -> bool:
        return self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0

    def _check_or_create(self) -> int:
        """The schema version the file has now: created, migrated, or as found."""
        if self._pragma("application_id") == 0 and self._empty():
            if self.read_only:
                raise CassetteError(f"{self.path} is empty: no run was recorded into it yet")
            # Two processes may create the same new cassette at once (parallel `record`s):
            # the write lock makes one the creator, and the other then finds its schema.
            with self.writing() as conn:
                if self._empty():
                    migrate(conn, 0)
        app_id, version = self._pragma("application_id"), self._pragma("user_version")
        if app_id != APPLICATION_ID:
            raise CassetteError(f"{self.path} is an SQLite file but not a forkpoint cassette")
        if version > SCHEMA_VERSION or version < READABLE_FROM:
            raise _refused(self.path, version)
        if version < SCHEMA_VERSION and not self.read_only:
            with self.writing() as conn:
                found = self._pragma("user_version")  # another process may have migrated it
                if found < SCHEMA_VERSION:
                    migrate(conn, found)
            version = SCHEMA_VERSION
        return version

    def _open(self) -> None:
        if self._closed:
            raise CassetteError(f"the cassette {self.path} is closed")

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self._open()
            try:
                yield self.conn
            except sqlite3.DatabaseError as error:
                if isinstance(error, sqlite3.IntegrityError):
                    raise
                raise CassetteError(explain(self.path, error)) from error

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock at once (BEGIN IMMEDIATE), so a read
        inside it never has to be upgraded and fail as busy."""
        with self.reading() as conn:
            if self.read_only:
                raise CassetteError(f"{self.path} is open for reading only")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite ends some failed ones itself (a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        with self.lock:
            if not self._closed:
                self._closed = True
                self.conn.close()


def _refused(path: Path, version: int) -> SchemaVersionError:
    older = version < SCHEMA_VERSION
    return SchemaVersionError(
        f"{path} is a cassette of schema version {version}, from "
        f"{'an older' if older else 'a newer'} forkpoint; this forkpoint reads versions "
        f"{READABLE_FROM} to {SCHEMA_VERSION} "
        + (
            "(export its runs with the forkpoint that wrote it, then import them here)"
            if older
            else "(upgrade forkpoint to read it)"
        ),
        found=version,
        expected=SCHEMA_VERSION,
    )


def explain(path: Path, error: sqlite3.DatabaseError) -> str:
    text = str(error)
    if "locked" in text or "busy" in text:
        return f"{path} is locked by another process (still locked after the busy timeout)"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a readable SQLite cassette ({text})"
    if "readonly" in text:
        return f"{path} cannot be written: {text} (a reading command still works)"
    return f"{path}: {text}"
