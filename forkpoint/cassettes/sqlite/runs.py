"""The SQLite cassette's `RunStore`: runs, exchanges, snapshots and the blobs their bytes are in.

Tables: `runs`, `exchanges` (one row per step, with what its dialect read off it, and for a
body too large to hold the pieces that follow its held part: `response_pieces`), `chunks`
(one row per streamed chunk: its offset and size, then an end marker row when the stream ended
cleanly, so a cut stream is visible in SQL), `snapshots`, and the blobs (`contents`, body
segments numbered, each stored once, compressed alone or against its run's earlier ones; a
piece is one blob, written ahead of its exchange; `blobs`, those written before schema 12, by
sha256: `sqlite.contents`). A body column holds its manifest (`cassettes.manifests`): the list
of its segments' numbers, or for a request what it repeats of an earlier one. Bodies are cut,
hashed and compressed before the write transaction, which inserts the blobs, then the rows
that name them by number.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from forkpoint.cassettes.manifests import BlobRow, Blobs, Fetch, Packer
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
from forkpoint.cassettes.sqlite import contents
from forkpoint.cassettes.sqlite.connection import Connection
from forkpoint.cassettes.sqlite.schema import CONTENTS_FROM
from forkpoint.errors import AlreadyRecorded, CassetteError, RunNotFound
from forkpoint.models import Blob, Ending, Exchange, Piece, Run, RunStatus, Snapshot

_RUNS = ", ".join(f'"{c}"' for c in RUN_COLUMNS)
_EXCHANGES = ", ".join(f'"{c}"' for c in EXCHANGE_COLUMNS)
_INSERT_EXCHANGE = (
    f"INSERT INTO exchanges ({_EXCHANGES}) VALUES ({','.join('?' for _ in EXCHANGE_COLUMNS)})"
)
_SNAPSHOTS = ", ".join(f'"{c}"' for c in SNAPSHOT_COLUMNS)


class SqliteRuns:
    """Runs, exchanges and snapshots in the cassette file (see the module's docstring)."""

    _db: Connection
    _packer: Packer
    path: Path

    # runs

    def create_run(self, run: Run) -> None:
        with self._db.writing() as conn:
            try:
                conn.execute(f"INSERT INTO runs ({_RUNS}) VALUES ({_marks(RUN_COLUMNS)})",
                             run_values(run))  # fmt: skip
            except sqlite3.IntegrityError as error:
                if "UNIQUE" in str(error):
                    raise AlreadyRecorded(
                        f"{self.path} already has a run {run.id}", run_id=run.id
                    ) from None
                raise CassetteError(
                    f"{self.path} has no run {run.parent_id}, the parent of run {run.id}",
                    run_id=run.id,
                ) from None

    def finish_run(
        self, run_id: str, status: RunStatus, *, error: str | None = None,
        fork_step: int | None = None, owner: str | None = None,
    ) -> None:  # fmt: skip
        """Close a run; `fork_step` records where a replay that went live actually forked."""
        ended = None if status is RunStatus.RUNNING else time.time()
        with self._db.writing() as conn:
            changed = conn.execute(
                "UPDATE runs SET status=?, ended_at=?, error=?, "
                "fork_step=coalesce(?, fork_step), owner=coalesce(?, owner) WHERE id=?",
                (status, ended, error, fork_step, owner, run_id),
            ).rowcount
        if not changed:
            raise RunNotFound(f"no run {run_id!r} in {self.path}", run_id=run_id)

    @property
    def _selected(self) -> str:
        """SELECT the run columns FROM runs: those the file's version has."""
        return f"SELECT {run_select('sqlite', self._db.version)} FROM runs"

    def get_run(self, run_id: str) -> Run:
        with self._db.reading() as conn:
            row = conn.execute(f"{self._selected} WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.path}", run_id=run_id)
        return run_from_row(row)

    def find_run(self, ref: str) -> Run:
        with self._db.reading() as conn:
            rows = conn.execute(f"{self._selected} WHERE id=?", (ref,)).fetchall()
            if not rows:
                rows = conn.execute(
                    f"{self._selected} WHERE name=? ORDER BY id DESC LIMIT 1", (ref,)
                ).fetchall()
            if not rows and len(ref) >= 4:
                rows = conn.execute(
                    f"{self._selected} WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                    (like_prefix(ref),),
                ).fetchall()
        if len(rows) == 1:
            return run_from_row(rows[0])
        if len(rows) > 1:
            raise RunNotFound(f"{ref!r} matches several runs; give more of the id", run_id=ref)
        raise RunNotFound(f"no run {ref!r} in {self.path} (see: forkpoint runs)", run_id=ref)

    def list_runs(
        self, *, newest: int | None = None, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        with self._db.reading() as conn:
            if newest is None:
                rows = conn.execute(f"{self._selected} ORDER BY id").fetchall()
            else:
                query = f"{self._selected} ORDER BY id DESC LIMIT ?"
                rows = conn.execute(query, (newest,)).fetchall()[::-1]
        return readable(rows, run_from_row, damaged)

    def numbered(self, run_id: str) -> dict[int, int]:
        """The tickets of the run the store has numbered, with their steps (a read)."""
        if self._db.version < 5:  # read as it is: no run had tickets then
            return {}
        with self._db.reading() as conn:
            query = "SELECT ticket, step FROM tickets WHERE run_id=?"
            return dict(conn.execute(query, (run_id,)).fetchall())

    def step_count(self, run_id: str) -> int:
        with self._db.reading() as conn:
            query = "SELECT count(*) FROM exchanges WHERE run_id=?"
            return int(conn.execute(query, (run_id,)).fetchone()[0])

    def next_step(self, run_id: str) -> int:
        """The step after the run's highest stored or allocated: a crash may have left gaps."""
        with self._db.reading() as conn:
            query = "SELECT max(step) FROM exchanges WHERE run_id=?"
            (found,) = conn.execute(query, (run_id,)).fetchone()
            stored = 0 if found is None else int(found) + 1
            if self._db.version < 2:  # read as it is: no step was allocated in it
                return stored
            row = conn.execute("SELECT next_step FROM runs WHERE id=?", (run_id,)).fetchone()
        return max(stored, row[0] if row else 0)

    def number(self, run_id: str, tickets: Sequence[int]) -> dict[int, int]:
        """One short transaction: the steps the run's tickets hold, and for each new one the
        run's counter, or the step after its highest stored one (written by a proxy that
        numbered its own steps) if that is higher, taken and moved on."""
        steps: dict[int, int] = {}
        with self._db.writing() as conn:
            for start in range(0, len(tickets), 500):
                part = tickets[start : start + 500]
                query = (f"SELECT ticket, step FROM tickets WHERE run_id = ? AND ticket IN "
                         f"({_marks(part)})")  # fmt: skip
                steps.update(conn.execute(query, (run_id, *part)).fetchall())
            for ticket in tickets:
                if ticket in steps:
                    continue
                row = conn.execute(
                    "UPDATE runs SET next_step = max(next_step, coalesce("
                    "(SELECT max(step) + 1 FROM exchanges WHERE run_id = ?), 0)) + 1 "
                    "WHERE id = ? RETURNING next_step - 1",
                    (run_id, run_id),
                ).fetchone()
                if row is None:
                    raise RunNotFound(f"no run {run_id!r} in {self.path}", run_id=run_id)
                steps[ticket] = int(row[0])
                conn.execute("INSERT INTO tickets VALUES (?, ?, ?)", (run_id, ticket, row[0]))
        return steps

    def end_run(self, ending: Ending) -> None:
        with self._db.writing() as conn:
            change = None if ending.change is None else dump_json(ending.change)
            found = conn.execute(
                "UPDATE runs SET status=?, ended_at=?, error=?, fork_step=coalesce(?, fork_step), "
                "change=coalesce(?, change) WHERE id=? AND status=? RETURNING 1",
                (ending.status, ending.ended_at, ending.error, ending.fork_step, change,
                 ending.run_id, RunStatus.RUNNING),
            ).fetchone()  # fmt: skip
            if (
                found is None
                and conn.execute("SELECT 1 FROM runs WHERE id=?", (ending.run_id,)).fetchone()
                is None
            ):
                raise RunNotFound(f"no run {ending.run_id!r} in {self.path}", run_id=ending.run_id)

    # exchanges

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        try:  # a failure packing them forgets what was packed too: it is not stored
            new, rows = exchange_rows(exchanges, self._packer, self._stored)
            with self._db.writing() as conn:
                namer = self._insert_blobs(conn, new.values())
                for values, chunks in rows:
                    self._insert_exchange(conn, named(values, namer), chunks)
        except BaseException:
            self._packer.failed()
            raise
        self._packer.committed(new.values(), namer.numbers)

    def add_pieces(self, blobs: Iterable[Blob]) -> None:
        rows = piece_rows(blobs, self._stored)
        if rows:
            with self._db.writing() as conn:
                namer = self._insert_blobs(conn, rows)
            self._packer.committed(rows, namer.numbers)

    def piece(self, piece: Piece) -> bytes:
        with self._db.reading() as conn:
            key = contents.piece_key(conn, piece.digest, numbered=self._numbered,
                                     has_blobs=self._db.has_blobs)  # fmt: skip
            fetch = self._fetcher(conn)
            return piece_bytes(
                piece, lambda: None if key is None else Blobs(fetch).load([key]).plain(key),
                str(self.path),
            )  # fmt: skip

    @property
    def _numbered(self) -> bool:
        """Whether the file has `contents` (schema 12 on: every file a writer opened)."""
        return self._db.version >= CONTENTS_FROM

    def _insert_blobs(self, conn: sqlite3.Connection, rows: Iterable[BlobRow]) -> contents.Namer:
        """Insert the blob rows, inside the write transaction: the namer of its manifests."""
        namer = contents.Namer(conn, self._packer, self._db.has_blobs)
        namer.insert(rows)
        return namer

    def _insert_exchange(
        self, conn: sqlite3.Connection, values: tuple[object, ...], chunks: list[tuple[object, ...]]
    ) -> None:
        run_id, step = values[0], values[1]
        try:
            conn.execute(_INSERT_EXCHANGE, values)
        except sqlite3.IntegrityError as error:
            if "UNIQUE" in str(error):
                raise AlreadyRecorded(
                    f"{self.path} already holds run {run_id} step {step}: it is never rewritten",
                    run_id=str(run_id),
                    step=int(str(step)),
                ) from None
            raise CassetteError(
                f"no run {run_id} in {self.path} for step {step}", run_id=str(run_id),
                step=int(str(step)),
            ) from None  # fmt: skip
        if chunks:
            conn.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?)", chunks)

    def _stored(self, digest: str) -> bool:
        with self._db.reading() as conn:
            return contents.stored(conn, digest, self._db.has_blobs)

    def _fetcher(self, conn: sqlite3.Connection) -> Fetch:
        return contents.fetcher(conn, numbered=self._numbered, has_blobs=self._db.has_blobs)

    def response_keys(self, run_id: str) -> dict[int, str]:
        with self._db.reading() as conn:
            if self._numbered:
                query = "SELECT step, response_body, response_pieces FROM exchanges WHERE run_id=?"
                return contents.response_keys(conn, conn.execute(query, (run_id,)).fetchall())
            key = response_key("sqlite", self._db.version)
            query = f"SELECT step, {key} FROM exchanges WHERE run_id=?"
            return dict(conn.execute(query, (run_id,)).fetchall())

    def exchanges(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        with self._db.reading() as conn:
            rows = conn.execute(
                f"SELECT {exchange_select('sqlite', self._db.version)} FROM exchanges "
                f"WHERE run_id=? ORDER BY step",
                (run_id,),
            ).fetchall()
            chunk_sizes = conn.execute(
                "SELECT step, offset_ms, size FROM chunks WHERE run_id=? AND end=0 "
                "ORDER BY step, seq",
                (run_id,),
            ).fetchall()
            return exchanges_from_rows(rows, chunk_sizes, self._fetcher(conn), bodies=bodies,
                                       damaged=damaged)  # fmt: skip

    # snapshots

    def add_snapshot(self, snapshot: Snapshot) -> None:
        """Store a snapshot; a later one for the same (run, step, adapter) replaces it."""
        new: dict[str, BlobRow] = {}
        manifest = self._packer.pack(snapshot.data, snapshot.content_type, new, self._stored)
        with self._db.writing() as conn:
            namer = self._insert_blobs(conn, new.values())
            values = named(snapshot_values(snapshot, manifest), namer)
            try:
                conn.execute(
                    f"INSERT OR REPLACE INTO snapshots ({_SNAPSHOTS}) VALUES ({_marks(values)})",
                    values,
                )
            except sqlite3.IntegrityError:
                raise CassetteError(
                    f"no run {snapshot.run_id} in {self.path} for a snapshot",
                    run_id=snapshot.run_id, step=snapshot.step,
                ) from None  # fmt: skip
        self._packer.committed(new.values(), namer.numbers)

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        """A run's snapshots by step, failed pulls included; `data=True` loads the state."""
        with self._db.reading() as conn:
            rows = conn.execute(
                f"SELECT {_SNAPSHOTS} FROM snapshots WHERE run_id=? ORDER BY step, adapter",
                (run_id,),
            ).fetchall()
            return snapshots_from_rows(rows, self._fetcher(conn), data=data)

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        """For each adapter, its newest good snapshot at a step <= `at_most`, state loaded."""
        with self._db.reading() as conn:
            rows = conn.execute(
                f"SELECT {_SNAPSHOTS} FROM snapshots WHERE run_id=? AND error IS NULL "
                "AND step <= ? ORDER BY step, adapter",
                (run_id, at_most if at_most is not None else 2**62),
            ).fetchall()
            newest = list({row[2]: row for row in rows}.values())
            return snapshots_from_rows(newest, self._fetcher(conn), data=True)


def _marks(values: Iterable[object]) -> str:
    return ",".join("?" for _ in values)
