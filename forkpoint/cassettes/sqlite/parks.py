"""The SQLite cassette's `ParkStore`: `parks` and `launches` (schema version 11; a claim's
time, `claimed_at`, version 13), each
transition one conditional UPDATE inside a write transaction (BEGIN IMMEDIATE holds the file's
write lock, so of two processes one makes it and the other then finds it made). Waiters poll
the answered parks' index: SQLite tells no one of a commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from forkpoint.cassettes.manifests import BlobRow
from forkpoint.cassettes.park_rows import (
    PARK_COLUMNS,
    launch_from_row,
    launch_values,
    park_values,
    parks_from_rows,
    states_of,
)
from forkpoint.cassettes.park_sql import ParkSql, SqlParks
from forkpoint.cassettes.rows import exchange_rows, named
from forkpoint.cassettes.sqlite.runs import SqliteRuns
from forkpoint.cassettes.store import WAKE_LEASE
from forkpoint.errors import AlreadyRecorded, CassetteError
from forkpoint.models import Exchange, Launch, Park

# The first version with parks: a reader of an older file finds none.
PARKS_FROM = 11
# How often a waiter for answers looks (seconds): a read of an index, most often empty.
POLL = 0.05


class SqliteParks(SqliteRuns, SqlParks):
    """The runs' store with parks: its connection, packer and exchange writes are theirs."""

    def _init_parks(self) -> None:
        self._sql = ParkSql("?", str(self.path))
        self._reported: set[tuple[str, int]] = set()  # answers `wait_for_answers` told of
        self._waiting_lock = threading.Lock()

    def _has_parks(self) -> bool:
        return self._db.version >= PARKS_FROM

    def set_launch(self, launch: Launch) -> None:
        values = launch_values(launch)
        with self._db.writing() as conn:
            self._sql.run_status(conn, launch.run_id)
            conn.execute(f"INSERT OR REPLACE INTO launches VALUES ({_marks(values)})", values)

    def launch(self, run_id: str) -> Launch | None:
        if not self._has_parks():
            return None
        with self._db.reading() as conn:
            row = self._sql.launch(conn, run_id)
        return None if row is None else launch_from_row(row)

    def _insert_park(self, park: Park, *, parking: bool) -> None:
        new: dict[str, BlobRow] = {}
        manifest = self._packer.pack(park.request.request_body, None, new, self._stored)
        values = park_values(park, manifest, compact=True)
        with self._db.writing() as conn:
            self._sql.run_status(conn, park.run_id)
            if self._sql.park(conn, park.run_id, park.step) or (
                parking and self._sql.has_exchange(conn, park.run_id, park.step)
            ):
                raise AlreadyRecorded(
                    f"{self.path} already holds run {park.run_id} step {park.step}, parked or "
                    "answered: it is never rewritten",
                    run_id=park.run_id, step=park.step,
                )  # fmt: skip
            namer = self._insert_blobs(conn, new.values())
            columns = ", ".join(PARK_COLUMNS)
            conn.execute(f"INSERT INTO parks ({columns}) VALUES ({_marks(values)})",
                         named(values, namer))  # fmt: skip
            if parking:
                self._sql.mark_parked(conn, park.run_id)
        self._packer.committed(new.values(), namer.numbers)

    def _run_parks(self, rows: Callable[[Any, str], Any], run_id: str) -> list[Park]:
        if not self._has_parks():
            return []
        with self._db.reading() as conn:
            return parks_from_rows(rows(conn, run_id), self._fetcher(conn))

    def parks(
        self,
        *,
        states: Sequence[str] = ("parked",),
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:
        if not self._has_parks():
            states_of(states)  # a state that is none is an error in any file
            return []
        with self._db.reading() as conn:
            rows = self._sql.page(conn, states, limit, after)
            return parks_from_rows(rows, self._fetcher(conn))

    def answer(self, exchange: Exchange, *, by: str) -> Park:
        new, rows = exchange_rows([exchange], self._packer, self._stored)
        run_id, step = exchange.run_id, exchange.step
        try:
            with self._db.writing() as conn:
                self._sql.check_waiting(conn, run_id, step, answered=False)
                namer = self._insert_blobs(conn, new.values())
                for values, chunks in rows:
                    self._insert_exchange(conn, named(values, namer), chunks)
                self._sql.answered(conn, run_id, step, by, time.time())
                park = parks_from_rows(self._sql.park(conn, run_id, step), self._fetcher(conn))
        except BaseException:
            self._packer.failed()
            raise
        self._packer.committed(new.values(), namer.numbers)
        return park[0]

    def mark_answered(self, run_id: str, step: int, *, by: str) -> Park:
        with self._db.writing() as conn:
            self._sql.check_waiting(conn, run_id, step, answered=True)
            if self._sql.has_exchange(conn, run_id, step) is None:
                raise CassetteError(
                    f"run {run_id} step {step} has no exchange in {self.path} yet: "
                    "store its answer first", run_id=run_id, step=step,
                )  # fmt: skip
            self._sql.answered(conn, run_id, step, by, time.time())
            return parks_from_rows(self._sql.park(conn, run_id, step), self._fetcher(conn))[0]

    def due(self, now: float, *, limit: int = 100) -> list[Park]:
        if not self._has_parks():
            return []
        with self._db.reading() as conn:
            return parks_from_rows(self._sql.due(conn, now, limit), self._fetcher(conn))

    def claim_wake(self, run_id: str, step: int, *, by: str, lease: float = WAKE_LEASE) -> bool:
        with self._db.writing() as conn:
            return self._sql.claim(conn, run_id, step, by, time.time(), lease)

    def woke(self, run_id: str, step: int) -> None:
        with self._db.writing() as conn:
            self._sql.woke(conn, run_id, step, time.time())

    def wait_for_answers(self, timeout: float) -> list[str]:
        """The runs of parks answered that this store has not told of yet (those answered
        before the first call included), looking every POLL seconds for up to `timeout`."""
        deadline = time.monotonic() + timeout
        with self._waiting_lock:
            while True:
                answered: set[tuple[str, int]] = set()
                if self._has_parks():
                    with self._db.reading() as conn:
                        answered = {(r, int(s)) for r, s in self._sql.answered_keys(conn)}
                self._reported &= answered  # a park claimed since is no longer news
                news = sorted(answered - self._reported)
                left = deadline - time.monotonic()
                if news or left <= 0:
                    self._reported |= set(news)
                    return list(dict.fromkeys(run_id for run_id, _ in news))
                time.sleep(min(POLL, left))


def _marks(values: Sequence[object]) -> str:
    return ",".join("?" for _ in values)
