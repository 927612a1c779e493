"""The SQL both stores park, answer and wake with, each transition one conditional UPDATE
(`... WHERE state = 'parked' RETURNING`): of two writers, the second finds the row changed and
changes nothing. SQLite runs them under its write lock (BEGIN IMMEDIATE), PostgreSQL under the
row's lock, re-read once the first writer commits; either way one wins, across processes.

Written once with `?` for a parameter; `ParkSql` puts the store's own mark in its place.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from forkpoint.cassettes.park_rows import (
    DUE_WHERE,
    LAUNCH_COLUMNS,
    PARK_COLUMNS,
    STATE_WHERE,
    already_answered,
    not_parked,
    states_of,
)
from forkpoint.errors import RunNotFound
from forkpoint.models import Park, ParkState, RunStatus

_PARKS = ", ".join(PARK_COLUMNS)
_LAUNCHES = ", ".join(LAUNCH_COLUMNS)
Row = Sequence[Any]


class Sql(Protocol):
    """A connection of either store: sqlite3's or psycopg's."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...


class ParkSql:
    """The queries, for a store whose parameter mark is `mark` (`?` or `%s`), named `label`."""

    def __init__(self, mark: str, label: str):
        self.mark = mark
        self.label = label

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.mark)

    def _rows(self, conn: Sql, sql: str, params: Sequence[object] = ()) -> list[Row]:
        return list(conn.execute(self._q(sql), params).fetchall())

    def _row(self, conn: Sql, sql: str, params: Sequence[object] = ()) -> Row | None:
        row: Row | None = conn.execute(self._q(sql), params).fetchone()
        return row

    # reads

    def newest(self, conn: Sql, run_id: str) -> list[Row]:
        """The run's newest park, whatever its state (off the primary key)."""
        return self._rows(
            conn,
            f"SELECT {_PARKS} FROM parks WHERE run_id = ? ORDER BY step DESC LIMIT 1",
            (run_id,),
        )

    def of_run(self, conn: Sql, run_id: str) -> list[Row]:
        """Every park of the run, by step."""
        return self._rows(
            conn, f"SELECT {_PARKS} FROM parks WHERE run_id = ? ORDER BY step", (run_id,)
        )

    def pending(self, conn: Sql, run_id: str) -> list[Row]:
        """The run's newest park not woken (a key read: a run has few parks)."""
        return self._rows(
            conn,
            f"SELECT {_PARKS} FROM parks WHERE run_id = ? AND state <> 'woken' "
            "ORDER BY step DESC LIMIT 1",
            (run_id,),
        )

    def page(
        self, conn: Sql, states: Sequence[str], limit: int | None, after: str | None
    ) -> list[Row]:
        """Parks in `states` by (run, step), read per state off its index, then merged."""
        found = []
        for state in states_of(states):
            where = STATE_WHERE[state] + ("" if after is None else " AND run_id > ?")
            params: list[object] = [] if after is None else [after]
            tail = ""
            if limit is not None:
                tail, params = " LIMIT ?", [*params, limit]
            found.append(
                self._rows(
                    conn,
                    f"SELECT {_PARKS} FROM parks WHERE {where} ORDER BY run_id, step{tail}",
                    params,
                )
            )
        merged = list(heapq.merge(*found, key=lambda row: (row[0], row[1])))
        return merged if limit is None else merged[:limit]

    def due(self, conn: Sql, now: float, limit: int) -> list[Row]:
        return self._rows(
            conn,
            f"SELECT {_PARKS} FROM parks WHERE {DUE_WHERE} AND deadline <= ? "
            "ORDER BY deadline, run_id LIMIT ?",
            (now, limit),
        )

    def park(self, conn: Sql, run_id: str, step: int) -> list[Row]:
        return self._rows(
            conn, f"SELECT {_PARKS} FROM parks WHERE run_id = ? AND step = ?", (run_id, step)
        )

    def launch(self, conn: Sql, run_id: str) -> Row | None:
        return self._row(conn, f"SELECT {_LAUNCHES} FROM launches WHERE run_id = ?", (run_id,))

    # checks, inside the writer's transaction

    def run_status(self, conn: Sql, run_id: str) -> str:
        row = self._row(conn, "SELECT status FROM runs WHERE id = ?", (run_id,))
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return str(row[0])

    def has_exchange(self, conn: Sql, run_id: str, step: int) -> Row | None:
        """(started_at, duration_ms) of the step's exchange, if it has one."""
        return self._row(
            conn,
            "SELECT started_at, duration_ms FROM exchanges WHERE run_id = ? AND step = ?",
            (run_id, step),
        )

    def check_waiting(self, conn: Sql, run_id: str, step: int, *, answered: bool) -> None:
        """Raise unless (run, step) is parked and unanswered: RunNotFound, NotParked, or
        AlreadyAnswered naming the first answer. With `answered`, the step's exchange is the
        answer being marked; without, an exchange there is an answer given already."""
        status = self.run_status(conn, run_id)
        # The exchange is read before the park: each statement of a PostgreSQL transaction
        # sees what committed before it, so a park read after it still `parked` means the
        # exchange found is no answer given meanwhile (the answer commits both at once).
        found = None if answered else self.has_exchange(conn, run_id, step)
        row = self._row(
            conn,
            "SELECT state, answered_by, answered_at FROM parks WHERE run_id = ? AND step = ?",
            (run_id, step),
        )
        if row is None:
            waiting = self._rows(
                conn,
                f"SELECT step FROM parks WHERE {STATE_WHERE[ParkState.PARKED]} AND run_id = ? "
                "ORDER BY step",
                (run_id,),
            )
            raise not_parked(run_id, step, status, [int(r[0]) for r in waiting])
        if row[0] != ParkState.PARKED:
            raise already_answered(run_id, step, row[1], row[2])
        if found is not None:
            raise already_answered(run_id, step, None, found[0] + (found[1] or 0.0) / 1000)

    # transitions

    def mark_parked(self, conn: Sql, run_id: str) -> None:
        conn.execute(
            self._q("UPDATE runs SET status = ?, ended_at = NULL WHERE id = ?"),
            (RunStatus.PARKED, run_id),
        )

    def answered(self, conn: Sql, run_id: str, step: int, by: str, at: float) -> bool:
        """parked -> answered; False when another writer answered it first."""
        row = self._row(
            conn,
            "UPDATE parks SET state = 'answered', answered_at = ?, answered_by = ? "
            "WHERE run_id = ? AND step = ? AND state = 'parked' RETURNING step",
            (at, by, run_id, step),
        )
        return row is not None

    def claim(self, conn: Sql, run_id: str, step: int, by: str, at: float, lease: float) -> bool:
        """answered -> waking, for exactly one caller; or waking -> waking again, for a claim
        older than `lease` seconds whose run recorded nothing after the parked step (its waker
        died before the agent got anywhere: a claim made before claims had a time counts as
        old). The second writer finds the row claimed now, and changes nothing."""
        row = self._row(
            conn,
            "UPDATE parks SET state = 'waking', claimed_by = ?, claimed_at = ? "
            "WHERE run_id = ? AND step = ? AND (state = 'answered' OR (state = 'waking' "
            "AND (claimed_at IS NULL OR claimed_at <= ?) "
            "AND NOT EXISTS (SELECT 1 FROM exchanges e WHERE e.run_id = parks.run_id "
            "AND e.step > parks.step) "
            "AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.run_id = parks.run_id "
            "AND s.step > parks.step))) RETURNING step",
            (by, at, run_id, step, at - lease),
        )
        return row is not None

    def woke(self, conn: Sql, run_id: str, step: int, at: float) -> None:
        """waking -> woken, and the run runs again (unless its woken agent's resume has moved
        it on already: running, or even ended); NotParked for a park not being woken."""
        row = self._row(
            conn,
            "UPDATE parks SET state = 'woken', woken_at = ? "
            "WHERE run_id = ? AND step = ? AND state = 'waking' RETURNING step",
            (at, run_id, step),
        )
        if row is None:
            raise not_parked(run_id, step, self.run_status(conn, run_id), [])
        conn.execute(
            self._q(
                "UPDATE runs SET status = ?, ended_at = NULL, error = NULL "
                "WHERE id = ? AND status = ?"
            ),
            (RunStatus.RUNNING, run_id, RunStatus.PARKED),
        )

    def answered_keys(self, conn: Sql) -> list[Row]:
        """(run, step) of every answered park not yet claimed, off its index."""
        return self._rows(
            conn,
            f"SELECT run_id, step FROM parks WHERE {STATE_WHERE[ParkState.ANSWERED]} "
            "ORDER BY run_id, step",
        )


class SqlParks(ABC):
    """The park verbs both SQL stores share, over each store's own write and read of parks."""

    _sql: ParkSql

    def park(self, park: Park) -> None:
        self._insert_park(park, parking=True)

    def add_park(self, park: Park) -> None:
        self._insert_park(park, parking=False)

    def parked(self, run_id: str) -> Park | None:
        return next(iter(self._run_parks(self._sql.pending, run_id)), None)

    def last_park(self, run_id: str) -> Park | None:
        return next(iter(self._run_parks(self._sql.newest, run_id)), None)

    def run_parks(self, run_id: str) -> list[Park]:
        return self._run_parks(self._sql.of_run, run_id)

    @abstractmethod
    def _insert_park(self, park: Park, *, parking: bool) -> None:
        """Store `park`; `parking` a new one: its step holds no exchange yet, and the run is
        marked parked in the same transaction."""

    @abstractmethod
    def _run_parks(self, rows: Callable[[Sql, str], list[Row]], run_id: str) -> list[Park]:
        """The parks `rows` finds for the run (its pending one, its newest, all of them)."""
