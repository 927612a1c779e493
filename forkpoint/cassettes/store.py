"""The `Store` protocol: what the proxy and the CLI need from a cassette, whatever holds it.

Split as hishel splits its storage: a `RunStore` keeps what a proxy records (runs, their
exchanges and snapshots, and the blobs their bytes are kept in), an `ExperimentStore` keeps
what `forkpoint experiment` adds over them; `Store` is both, which every implementation is
(memory, SQLite, PostgreSQL) and what everything else imports. tests/cassettes/test_contract.py
holds every implementation to this page.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol

from forkpoint.errors import CassetteError
from forkpoint.models import Blob, Exchange, Piece, Run, RunStatus, Snapshot


class StoredExperiment(NamedTuple):
    """An experiment as a cassette keeps it: a name, when it ran, and its spec (JSON data)."""

    name: str
    created_at: float
    ended_at: float | None  # None while it runs, or when it was interrupted
    spec: dict[str, Any]


class StoredBranch(NamedTuple):
    """One run an experiment forked: the branch run, or the error that left it without one.

    `result` (JSON data) holds what the runs alone do not: the fork step, the exit code and
    what the check said. `seq` keeps the order the runs were selected in.
    """

    seq: int
    source_id: str
    branch_id: str | None
    error: str | None
    result: dict[str, Any]


class RunStore(Protocol):
    """Runs, exchanges and snapshots. Writes are durable when the call returns; nothing
    stored is ever rewritten (a run id or a step taken raises `AlreadyRecorded`); a closed
    store raises CassetteError."""

    def create_run(self, run: Run) -> None: ...

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        fork_step: int | None = None,
    ) -> None: ...

    def get_run(self, run_id: str) -> Run: ...

    def find_run(self, ref: str) -> Run:
        """A run by id, name (the newest of that name) or a unique id prefix of 4 characters
        or more; raises RunNotFound."""
        ...

    def list_runs(
        self, *, newest: int | None = None, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        """Every run, or the `newest` ones, oldest first (by id). With `damaged`, a run whose
        row does not read is left out and its error added there, so a reader shows what it
        can; else it raises."""
        ...

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        """Store completed exchanges, all in one transaction. An exchange's `pieces` are
        named, not held: their bytes come first, through `add_pieces`."""
        ...

    def add_pieces(self, blobs: Iterable[Blob]) -> None:
        """Store the bytes of pieces of a body too large to hold (blobs by sha256), ahead of
        the exchange that names them; one stored already is skipped."""
        ...

    def piece(self, piece: Piece) -> bytes:
        """The bytes of one piece, checked against its hash and size (a replay reads them one
        at a time as it serves them); raises CassetteError naming a missing or damaged one."""
        ...

    def response_keys(self, run_id: str) -> dict[int, str]:
        """Per step of a run, a key equal for equal response bodies, read without loading
        the bodies."""
        ...

    def exchanges(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        """A run's exchanges in step order; `bodies=False` may skip loading request/response
        bytes (and a stream's chunk bytes). A body's pieces are named, never loaded. A step
        that does not read raises a CassetteError naming it, or with `damaged` is left out
        and its error added there."""
        ...

    def step_count(self, run_id: str) -> int: ...

    def next_step(self, run_id: str) -> int:
        """The step after the run's highest stored or allocated one (0 for none): a crash
        may have left gaps."""
        ...

    def allocate_step(self, run_id: str) -> int:
        """Take the run's next step number, atomically across every process sharing the
        store (proxies serving one run at once); the run must exist."""
        ...

    def add_snapshot(self, snapshot: Snapshot) -> None:
        """Keep a snapshot; a later one for the same (run, step, adapter) replaces it (a pull
        retried at the same step)."""
        ...

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        """A run's snapshots by step then adapter, failed pulls included; `data=True` loads
        the state."""
        ...

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        """For each adapter, its newest good snapshot at a step <= `at_most`, state loaded."""
        ...

    def close(self) -> None: ...


class ExperimentStore(Protocol):
    """Experiments over the runs: each one's spec and the branch it forked from each run."""

    def create_experiment(self, experiment: StoredExperiment) -> None:
        """Start an experiment; raises ConfigError when the name is taken."""
        ...

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None: ...

    def finish_experiment(self, name: str, *, ended_at: float) -> None: ...

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        """An experiment and its branches by `seq`; raises ConfigError when there is none."""
        ...

    def list_experiments(self) -> list[StoredExperiment]:
        """Every experiment, oldest first."""
        ...


class Store(RunStore, ExperimentStore, Protocol):
    """A cassette: a `RunStore` and an `ExperimentStore` in one place."""


def location_of(store: Store) -> str | None:
    """Where another process opens `store` again: an SQLite file or a PostgreSQL database
    (their `location`); None for a store in memory, which lives in this process alone:
    reading it blocks no one, and nothing outside can journal or write it."""
    location = getattr(store, "location", None)
    return location if isinstance(location, str) else None
