"""A writer's check that the cassette file reads whole before anything is written into it.

A reader refuses a file with a damaged page as it reads that page (SQLite checks each page it
loads: "database disk image is malformed"). A writer loads only the pages it adds to (the right
edge of each table and index, the blobs' index where a hash falls), so without a check it adds
a run to a file the readers refuse, and builds on what may be damaged. `PRAGMA quick_check`
reads every page: its cells, each page used once, the free list (integrity_check also matches
each index to its table, at four times the cost). It runs on a read-only connection of its own,
so a refused file is left byte-identical.

It costs about 6 ms a MiB (0.17 s for the 28.6 MB cassette of benchmarks/scale.py at 300 runs,
8.4 s for its 953 MB one at 10,000; 2 cores, loaded): a file up to CHECK_AT_OPEN is checked on
open, where a refusal stops a command before its agent starts; a larger one on a thread, while
the command starts, and the first write waits for the answer. A writer that learns its file is
damaged refuses every call after, reads too, so `record` ends saying so (what it received is in
its journal, not lost).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

# Files up to this size are checked on open (bytes): about 0.1 s.
CHECK_AT_OPEN = 16 * 1024 * 1024
# The header's read and write versions are 2 in WAL mode (SQLite file format, offsets 18-19).


class FileCheck:
    """`PRAGMA quick_check` of the file, on a connection `connect` opens read-only."""

    def __init__(self, path: Path, connect: Callable[[], sqlite3.Connection]):
        self._path = path
        self._connect = connect
        self._done = threading.Event()
        self._failure: sqlite3.DatabaseError | None = None
        self._conn: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    def begin(self) -> None:
        """Check at once for a file up to CHECK_AT_OPEN, or one not in WAL mode (opening it
        for writing switches it); else start checking on a thread.

        The file is only ever opened through SQLite: closing any other descriptor of it drops
        every POSIX lock this process holds on it, its other connections' too (reading the
        header with a file object did: a store opened and closed beside serve's left serve
        writing a WAL that the next process to close the file deleted)."""
        try:
            conn = self._connect()
        except sqlite3.DatabaseError as error:
            self._failure = error
            self._done.set()
            return
        try:
            wal = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal"
        except sqlite3.DatabaseError:
            wal = False  # checked at once: the check says what is wrong
        if self._path.stat().st_size <= CHECK_AT_OPEN or not wal:
            self._run(conn)
        else:
            thread = threading.Thread(target=self._run, args=(conn,), name="forkpoint-check")
            thread.daemon = True
            thread.start()

    def failure(self, *, wait: bool) -> sqlite3.DatabaseError | None:
        """What the check found wrong (None: nothing, or not known yet unless `wait`)."""
        if wait:
            self._done.wait()
        return self._failure

    def stop(self) -> None:
        """Interrupt a check under way (the store is closing)."""
        with self._guard:
            if self._conn is not None:
                self._conn.interrupt()

    def _run(self, conn: sqlite3.Connection) -> None:
        try:
            with self._guard:
                self._conn = conn
            found = conn.execute("PRAGMA quick_check").fetchone()
            if found is None or found[0] != "ok":
                self._failure = sqlite3.DatabaseError("database disk image is malformed")
        except sqlite3.DatabaseError as error:
            if "interrupted" not in str(error):
                self._failure = error
        finally:
            with self._guard:
                self._conn = None
            conn.close()
            self._done.set()
