"""The PostgreSQL store's `RunStore`: the SQLite cassette's tables and rows (see
`cassettes.sqlite.runs`), in a database many proxies share. Bodies are packed as in SQLite
(`manifests.Packer`), so both stores hold the same blobs and manifests; `allocate_step` takes
a row lock on the run, so replicas serving one run take its steps one after another."""

from __future__ import annotations

import time
from collections.abc import Iterable

import psycopg
from psycopg import errors

from forkpoint.cassettes.manifests import BlobRow, Packer
from forkpoint.cassettes.postgres.connection import Database
from forkpoint.cassettes.rows import (
    EXCHANGE_COLUMNS,
    RUN_COLUMNS,
    SNAPSHOT_COLUMNS,
    Fetch,
    exchange_rows,
    exchange_select,
    exchanges_from_rows,
    like_prefix,
    piece_bytes,
    piece_rows,
    readable,
    response_key,
    run_from_row,
    run_values,
    snapshot_values,
    snapshots_from_rows,
)
from forkpoint.errors import AlreadyRecorded, CassetteError, RunNotFound
from forkpoint.models import Blob, Exchange, Piece, Run, RunStatus, Snapshot

_RUNS = ", ".join(RUN_COLUMNS)
_EXCHANGES = ", ".join(EXCHANGE_COLUMNS)
_SNAPSHOTS = ", ".join(SNAPSHOT_COLUMNS)
_BLOB = "INSERT INTO blobs VALUES (%s,%s,%s,%s) ON CONFLICT (hash) DO NOTHING"
# How long a request waits for its step while the server is away (seconds): the live path.
ALLOCATE_WAITS = 5.0


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
        fork_step: int | None = None,
    ) -> None:  # fmt: skip
        ended = None if status is RunStatus.RUNNING else time.time()
        changed = self._db.run(
            lambda conn: (
                conn.execute(
                    "UPDATE runs SET status=%s, ended_at=%s, error=%s, "
                    "fork_step=coalesce(%s, fork_step) WHERE id=%s",
                    (status, ended, error, fork_step, run_id),
                ).rowcount
            ),
            write=True,
        )
        if not changed:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)

    def get_run(self, run_id: str) -> Run:
        row = self._db.run(
            lambda conn: conn.execute(f"SELECT {_RUNS} FROM runs WHERE id=%s", (run_id,)).fetchone()
        )
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return run_from_row(row)

    def find_run(self, ref: str) -> Run:
        def work(conn: psycopg.Connection) -> list[tuple[object, ...]]:
            rows = conn.execute(f"SELECT {_RUNS} FROM runs WHERE id=%s", (ref,)).fetchall()
            if not rows:
                rows = conn.execute(
                    f"SELECT {_RUNS} FROM runs WHERE name=%s ORDER BY id DESC LIMIT 1", (ref,)
                ).fetchall()
            if not rows and len(ref) >= 4:
                rows = conn.execute(
                    f"SELECT {_RUNS} FROM runs WHERE id ILIKE %s LIMIT 2", (like_prefix(ref),)
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
            rows = self._db.run(
                lambda conn: conn.execute(f"SELECT {_RUNS} FROM runs ORDER BY id").fetchall()
            )
        else:
            query = f"SELECT {_RUNS} FROM runs ORDER BY id DESC LIMIT %s"
            rows = self._db.run(lambda conn: conn.execute(query, (newest,)).fetchall())[::-1]
        return readable(rows, run_from_row, damaged)

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

    def allocate_step(self, run_id: str) -> int:
        row = self._db.run(
            lambda conn: conn.execute(
                "UPDATE runs SET next_step = greatest(next_step, coalesce("
                "(SELECT max(step) + 1 FROM exchanges WHERE run_id = %s), 0)) + 1 "
                "WHERE id = %s RETURNING next_step - 1",
                (run_id, run_id),
            ).fetchone(),
            write=True,
            retry_for=ALLOCATE_WAITS,
        )
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return int(row[0])

    # exchanges

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        new, rows = exchange_rows(exchanges, self._packer, self._stored)

        def work(conn: psycopg.Connection) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, list(new.values()))
                for values, chunks in rows:
                    run_id, step = str(values[0]), int(str(values[1]))
                    try:
                        with conn.transaction():  # a savepoint: the error names its step
                            cursor.execute(
                                f"INSERT INTO exchanges ({_EXCHANGES}) VALUES ({_marks(values)})",
                                values,  # type: ignore[arg-type]
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
        rows = piece_rows(blobs, self._stored)
        if rows:
            self._db.run(lambda conn: conn.cursor().executemany(_BLOB, rows), write=True)

    def piece(self, piece: Piece) -> bytes:
        row = self._db.run(lambda conn: conn.execute(
            "SELECT codec, data FROM blobs WHERE hash=%s", (piece.digest,)).fetchone())  # fmt: skip
        return piece_bytes(piece, row, self.label)

    def _stored(self, digest: str) -> bool:
        row = self._db.run(lambda conn: conn.execute(
            "SELECT 1 FROM blobs WHERE hash=%s", (digest,)).fetchone())  # fmt: skip
        return row is not None

    @staticmethod
    def _fetcher(conn: psycopg.Connection) -> Fetch:
        def fetch(hashes: list[str]) -> list[tuple[str, str, bytes]]:
            return conn.execute(  # type: ignore[return-value]
                "SELECT hash, codec, data FROM blobs WHERE hash = ANY(%s)", (hashes,)
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
        values = snapshot_values(snapshot, manifest)

        def work(conn: psycopg.Connection) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(_BLOB, list(new.values()))
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
