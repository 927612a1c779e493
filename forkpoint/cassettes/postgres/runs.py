"""The PostgreSQL store's `RunStore`: the SQLite cassette's tables and rows (see
`cassettes.sqlite.runs`), in a database many proxies share. Bodies are cut and packed as in
SQLite (`manifests.Packer`), into the same segments, but each blob compressed on its own and
named by its hash in `blobs`, as the SQLite cassette did before its schema 12; `number` takes
a row lock on the run, so replicas serving one run take its steps one after another."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import psycopg
from psycopg import errors

from forkpoint.cassettes.blobs import decompress
from forkpoint.cassettes.manifests import BlobRow, Fetch, Key, Packer, StoredBlob
from forkpoint.cassettes.postgres.connection import Database
from forkpoint.cassettes.rows import (
    EXCHANGE_COLUMNS,
    RUN_COLUMNS,
    SNAPSHOT_COLUMNS,
    dump_json,
    exchange_rows,
    exchange_select,
    exchanges_from_rows,
    like_prefix,
    named,
    piece_bytes,
    piece_rows,
    readable,
    response_key,
    run_from_row,
    run_select,
    run_values,
    snapshot_values,
    snapshots_from_rows,
)
from forkpoint.errors import AlreadyRecorded, CassetteError, RunNotFound
from forkpoint.models import Blob, Ending, Exchange, Piece, Run, RunStatus, Snapshot

_RUNS = ", ".join(RUN_COLUMNS)
_EXCHANGES = ", ".join(EXCHANGE_COLUMNS)
_SNAPSHOTS = ", ".join(SNAPSHOT_COLUMNS)
_BLOB = "INSERT INTO blobs VALUES (%s,%s,%s,%s) ON CONFLICT (hash) DO NOTHING"


def blob_values(rows: Iterable[BlobRow]) -> list[tuple[str, int, str, bytes]]:
    """The `blobs` rows: each compressed on its own (a PostgreSQL store's packer makes no
    deltas), named by its hash."""
    return [row[:4] for row in rows]


class PostgresRuns:
    _db: Database
    _packer: Packer
    label: str

    # runs

    def create_run(self, run: Run) -> None:
        def work(conn: psycopg.Connection) -> None:
            try:
                conn.execute(f"INSERT INTO runs ({_RUNS}) VALUES ({_marks(RUN_COLUMNS)})",
                             run_values(run))  # type: ignore[arg-type]  # fmt: skip
            except errors.UniqueViolation:
                raise AlreadyRecorded(f"{self.label} already has a run {run.id}",
                                      run_id=run.id) from None  # fmt: skip
            except errors.ForeignKeyViolation:
                raise CassetteError(
                    f"{self.label} has no run {run.parent_id}, the parent of run {run.id}",
                    run_id=run.id,
                ) from None

        self._db.run(work, write=True)

    def finish_run(
        self, run_id: str, status: RunStatus, *, error: str | None = None,
        fork_step: int | None = None, owner: str | None = None,
    ) -> None:  # fmt: skip
        ended = None if status is RunStatus.RUNNING else time.time()
        changed = self._db.run(
            lambda conn: (
                conn.execute(
                    "UPDATE runs SET status=%s, ended_at=%s, error=%s, "
                    "fork_step=coalesce(%s, fork_step), owner=coalesce(%s, owner) WHERE id=%s",
                    (status, ended, error, fork_step, owner, run_id),
                ).rowcount
            ),
            write=True,
        )
        if not changed:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)

    @property
    def _selected(self) -> str:
        """SELECT the run columns FROM runs: those the database's version has."""
        return f"SELECT {run_select('postgres', self._db.version)} FROM runs"

    def get_run(self, run_id: str) -> Run:
        query = f"{self._selected} WHERE id=%s"
        row = self._db.run(lambda conn: conn.execute(query, (run_id,)).fetchone())
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return run_from_row(row)

    def find_run(self, ref: str) -> Run:
        selected = self._selected

        def work(conn: psycopg.Connection) -> list[tuple[object, ...]]:
            rows = conn.execute(f"{selected} WHERE id=%s", (ref,)).fetchall()
            if not rows:
                rows = conn.execute(
                    f"{selected} WHERE name=%s ORDER BY id DESC LIMIT 1", (ref,)
                ).fetchall()
            if not rows and len(ref) >= 4:
                rows = conn.execute(
                    f"{selected} WHERE id ILIKE %s LIMIT 2", (like_prefix(ref),)
                ).fetchall()
            return rows

        rows = self._db.run(work)
        if len(rows) == 1:
            return run_from_row(rows[0])
        if len(rows) > 1:
            raise RunNotFound(f"{ref!r} matches several runs; give more of the id", run_id=ref)
        raise RunNotFound(f"no run {ref!r} in {self.label} (see: forkpoint runs)", run_id=ref)

    def list_runs(
        self, *, newest: int | None = None, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        if newest is None:
            query = f"{self._selected} ORDER BY id"
            rows = self._db.run(lambda conn: conn.execute(query).fetchall())
        else:
            query = f"{self._selected} ORDER BY id DESC LIMIT %s"
            rows = self._db.run(lambda conn: conn.execute(query, (newest,)).fetchall())[::-1]
        return readable(rows, run_from_row, damaged)

    def numbered(self, run_id: str) -> dict[int, int]:
        """The tickets of the run the store has numbered, with their steps (a read)."""
        if self._db.version < 4:  # read as it is: no run had tickets then
            return {}
        query = "SELECT ticket, step FROM tickets WHERE run_id=%s"
        return dict(self._db.run(lambda conn: conn.execute(query, (run_id,)).fetchall()))

    def step_count(self, run_id: str) -> int:
        row = self._db.run(lambda conn: conn.execute(
            "SELECT count(*) FROM exchanges WHERE run_id=%s", (run_id,)).fetchone())  # fmt: skip
        return int(row[0]) if row else 0

    def next_step(self, run_id: str) -> int:
        row = self._db.run(
            lambda conn: conn.execute(
                "SELECT greatest(coalesce((SELECT max(step) + 1 FROM exchanges "
                "WHERE run_id = %s), 0), coalesce((SELECT next_step FROM runs WHERE id = %s), 0))",
                (run_id, run_id),
            ).fetchone()
        )
        return int(row[0]) if row else 0

    def number(self, run_id: str, tickets: Sequence[int]) -> dict[int, int]:
        """One transaction under the run's row lock: the steps the tickets hold, and for
        each new one the run's counter (or the step after its highest stored one)."""

        def numbered(conn: psycopg.Connection) -> dict[int, int]:
            counter = conn.execute(
                "SELECT greatest(next_step, coalesce((SELECT max(step) + 1 FROM exchanges "
                "WHERE run_id = %s), 0)) FROM runs WHERE id = %s FOR UPDATE",
                (run_id, run_id),
            ).fetchone()
            if counter is None:
                raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
            query = "SELECT ticket, step FROM tickets WHERE run_id = %s AND ticket = ANY(%s)"
            steps: dict[int, int] = dict(conn.execute(query, (run_id, list(tickets))).fetchall())
            new = [ticket for ticket in dict.fromkeys(tickets) if ticket not in steps]
            if not new:
                return steps
            first = int(counter[0])
            rows = [(run_id, ticket, first + index) for index, ticket in enumerate(new)]
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO tickets VALUES (%s, %s, %s)", rows)
            conn.execute("UPDATE runs SET next_step = %s WHERE id = %s",
                         (first + len(new), run_id))  # fmt: skip
            return {**steps, **{ticket: step for _, ticket, step in rows}}

        return self._db.run(numbered, write=True)

    def end_run(self, ending: Ending) -> None:
        def ended(conn: psycopg.Connection) -> bool:
            if conn.execute("SELECT 1 FROM runs WHERE id = %s", (ending.run_id,)).fetchone():
                change = None if ending.change is None else dump_json(ending.change)
                conn.execute(
                    "UPDATE runs SET status=%s, ended_at=%s, error=%s, fork_step=coalesce(%s, "
                    "fork_step), change=coalesce(%s, change) WHERE id=%s AND status=%s",
                    (ending.status, ending.ended_at, ending.error, ending.fork_step, change,
                     ending.run_id, RunStatus.RUNNING),
                )  # fmt: skip
                return True
            return False

        if not self._db.run(ended, write=True):
            raise RunNotFound(f"no run {ending.run_id!r} in {self.label}", run_id=ending.run_id)

    # exchanges

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        try:  # a failure packing them forgets what was packed too: it is not stored
            new, rows = exchange_rows(exchanges, self._packer, self._stored)
        except BaseException:
            self._packer.failed()
            raise

        def work(conn: psycopg.Connection) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, blob_values(new.values()))
                for values, chunks in rows:
                    run_id, step = str(values[0]), int(str(values[1]))
                    try:
                        with conn.transaction():  # a savepoint: the error names its step
                            cursor.execute(
                                f"INSERT INTO exchanges ({_EXCHANGES}) VALUES ({_marks(values)})",
                                named(values),  # type: ignore[arg-type]
                            )
                    except errors.UniqueViolation:
                        raise AlreadyRecorded(
                            f"{self.label} already holds run {run_id} step {step}: it is "
                            "never rewritten", run_id=run_id, step=step,
                        ) from None  # fmt: skip
                    except errors.ForeignKeyViolation:
                        raise CassetteError(f"no run {run_id} in {self.label} for step {step}",
                                            run_id=run_id, step=step) from None  # fmt: skip
                    if chunks:
                        cursor.executemany("INSERT INTO chunks VALUES (%s,%s,%s,%s,%s,%s)", chunks)

        try:
            self._db.run(work, write=True)
        except BaseException:
            self._packer.failed()
            raise
        self._packer.committed(new.values())

    def add_pieces(self, blobs: Iterable[Blob]) -> None:
        rows = blob_values(piece_rows(blobs, self._stored))
        if rows:
            self._db.run(lambda conn: conn.cursor().executemany(_BLOB, rows), write=True)

    def piece(self, piece: Piece) -> bytes:
        row = self._db.run(lambda conn: conn.execute(
            "SELECT codec, data FROM blobs WHERE hash=%s", (piece.digest,)).fetchone())  # fmt: skip
        return piece_bytes(
            piece, lambda: None if row is None else decompress(row[0], bytes(row[1])), self.label
        )

    def _stored(self, digest: str) -> bool:
        row = self._db.run(lambda conn: conn.execute(
            "SELECT 1 FROM blobs WHERE hash=%s", (digest,)).fetchone())  # fmt: skip
        return row is not None

    @staticmethod
    def _fetcher(conn: psycopg.Connection) -> Fetch:
        def fetch(keys: list[Key]) -> list[StoredBlob]:
            hashes = [k for k in keys if isinstance(k, str)]  # a number names nothing here
            return conn.execute(  # type: ignore[return-value]
                "SELECT hash, codec, data, NULL, NULL FROM blobs WHERE hash = ANY(%s)", (hashes,)
            ).fetchall()

        return fetch

    def response_keys(self, run_id: str) -> dict[int, str]:
        key = response_key("postgres", self._db.version)
        query = f"SELECT step, {key} FROM exchanges WHERE run_id=%s"
        rows = self._db.run(lambda conn: conn.execute(query, (run_id,)).fetchall())
        return dict(rows)

    def exchanges(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        def work(conn: psycopg.Connection) -> list[Exchange]:
            rows = conn.execute(
                f"SELECT {exchange_select('postgres', self._db.version)} FROM exchanges "
                f"WHERE run_id=%s ORDER BY step",
                (run_id,),
            ).fetchall()
            sizes = conn.execute(
                'SELECT step, offset_ms, size FROM chunks WHERE run_id=%s AND "end"=0 '
                "ORDER BY step, seq",
                (run_id,),
            ).fetchall()
            return exchanges_from_rows(rows, sizes, self._fetcher(conn), bodies=bodies,
                                       damaged=damaged)  # fmt: skip

        return self._db.run(work)

    # snapshots

    def add_snapshot(self, snapshot: Snapshot) -> None:
        new: dict[str, BlobRow] = {}
        manifest = self._packer.pack(snapshot.data, snapshot.content_type, new, self._stored)
        values = named(snapshot_values(snapshot, manifest))

        def work(conn: psycopg.Connection) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, blob_values(new.values()))
                try:
                    cursor.execute(
                        f"INSERT INTO snapshots ({_SNAPSHOTS}) VALUES ({_marks(values)}) "
                        "ON CONFLICT (run_id, step, adapter) DO UPDATE SET "
                        + ", ".join(f"{c} = excluded.{c}" for c in SNAPSHOT_COLUMNS[3:]),
                        values,  # type: ignore[arg-type]
                    )
                except errors.ForeignKeyViolation:
                    raise CassetteError(
                        f"no run {snapshot.run_id} in {self.label} for a snapshot",
                        run_id=snapshot.run_id, step=snapshot.step,
                    ) from None  # fmt: skip

        self._db.run(work, write=True)
        self._packer.committed(new.values())

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        return self._db.run(lambda conn: self._snapshots(conn, run_id, data=data))

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        limit = at_most if at_most is not None else 2**31 - 1
        return self._db.run(lambda conn: self._snapshots(conn, run_id, newest_to=limit))

    def _snapshots(
        self, conn: psycopg.Connection, run_id: str, *, data: bool = True,
        newest_to: int | None = None,
    ) -> list[Snapshot]:  # fmt: skip
        """A run's snapshots; with `newest_to`, each adapter's newest good one up to that
        step. Only the states returned are loaded."""
        where = "" if newest_to is None else "AND error IS NULL AND step <= %s"
        rows = conn.execute(
            f"SELECT {_SNAPSHOTS} FROM snapshots WHERE run_id=%s {where} ORDER BY step, adapter",
            (run_id,) if newest_to is None else (run_id, newest_to),
        ).fetchall()
        if newest_to is not None:
            rows = list({row[2]: row for row in rows}.values())
        return snapshots_from_rows(rows, self._fetcher(conn), data=data)


def _marks(values: Iterable[object]) -> str:
    return ",".join("%s" for _ in values)
