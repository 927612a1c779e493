"""The `Store` protocol: what the proxy and the CLI need from a cassette, whatever holds it.

Split as hishel splits its storage: a `RunStore` keeps what a proxy records (runs, their
exchanges and snapshots, and the blobs their bytes are kept in), an `ExperimentStore` keeps
what `forkpoint experiment` adds over them; `Store` is both, which every implementation is
(memory, SQLite, PostgreSQL) and what everything else imports. tests/cassettes/test_contract.py
holds every implementation to this page.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from forkpoint.errors import CassetteError
from forkpoint.models import (
    Blob,
    Ending,
    Exchange,
    Launch,
    Park,
    Piece,
    Run,
    RunStatus,
    Snapshot,
)

# How long a claimed wake stays its claimant's (seconds): past it, a claim whose run recorded
# nothing since its park is taken again (its waker died between the claim and the wake).
WAKE_LEASE = 60.0


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
        owner: str | None = None,
    ) -> None:
        """Close a run with `status` (or open it again: a resume, naming its new `owner`);
        `fork_step` is where a replay that went live forked."""
        ...

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

    def number(self, run_id: str, tickets: Sequence[int]) -> dict[int, int]:
        """The steps of requests a proxy gave these `tickets` (`models.Ticket`), in order:
        each takes the run's next step the first time the store sees it, atomically across
        every process sharing the store, and keeps it ever after (a journal merged twice
        numbers nothing twice). The run must exist."""
        ...

    def numbered(self, run_id: str) -> dict[int, int]:
        """The run's tickets the store has numbered, with their steps: a read, for a reader
        that shows a journal's tickets as the store would number them."""
        ...

    def end_run(self, ending: Ending) -> None:
        """Close a run as its proxy saw it end (with its change as it turned out, when the
        ending has one), if it is still `running`: a run that ended since (resumed and
        finished) is left as it is. An unknown run is RunNotFound."""
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

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        """Keep a branch once: a second one for the same `seq` (a probe retried by another
        worker) raises AlreadyRecorded, so each selected run counts once."""
        ...

    def experiment_counts(self, name: str) -> tuple[int, int]:
        """How many branches the experiment holds, and how many of them failed, read without
        loading them (a follower polls it); (0, 0) for a name it does not hold."""
        ...

    def finish_experiment(self, name: str, *, ended_at: float) -> None: ...

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        """An experiment and its branches by `seq`; raises ConfigError when there is none."""
        ...

    def list_experiments(self) -> list[StoredExperiment]:
        """Every experiment, oldest first."""
        ...


class ParkStore(Protocol):
    """Parked runs and how to wake them. Each transition of a park (parked -> answered ->
    waking -> woken) is one conditional write: of two writers, exactly one makes it, across
    every process sharing the store; what a process holds in memory is only a cache of this."""

    def set_launch(self, launch: Launch) -> None:
        """Keep how a run's agent was started (replacing an earlier launch of the run: a
        resume starts it again). The run must exist."""
        ...

    def launch(self, run_id: str) -> Launch | None: ...

    def park(self, park: Park) -> None:
        """Park a run at its pending step: the park is stored and the run marked `parked` in
        one transaction. Raises AlreadyRecorded when that step is parked or recorded already;
        an unknown run is RunNotFound."""
        ...

    def add_park(self, park: Park) -> None:
        """Keep a park as another store held it (`copy_runs`): its state, times and who
        answered as they are, the run's status untouched (it was copied with the run). Raises
        AlreadyRecorded when the run has a park at that step; an unknown run is RunNotFound."""
        ...

    def run_parks(self, run_id: str) -> list[Park]:
        """Every park of the run, whatever its state, by step (what `copy_runs` carries)."""
        ...

    def parked(self, run_id: str) -> Park | None:
        """The run's newest park not yet woken (parked, answered or waking), else None."""
        ...

    def last_park(self, run_id: str) -> Park | None:
        """The run's newest park, whatever its state (woken included), else None: a key
        read."""
        ...

    def parks(
        self,
        *,
        states: Sequence[str] = ("parked",),
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:
        """Parks in these states by run id, at most `limit`, those of runs after `after` (a
        page of `runs --status parked`), read off an index: a million parks page fast. A state
        that is none is a ConfigError."""
        ...

    def answer(self, exchange: Exchange, *, by: str) -> Park:
        """Answer the run's pending step: `exchange` (that step's, with its response) is
        stored and the park marked answered in one transaction, exactly once. Raises
        AlreadyAnswered (naming who and when) for a step answered already, NotParked for a
        run that waits on nothing, RunNotFound for an unknown run. Notifies waiting wakers."""
        ...

    def mark_answered(self, run_id: str, step: int, *, by: str) -> Park:
        """Mark a park answered whose step's exchange came in as any other (the upstream
        answered a `--park-after` request: its exchange went through the journal). Raises
        as `answer` does, and CassetteError while the step has no exchange stored (write it
        first: an answered park's answer is always in the store)."""
        ...

    def due(self, now: float, *, limit: int = 100) -> list[Park]:
        """Parks still waiting whose deadline is at or before `now`, soonest first."""
        ...

    def claim_wake(self, run_id: str, step: int, *, by: str, lease: float = WAKE_LEASE) -> bool:
        """Take the wake of an answered park (answered -> waking): True for exactly one
        caller, False for every other and for a park not answered. A park `waking` is taken
        again once its claim is older than `lease` seconds and its run has recorded nothing
        (no exchange, no snapshot) after the parked step: its waker died mid-wake."""
        ...

    def woke(self, run_id: str, step: int) -> None:
        """The woken agent started (waking -> woken); the run is `running` again, unless its
        resume moved it on already (it may have ended before this is written). NotParked for
        a park no one is waking."""
        ...

    def wait_for_answers(self, timeout: float) -> list[str]:
        """Block up to `timeout` seconds until some park is answered; the run ids answered
        (empty on timeout). The first call also returns the runs answered before it (a waker
        started after a crash misses none); a run may be returned twice, and `claim_wake`
        decides who wakes it. PostgreSQL is told at once (LISTEN/NOTIFY); others poll."""
        ...


class Store(RunStore, ExperimentStore, ParkStore, Protocol):
    """A cassette: runs, experiments and parks in one place."""


def location_of(store: Store) -> str | None:
    """Where another process opens `store` again: an SQLite file or a PostgreSQL database
    (their `location`); None for a store in memory, which lives in this process alone:
    reading it blocks no one, and nothing outside can journal or write it."""
    location = getattr(store, "location", None)
    return location if isinstance(location, str) else None
