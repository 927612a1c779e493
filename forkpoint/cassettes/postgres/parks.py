"""The PostgreSQL store's `ParkStore`: the SQLite cassette's `parks` and `launches` (schema
version 10 here; a claim's time, `claimed_at`, version 11), each transition one conditional
UPDATE (`park_sql`): two replicas answering one run at once both try it, the second waits on
the row's lock and then finds the row answered.

An answer or a mark notifies the schema's channel (NOTIFY, sent when its transaction commits,
the run id as payload), and `wait_for_answers` LISTENs on a connection of its own, so a replica
learns of an answer given through another within milliseconds, with no poll.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import errors, sql

from forkpoint.cassettes.manifests import BlobRow
from forkpoint.cassettes.park_rows import (
    PARK_COLUMNS,
    already_answered,
    answered_at,
    launch_from_row,
    launch_values,
    park_values,
    parks_from_rows,
    states_of,
)
from forkpoint.cassettes.park_sql import ParkSql, SqlParks
from forkpoint.cassettes.postgres.runs import PostgresRuns, blob_values
from forkpoint.cassettes.rows import EXCHANGE_COLUMNS, exchange_rows, named
from forkpoint.cassettes.store import WAKE_LEASE
from forkpoint.errors import AlreadyRecorded, CassetteError
from forkpoint.models import Exchange, Launch, Park

# The first version with parks: a reader of an older store finds none.
PARKS_FROM = 10
# Channels are the database's, not a schema's: each schema (a store) has its own.
CHANNEL = "forkpoint_answers"
_PARKS = ", ".join(PARK_COLUMNS)
_EXCHANGES = ", ".join(EXCHANGE_COLUMNS)
_BLOB = "INSERT INTO blobs VALUES (%s,%s,%s,%s) ON CONFLICT (hash) DO NOTHING"


class PostgresParks(PostgresRuns, SqlParks):
    """The runs' store with parks: its pool, packer and blobs are theirs."""

    location: str

    def _init_parks(self) -> None:
        self._sql = ParkSql("%s", self.label)
        self._channel: str | None = None
        self._listener: psycopg.Connection | None = None
        self._listening = threading.Lock()
        self._scan = True  # look for answers given before listening (first, or after a loss)
        self._reported: set[tuple[str, int]] = set()
        self._parks_closed = False

    def _has_parks(self) -> bool:
        return self._db.version >= PARKS_FROM

    def _answers_channel(self) -> str:
        """This store's channel: `forkpoint_answers:SCHEMA` (hashed past 63 bytes)."""
        if self._channel is None:
            row = self._db.run(lambda conn: conn.execute("SELECT current_schema()").fetchone())
            schema = str(row[0]) if row else "public"
            name = f"{CHANNEL}:{schema}"
            if len(name.encode()) > 63:
                name = f"{CHANNEL}:{hashlib.sha256(schema.encode()).hexdigest()[:32]}"
            self._channel = name
        return self._channel

    def set_launch(self, launch: Launch) -> None:
        values = launch_values(launch)
        columns = "run_id, command, cwd, env, needs, options, waker, on_wake"
        update = ", ".join(f"{c} = excluded.{c}" for c in columns.split(", ")[1:])

        def work(conn: psycopg.Connection) -> None:
            self._sql.run_status(conn, launch.run_id)
            conn.execute(
                f"INSERT INTO launches ({columns}) VALUES ({_marks(values)}) "  # type: ignore[arg-type]
                f"ON CONFLICT (run_id) DO UPDATE SET {update}",
                values,
            )

        self._db.run(work, write=True)

    def launch(self, run_id: str) -> Launch | None:
        if not self._has_parks():
            return None
        row = self._db.run(lambda conn: self._sql.launch(conn, run_id))
        return None if row is None else launch_from_row(row)

    def _insert_park(self, park: Park, *, parking: bool) -> None:
        new: dict[str, BlobRow] = {}
        manifest = self._packer.pack(park.request.request_body, None, new, self._stored)
        values = named(park_values(park, manifest))
        run_id, step = park.run_id, park.step
        taken = AlreadyRecorded(
            f"{self.label} already holds run {run_id} step {step}, parked or answered: it is "
            "never rewritten", run_id=run_id, step=step,
        )  # fmt: skip

        def work(conn: psycopg.Connection) -> None:
            self._sql.run_status(conn, run_id)
            if parking and self._sql.has_exchange(conn, run_id, step):
                raise taken
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, blob_values(new.values()))
                try:
                    with conn.transaction():
                        cursor.execute(
                            f"INSERT INTO parks ({_PARKS}) VALUES ({_marks(values)})",  # type: ignore[arg-type]
                            values,
                        )
                except errors.UniqueViolation:
                    raise taken from None
            if parking:
                self._sql.mark_parked(conn, run_id)

        self._db.run(work, write=True)
        self._packer.committed(new.values())

    def _run_parks(self, rows: Callable[[Any, str], Any], run_id: str) -> list[Park]:
        if not self._has_parks():
            return []
        return self._db.run(lambda conn: parks_from_rows(rows(conn, run_id), self._fetcher(conn)))

    def parks(
        self,
        *,
        states: Sequence[str] = ("parked",),
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:
        states_of(states)  # a state that is none is an error in any store
        if not self._has_parks():
            return []
        return self._db.run(
            lambda conn: parks_from_rows(
                self._sql.page(conn, states, limit, after), self._fetcher(conn)
            )
        )

    def answer(self, exchange: Exchange, *, by: str) -> Park:
        new, rows = exchange_rows([exchange], self._packer, self._stored)
        run_id, step = exchange.run_id, exchange.step
        channel = self._answers_channel()

        def work(conn: psycopg.Connection) -> Park:
            self._sql.check_waiting(conn, run_id, step, answered=False)
            self._answered(conn, run_id, step, by, answered=False)
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, blob_values(new.values()))
                for values, chunks in rows:
                    try:
                        cursor.execute(
                            f"INSERT INTO exchanges ({_EXCHANGES}) VALUES ({_marks(values)})",  # type: ignore[arg-type]
                            named(values),
                        )
                    except errors.UniqueViolation:  # its upstream answered it meanwhile
                        raise already_answered(run_id, step, None, answered_at(exchange)) from None
                    if chunks:
                        cursor.executemany("INSERT INTO chunks VALUES (%s,%s,%s,%s,%s,%s)", chunks)
            conn.execute("SELECT pg_notify(%s, %s)", (channel, run_id))
            return parks_from_rows(self._sql.park(conn, run_id, step), self._fetcher(conn))[0]

        try:
            park = self._db.run(work, write=True)
        except BaseException:
            self._packer.failed()
            raise
        self._packer.committed(new.values())
        return park

    def mark_answered(self, run_id: str, step: int, *, by: str) -> Park:
        channel = self._answers_channel()

        def work(conn: psycopg.Connection) -> Park:
            self._sql.check_waiting(conn, run_id, step, answered=True)
            if self._sql.has_exchange(conn, run_id, step) is None:
                raise CassetteError(
                    f"run {run_id} step {step} has no exchange in {self.label} yet: "
                    "store its answer first", run_id=run_id, step=step,
                )  # fmt: skip
            self._answered(conn, run_id, step, by, answered=True)
            conn.execute("SELECT pg_notify(%s, %s)", (channel, run_id))
            return parks_from_rows(self._sql.park(conn, run_id, step), self._fetcher(conn))[0]

        return self._db.run(work, write=True)

    def _answered(
        self, conn: psycopg.Connection, run_id: str, step: int, by: str, *, answered: bool
    ) -> None:
        """parked -> answered (checked so a moment ago), or the error saying why not: a writer
        that answered it since holds the row, so this UPDATE waits for it, then finds the row
        answered."""
        if not self._sql.answered(conn, run_id, step, by, time.time()):
            self._sql.check_waiting(conn, run_id, step, answered=answered)  # the winner's
            raise CassetteError(f"run {run_id} step {step} changed while it was answered")

    def due(self, now: float, *, limit: int = 100) -> list[Park]:
        if not self._has_parks():
            return []
        return self._db.run(
            lambda conn: parks_from_rows(self._sql.due(conn, now, limit), self._fetcher(conn))
        )

    def claim_wake(self, run_id: str, step: int, *, by: str, lease: float = WAKE_LEASE) -> bool:
        return self._db.run(
            lambda conn: self._sql.claim(conn, run_id, step, by, time.time(), lease), write=True
        )

    def woke(self, run_id: str, step: int) -> None:
        self._db.run(lambda conn: self._sql.woke(conn, run_id, step, time.time()), write=True)

    def wait_for_answers(self, timeout: float) -> list[str]:
        """The runs answered since the last call, told by NOTIFY as each answer commits; the
        first call (and the first after a lost connection) also returns those answered before
        it listened, so none is missed between a scan and the listen."""
        deadline = time.monotonic() + timeout
        with self._listening:
            if self._parks_closed:
                raise CassetteError(f"the store {self.label} is closed")
            try:
                listener = self._listen()
                news = self._answered_before() if self._scan else []
                self._scan = False
                if not news:
                    left = max(0.0, deadline - time.monotonic())
                    news = [n.payload for n in listener.notifies(timeout=left, stop_after=1)]
                    news += [n.payload for n in listener.notifies(timeout=0.0)]
            except psycopg.OperationalError:
                self._drop_listener()  # told nothing since: the next call scans again
                time.sleep(max(0.0, min(0.5, deadline - time.monotonic())))
                return []
            finally:
                if self._parks_closed:
                    self._drop_listener()
            return list(dict.fromkeys(news))

    def _listen(self) -> psycopg.Connection:
        if self._listener is None:
            channel = self._answers_channel()
            self._listener = psycopg.connect(self.location, autocommit=True, connect_timeout=5)
            self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            self._scan = True
        return self._listener

    def _answered_before(self) -> list[str]:
        if not self._has_parks():
            return []
        answered = {(r, int(s)) for r, s in self._db.run(self._sql.answered_keys)}
        self._reported &= answered
        news = sorted(answered - self._reported)
        self._reported |= set(news)
        return [run_id for run_id, _ in news]

    def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()

    def _close_parks(self) -> None:
        """Close the listener, now if no one waits on it, else as its wait ends."""
        self._parks_closed = True
        if self._listening.acquire(blocking=False):
            try:
                self._drop_listener()
            finally:
                self._listening.release()


def _marks(values: Sequence[object]) -> str:
    return ",".join("%s" for _ in values)
