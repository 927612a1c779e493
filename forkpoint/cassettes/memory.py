"""A `Store` held in process memory, for test cassettes that are read whole and written whole.

A test loads its text cassette into one of these, the proxy serves and records through it, and
the plugin writes the recorded run back to the file: no database, nothing left on disk. Runs and
exchanges are copied in and out, so callers see values as they would from `SqliteStore`.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterable, Sequence

from forkpoint.cassettes.blobs import content_hash
from forkpoint.cassettes.memory_parks import MemoryParks
from forkpoint.cassettes.store import StoredBranch, StoredExperiment
from forkpoint.errors import AlreadyRecorded, CassetteError, ConfigError, RunNotFound
from forkpoint.models import (
    Blob,
    Ending,
    Exchange,
    Kind,
    Piece,
    Run,
    RunStatus,
    Snapshot,
    Summary,
)


class MemoryStore(MemoryParks):
    """A `Store` in dictionaries; safe to share between the event loop and a recorder's thread."""

    def __init__(self, label: str = "memory") -> None:
        self.label = label  # names the store in messages, as a path does for SqliteStore
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._exchanges: dict[str, dict[int, Exchange]] = {}
        self._snapshots: dict[str, dict[tuple[int, str], Snapshot]] = {}
        self._experiments: dict[str, tuple[StoredExperiment, list[StoredBranch]]] = {}
        self._allocated: dict[str, int] = {}  # per run, the step after the last allocated
        self._tickets: dict[str, dict[int, int]] = {}  # per run, ticket -> step (`number`)
        self._pieces: dict[str, bytes] = {}  # the bytes of bodies' pieces, by sha256
        self._closed = False
        self._init_parks()

    def _open(self) -> None:
        if self._closed:
            raise CassetteError(f"the cassette {self.label} is closed")

    def create_run(self, run: Run) -> None:
        with self._lock:
            self._open()
            if run.id in self._runs:
                raise AlreadyRecorded(f"{self.label} already has a run {run.id}", run_id=run.id)
            self._runs[run.id] = copy.deepcopy(run)
            self._exchanges[run.id] = {}

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        fork_step: int | None = None,
        owner: str | None = None,
    ) -> None:
        with self._lock:
            self._open()
            run = self._runs.get(run_id)
            if run is None:
                raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
            ended = None if status is RunStatus.RUNNING else time.time()
            run.status, run.ended_at, run.error = status, ended, error
            if fork_step is not None:
                run.fork_step = fork_step
            if owner is not None:
                run.owner = owner

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            self._open()
            run = self._runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return copy.deepcopy(run)

    def find_run(self, ref: str) -> Run:
        """A run by id, name (newest first) or unique id prefix of 4 characters or more."""
        with self._lock:
            self._open()
            runs = sorted(self._runs.values(), key=lambda r: r.id, reverse=True)
        found = [r for r in runs if r.id == ref] or [r for r in runs if r.name == ref][:1]
        if not found and len(ref) >= 4:
            found = [r for r in runs if r.id.upper().startswith(ref.upper())][:2]
        if len(found) == 1:
            return copy.deepcopy(found[0])
        if found:
            raise RunNotFound(f"{ref!r} matches several runs; give more of the id", run_id=ref)
        raise RunNotFound(f"no run {ref!r} in {self.label}", run_id=ref)

    def list_runs(
        self, *, newest: int | None = None, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        """Every run, or the newest ones (none is ever damaged here)."""
        with self._lock:
            self._open()
            runs = [copy.deepcopy(run) for _, run in sorted(self._runs.items())]
        return runs if newest is None else runs[max(len(runs) - newest, 0) :]

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        """All or none: a batch with one bad exchange adds nothing."""
        with self._lock:
            self._open()
            batch = [_copied(exchange) for exchange in exchanges]
            seen: set[tuple[str, int]] = set()
            for exchange in batch:
                run_id, step = exchange.run_id, exchange.step
                steps = self._exchanges.get(exchange.run_id)
                if steps is None:
                    raise CassetteError(
                        f"no run {run_id} in {self.label} for step {step}",
                        run_id=run_id, step=step,
                    )  # fmt: skip
                if step in steps or (run_id, step) in seen:
                    raise AlreadyRecorded(
                        f"{self.label} already holds run {run_id} step {step}: "
                        "it is never rewritten",
                        run_id=run_id, step=step,
                    )  # fmt: skip
                seen.add((run_id, step))
            for exchange in batch:
                # As an SQL store reads back an exchange no dialect read: a generic one.
                exchange.summary = exchange.summary or Summary(Kind.OTHER, "generic")
                self._exchanges[exchange.run_id][exchange.step] = exchange

    def add_pieces(self, blobs: Iterable[Blob]) -> None:
        with self._lock:
            self._open()
            for blob in blobs:
                self._pieces.setdefault(blob.digest, bytes(blob.data))

    def piece(self, piece: Piece) -> bytes:
        with self._lock:
            self._open()
            data = self._pieces.get(piece.digest)
        if data is None or len(data) != piece.size:
            raise CassetteError(f"{self.label} lacks the piece {piece.digest} of a body")
        return data

    def step_count(self, run_id: str) -> int:
        with self._lock:
            self._open()
            return len(self._exchanges.get(run_id, {}))

    def next_step(self, run_id: str) -> int:
        with self._lock:
            self._open()
            stored = max(self._exchanges.get(run_id, {}), default=-1) + 1
            return max(stored, self._allocated.get(run_id, 0))

    def number(self, run_id: str, tickets: Sequence[int]) -> dict[int, int]:
        with self._lock:
            self._open()
            if run_id not in self._runs:
                raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
            held = self._tickets.setdefault(run_id, {})
            for ticket in tickets:
                if ticket not in held:
                    stored = max(self._exchanges.get(run_id, {}), default=-1) + 1
                    held[ticket] = max(stored, self._allocated.get(run_id, 0))
                    self._allocated[run_id] = held[ticket] + 1
            return {ticket: held[ticket] for ticket in tickets}

    def numbered(self, run_id: str) -> dict[int, int]:
        with self._lock:
            self._open()
            return dict(self._tickets.get(run_id, {}))

    def end_run(self, ending: Ending) -> None:
        with self._lock:
            self._open()
            run = self._runs.get(ending.run_id)
            if run is None:
                raise RunNotFound(f"no run {ending.run_id!r} in {self.label}",
                                  run_id=ending.run_id)  # fmt: skip
            if run.status is RunStatus.RUNNING:
                run.status, run.ended_at, run.error = ending.status, ending.ended_at, ending.error
                if ending.fork_step is not None:
                    run.fork_step = ending.fork_step
                if ending.change is not None:
                    run.change = copy.deepcopy(ending.change)

    def response_keys(self, run_id: str) -> dict[int, str]:
        with self._lock:
            self._open()
            steps = self._exchanges.get(run_id, {})
            return {
                step: content_hash(e.response_body + "".join(p.digest for p in e.pieces).encode())
                for step, e in steps.items()
            }

    def exchanges(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        """A run's exchanges in step order; bodies are always there (they cost nothing here)."""
        with self._lock:
            self._open()
            steps = self._exchanges.get(run_id, {})
            return [_copied(steps[step]) for step in sorted(steps)]

    def add_snapshot(self, snapshot: Snapshot) -> None:
        """Keep a snapshot; a later one for the same (run, step, adapter) replaces it."""
        with self._lock:
            self._open()
            if snapshot.run_id not in self._runs:
                raise CassetteError(
                    f"no run {snapshot.run_id} in {self.label} for a snapshot",
                    run_id=snapshot.run_id, step=snapshot.step,
                )  # fmt: skip
            taken = self._snapshots.setdefault(snapshot.run_id, {})
            taken[(snapshot.step, snapshot.adapter)] = copy.deepcopy(snapshot)

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        """A run's snapshots by step, failed pulls included; `data=True` includes the state."""
        with self._lock:
            self._open()
            taken = self._snapshots.get(run_id, {})
            found = [copy.deepcopy(taken[key]) for key in sorted(taken)]
        if not data:
            for snapshot in found:
                snapshot.data = b""
        return found

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        """For each adapter, its newest good snapshot at a step <= `at_most`, state included."""
        newest: dict[str, Snapshot] = {}
        for snapshot in self.snapshots(run_id, data=True):
            if snapshot.ok and (at_most is None or snapshot.step <= at_most):
                newest[snapshot.adapter] = snapshot
        return list(newest.values())

    def create_experiment(self, experiment: StoredExperiment) -> None:
        with self._lock:
            self._open()
            if experiment.name in self._experiments:
                raise ConfigError(f"{self.label} already has an experiment {experiment.name!r}")
            self._experiments[experiment.name] = (copy.deepcopy(experiment), [])

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        with self._lock:
            self._open()
            branches = self._experiment(name)[1]
            if any(b.seq == branch.seq for b in branches):
                raise AlreadyRecorded(f"experiment {name!r} already has branch {branch.seq}")
            branches.append(copy.deepcopy(branch))

    def experiment_counts(self, name: str) -> tuple[int, int]:
        with self._lock:
            self._open()
            branches = self._experiments.get(name, (None, []))[1]
            return len(branches), sum(1 for b in branches if b.branch_id is None or b.error)

    def finish_experiment(self, name: str, *, ended_at: float) -> None:
        with self._lock:
            self._open()
            experiment, branches = self._experiment(name)
            self._experiments[name] = (experiment._replace(ended_at=ended_at), branches)

    def _experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        found = self._experiments.get(name)
        if found is None:
            raise ConfigError(f"no experiment {name!r} in {self.label}")
        return found

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        with self._lock:
            self._open()
            found = self._experiment(name)
            return copy.deepcopy(found[0]), sorted(copy.deepcopy(found[1]), key=lambda b: b.seq)

    def list_experiments(self) -> list[StoredExperiment]:
        with self._lock:
            self._open()
            found = [copy.deepcopy(e) for e, _ in self._experiments.values()]
        return sorted(found, key=lambda e: (e.created_at, e.name))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._answered.notify_all()  # a waiter for answers learns the store is closed


def _copied(exchange: Exchange) -> Exchange:
    """A copy its holder may change, as a deep copy is: every field but `chunks` holds immutable
    values (frozen records, bytes, tuples), so only that list is copied. A deep copy of each
    exchange cost a pytest test about a millisecond."""
    copied = copy.copy(exchange)
    if copied.chunks is not None:
        copied.chunks = list(copied.chunks)
    return copied
