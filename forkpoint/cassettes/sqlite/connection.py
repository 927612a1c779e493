"""The SQLite cassette's file: opening it, checking or migrating its schema, and one connection
shared by threads behind a lock.

A reader opens the file read-only and never writes to it, not even its header: a cassette of
another version is refused as it is, an older one is read as it is, and a cassette on a
read-only filesystem can still be read. A writer checks the whole file first (`check`: a page
a reader would refuse, it refuses too, leaving the file as it is), and creates, migrates and
switches the file to WAL only once the checks have passed.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from forkpoint.cassettes.sqlite.check import FileCheck
from forkpoint.cassettes.sqlite.schema import (
    APPLICATION_ID,
    PAGE_SIZE,
    READABLE_FROM,
    SCHEMA_VERSION,
    has_blobs,
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
        self._atomic = False  # inside `atomic`: writes are savepoints of its transaction
        self._check: FileCheck | None = None  # a writer's, of a file that has pages
        if not path.exists():
            if read_only or not create:
                raise CassetteError(
                    f"no cassette at {path}: record a run first (forkpoint record -- CMD)"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if not read_only and path.exists() and path.stat().st_size > 0:
                self._check = FileCheck(path, lambda: self._connect(busy_timeout_ms, True))
                self._check.begin()
                self._refuse_damaged(wait=False)
            self.conn = self._connect(busy_timeout_ms, read_only)
            self.version = self._check_or_create()
            self.has_blobs = has_blobs(self.conn, self.version)  # blobs written before 12
            if not read_only:
                # WAL: readers (`forkpoint show` while recording) never block the proxy's
                # writer, and a killed process loses at most its open transaction.
                self._switch_to_wal(busy_timeout_ms)
                # NORMAL is durable across a process crash in WAL mode; only a power loss can
                # drop the last commits, and it costs no fsync per exchange.
                self.conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as error:
            raise CassetteError(explain(path, error)) from error
        except BaseException:
            if self._check is not None:
                self._check.stop()
            if hasattr(self, "conn"):
                self.conn.close()
            raise

    def _connect(self, busy_timeout_ms: int, read_only: bool) -> sqlite3.Connection:
        def connect(target: str | Path, uri: bool = False) -> sqlite3.Connection:
            # Autocommit: every write transaction is an explicit BEGIN IMMEDIATE (`writing`).
            return sqlite3.connect(
                target, uri=uri, check_same_thread=False, isolation_level=None,
                timeout=busy_timeout_ms / 1000,
            )  # fmt: skip

        if read_only:
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

    def _switch_to_wal(self, busy_timeout_ms: int) -> None:
        """`PRAGMA journal_mode=WAL`, waiting out other processes as a write does. The switch
        needs the file to itself, and SQLite answers "locked" at once, without its busy
        handler, while another process writes (a new cassette's creator, or a process that
        opened it first and records): it is asked again until the busy timeout."""
        deadline = time.monotonic() + busy_timeout_ms / 1000
        pause = 0.001
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if not _busy(error) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _pragma(self, name: str) -> int:
        return int(self.conn.execute(f"PRAGMA {name}").fetchone()[0])

    def _empty(self) -> bool:
        return self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0

    def _check_or_create(self) -> int:
        """The schema version the file has now: created, migrated, or as found."""
        if self._pragma("application_id") == 0 and self._empty():
            if self.read_only:
                raise CassetteError(f"{self.path} is empty: no run was recorded into it yet")
            # Only a file with no page yet takes it (outside a transaction); one that another
            # process created meanwhile keeps its own.
            self.conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
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

    def _refuse_damaged(self, *, wait: bool) -> None:
        """Raise what the writer's check found (waiting for its answer if `wait`)."""
        failure = None if self._check is None else self._check.failure(wait=wait)
        if failure is not None:
            raise CassetteError(explain(self.path, failure))

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            self._open()
            self._refuse_damaged(wait=False)
            try:
                yield self.conn
            except sqlite3.DatabaseError as error:
                if isinstance(error, sqlite3.IntegrityError):
                    raise
                raise CassetteError(explain(self.path, error)) from error

    @contextmanager
    def writing(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock at once (BEGIN IMMEDIATE), so a read
        inside it never has to be upgraded and fail as busy. Inside `atomic`, a savepoint of
        its transaction: a write that fails undoes itself alone, as it would on its own."""
        if not self._atomic:  # nothing is written before the check passed; reads go on meanwhile
            self._refuse_damaged(wait=True)
        with self.reading() as conn:
            if self.read_only:
                raise CassetteError(f"{self.path} is open for reading only")
            begin, commit, undo = (
                ("SAVEPOINT write", "RELEASE write", ("ROLLBACK TO write", "RELEASE write"))
                if self._atomic
                else ("BEGIN IMMEDIATE", "COMMIT", ("ROLLBACK",))
            )
            conn.execute(begin)
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:  # SQLite ends some failed ones itself (a full disk)
                    for statement in undo:
                        conn.execute(statement)
                raise
            conn.execute(commit)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every write made inside, on this thread, is one transaction: committed at the end,
        or rolled back whole (an import that fails part-way leaves nothing). Other threads
        wait for it, on the lock."""
        with self.writing():
            self._atomic = True
            try:
                yield
            finally:
                self._atomic = False

    def close(self) -> None:
        if self._check is not None:
            self._check.stop()
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


def _busy(error: sqlite3.DatabaseError) -> bool:
    """Whether another connection holds the lock the statement needed."""
    text = str(error)
    return "locked" in text or "busy" in text


def explain(path: Path, error: sqlite3.DatabaseError) -> str:
    text = str(error)
    if _busy(error):
        return f"{path} is locked by another process (still locked after the busy timeout)"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a readable SQLite cassette ({text})"
    if "readonly" in text:
        return f"{path} cannot be written: {text} (a reading command still works)"
    return f"{path}: {text}"
