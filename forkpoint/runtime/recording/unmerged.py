"""`Unmerged`: a store as its readers see it, with what its journals hold as if merged, and a
run whose recording process is gone shown `crashed`. It writes nothing, locks nothing a writer
waits on, and deletes nothing.

A proxy killed (kill -9, a lost machine) leaves in its journal what the store had not
committed yet, merged by the next proxy to open the store; a store that took no writes (locked,
full) left it there too. Until then a reader shows it as the merge would write it: the runs
the store lacks, the exchanges and snapshots of steps it lacks, the pieces of their bodies,
and the runs' endings (to a run still `running`). A request of a run several proxies serve
carries a ticket until the store numbers it (`Store.number`): one the store has numbered
takes that step; the others take the steps after the run's last, in journal order, as one
merge would give them, and are `provisional`: another proxy's merge may take them first.

Reads follow one order, so that a writer committing meanwhile never shows a step twice: the
journals first (what a writer deletes from them is committed before), then the store's
exchanges, then the tickets it has numbered (it numbers a ticket before it stores its
exchange).

A run still `running` in the store whose owner (`owners`) is known to be gone is shown
`crashed`, with why in its `error`; a run whose owner cannot be told about (another host, a
run several proxies serve) stays as stored.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from hashlib import sha256

from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.rows import dump_pieces
from forkpoint.cassettes.store import WAKE_LEASE, Store, StoredBranch, StoredExperiment
from forkpoint.engine.derive import derive
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import CassetteError, RunNotFound
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
from forkpoint.runtime.recording.held import Held, Holding, JournalFiles, piece_bytes
from forkpoint.runtime.recording.journal import journal_dir
from forkpoint.runtime.recording.owners import alive

__all__ = ["Unmerged"]


class Steps(dict[int, bool]):
    """The steps of a run read from journals, each with whether its number is provisional."""


class Unmerged:
    """`store` read with its journals (see the module's docstring); every write goes to
    `store`, which a reader opened read-only refuses."""

    def __init__(self, store: Store, match: MatchConfig = MatchConfig()) -> None:
        self.store = store
        self.journals = journal_dir(store)
        self._files = JournalFiles(self.journals)
        self._match = match
        self._lock = threading.Lock()  # the files' cache, across a reader's threads

    def holding(self) -> Holding:
        with self._lock:
            return self._files.holding()

    # runs

    def shown(self, run: Run, held: Held | None = None) -> Run:
        """`run` as a reader shows it: with the ending its journal holds, else `crashed` when
        its process is known to be gone."""
        if run.status is not RunStatus.RUNNING:
            return run
        if held is not None and held.ending is not None:
            end = held.ending
            return replace(
                run, status=end.status, error=end.error, ended_at=end.ended_at,
                fork_step=run.fork_step if end.fork_step is None else end.fork_step,
                change=run.change if end.change is None else end.change,
            )  # fmt: skip
        if alive(run.owner, self.journals) is False:
            waiting = held is not None and bool(held.exchanges or held.snapshots)
            why = "its forkpoint process is gone" + (
                "; what its journal holds is shown, and merged by the next forkpoint to "
                "record into this cassette"
                if waiting
                else ""
            )
            return replace(run, status=RunStatus.CRASHED, error=run.error or why)
        return run

    def get_run(self, run_id: str) -> Run:
        holding = self.holding()
        held = holding.runs.get(run_id)
        try:
            run = self.store.get_run(run_id)
        except RunNotFound:
            if held is None or held.run is None:
                raise
            run = held.run
        return self.shown(run, held)

    def find_run(self, ref: str) -> Run:
        holding = self.holding()
        try:
            run = self.store.find_run(ref)
        except RunNotFound:
            found = _find(ref, [h.run for h in holding.runs.values() if h.run is not None])
            if found is None:
                raise
            run = found
        return self.shown(run, holding.runs.get(run.id))

    def list_runs(
        self, *, newest: int | None = None, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        holding = self.holding()
        runs = {run.id: run for run in self.store.list_runs(newest=newest, damaged=damaged)}
        for run_id, held in holding.runs.items():
            if held.run is not None and run_id not in runs and not self._stored(run_id):
                runs[run_id] = held.run
        ordered = [runs[run_id] for run_id in sorted(runs)]
        if newest is not None:
            ordered = ordered[-newest:] if newest > 0 else []
        return [self.shown(run, holding.runs.get(run.id)) for run in ordered]

    def _stored(self, run_id: str) -> bool:
        try:
            self.store.get_run(run_id)
        except RunNotFound:
            return False
        return True

    # exchanges

    def read(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> tuple[list[Exchange], Steps]:
        """A run's exchanges in step order, and the steps of those read from journals."""
        held = self.holding().runs.get(run_id)
        stored = self.store.exchanges(run_id, bodies=bodies, damaged=damaged)
        if held is None or not held.exchanges:
            return stored, Steps()
        placed = self._placed(run_id, held, {e.step for e in stored})
        steps = Steps({step: provisional for step, (_, provisional) in placed.items()})
        every = stored + [exchange for exchange, _ in placed.values()]
        return sorted(every, key=lambda e: e.step), steps

    def exchanges(
        self, run_id: str, *, bodies: bool = True, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        return self.read(run_id, bodies=bodies, damaged=damaged)[0]

    def step_count(self, run_id: str) -> int:
        held = self.holding().runs.get(run_id)
        if held is None or not held.exchanges:
            return self.store.step_count(run_id)
        stored = set(self.store.response_keys(run_id))
        return len(stored) + len(self._placed(run_id, held, stored))

    def response_keys(self, run_id: str) -> dict[int, str]:
        held = self.holding().runs.get(run_id)
        keys = self.store.response_keys(run_id)
        if held is None or not held.exchanges:
            return keys
        placed = self._placed(run_id, held, set(keys))
        return {**keys, **{step: _key(e) for step, (e, _) in placed.items()}}

    def next_step(self, run_id: str) -> int:
        held = self.holding().runs.get(run_id)
        found = self.store.next_step(run_id)
        if held is None:
            return found
        steps = self._tickets(run_id, held, found)
        taken = [e.step for e in held.exchanges if e.step >= 0]
        taken += [step for step, _ in steps.values()]
        return max([found, *(step + 1 for step in taken)])

    def _placed(
        self, run_id: str, held: Held, stored: set[int]
    ) -> dict[int, tuple[Exchange, bool]]:
        """The journaled exchanges of steps the store lacks, by step, each with whether its
        step is provisional. The store's tickets are read after its exchanges."""
        placed: dict[int, tuple[Exchange, bool]] = {}
        tickets = self._tickets(run_id, held, self._next(run_id, stored))
        for exchange in held.exchanges:
            step, provisional = (
                tickets[exchange.step] if exchange.step < 0 else (exchange.step, False)
            )
            if step in stored or step in placed:
                continue
            # the summary and fingerprint its writer would give it, once (the cache keeps it)
            derive(exchange, self._match)
            placed[step] = (exchange if step == exchange.step else replace(exchange, step=step),
                            provisional)  # fmt: skip
        return placed

    def _next(self, run_id: str, stored: set[int]) -> int:
        try:
            found = self.store.next_step(run_id)
        except RunNotFound:
            found = 0
        return max(found, max(stored, default=-1) + 1)

    def _tickets(self, run_id: str, held: Held, after: int) -> dict[int, tuple[int, bool]]:
        """Each ticket's step: the store's, else the next one after `after` and the steps the
        journal gives, in journal order (provisional)."""
        numbered = self.store.numbered(run_id) if held.tickets else {}
        own = [e.step for e in held.exchanges if e.step >= 0]
        following = max([after, *(step + 1 for step in own), *(s + 1 for s in numbered.values())])
        steps: dict[int, tuple[int, bool]] = {}
        for ticket in held.tickets:
            if ticket in numbered:
                steps[ticket] = (numbered[ticket], False)
            else:
                steps[ticket] = (following, True)
                following += 1
        return steps

    def piece(self, piece: Piece) -> bytes:
        try:
            return self.store.piece(piece)
        except CassetteError:
            spot = self.holding().pieces.get(piece.digest)
            data = piece_bytes(spot) if spot is not None else None
            if data is None or len(data) != piece.size or sha256(data).hexdigest() != piece.digest:
                raise
            return data

    # snapshots

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]:
        held = self.holding().runs.get(run_id)
        stored = self.store.snapshots(run_id, data=data)
        if held is None or not held.snapshots:
            return stored
        tickets = self._tickets(run_id, held, self._next(run_id, set()))
        taken = {(s.step, s.adapter) for s in stored}
        added: dict[tuple[int, str], Snapshot] = {}
        for snapshot in held.snapshots:
            if snapshot.step < 0:
                snapshot = replace(snapshot, step=tickets[snapshot.step][0])
            key = (snapshot.step, snapshot.adapter)
            if key not in taken:
                added[key] = snapshot  # a later pull at the same step replaces one
        return sorted([*stored, *added.values()], key=lambda s: (s.step, s.adapter))

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        latest: dict[str, Snapshot] = {}
        for snapshot in self.snapshots(run_id, data=True):
            if snapshot.ok and (at_most is None or snapshot.step <= at_most):
                latest[snapshot.adapter] = snapshot
        return list(latest.values())

    # writes go to the store, which refuses them when read-only

    def create_run(self, run: Run) -> None:
        self.store.create_run(run)

    def finish_run(
        self, run_id: str, status: RunStatus, *, error: str | None = None,
        fork_step: int | None = None, owner: str | None = None,
    ) -> None:  # fmt: skip
        self.store.finish_run(run_id, status, error=error, fork_step=fork_step, owner=owner)

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        self.store.add_exchanges(exchanges)

    def add_pieces(self, blobs: Iterable[Blob]) -> None:
        self.store.add_pieces(blobs)

    def number(self, run_id: str, tickets: Sequence[int]) -> dict[int, int]:
        return self.store.number(run_id, tickets)

    def numbered(self, run_id: str) -> dict[int, int]:
        return self.store.numbered(run_id)

    def end_run(self, ending: Ending) -> None:
        self.store.end_run(ending)

    def add_snapshot(self, snapshot: Snapshot) -> None:
        self.store.add_snapshot(snapshot)

    # experiments, as stored

    def create_experiment(self, experiment: StoredExperiment) -> None:
        self.store.create_experiment(experiment)

    def add_experiment_branch(self, name: str, branch: StoredBranch) -> None:
        self.store.add_experiment_branch(name, branch)

    def experiment_counts(self, name: str) -> tuple[int, int]:
        return self.store.experiment_counts(name)

    def finish_experiment(self, name: str, *, ended_at: float) -> None:
        self.store.finish_experiment(name, ended_at=ended_at)

    def get_experiment(self, name: str) -> tuple[StoredExperiment, list[StoredBranch]]:
        return self.store.get_experiment(name)

    def list_experiments(self) -> list[StoredExperiment]:
        return self.store.list_experiments()

    # parks, as stored: a park is written straight to the store, never through a journal

    def set_launch(self, launch: Launch) -> None:
        self.store.set_launch(launch)

    def launch(self, run_id: str) -> Launch | None:
        return self.store.launch(run_id)

    def park(self, park: Park) -> None:
        self.store.park(park)

    def add_park(self, park: Park) -> None:
        self.store.add_park(park)

    def run_parks(self, run_id: str) -> list[Park]:
        return self.store.run_parks(run_id)

    def parked(self, run_id: str) -> Park | None:
        return self.store.parked(run_id)

    def last_park(self, run_id: str) -> Park | None:
        return self.store.last_park(run_id)

    def parks(
        self, *, states: Sequence[str] = ("parked",), limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:  # fmt: skip
        return self.store.parks(states=states, limit=limit, after=after)

    def answer(self, exchange: Exchange, *, by: str) -> Park:
        return self.store.answer(exchange, by=by)

    def mark_answered(self, run_id: str, step: int, *, by: str) -> Park:
        return self.store.mark_answered(run_id, step, by=by)

    def due(self, now: float, *, limit: int = 100) -> list[Park]:
        return self.store.due(now, limit=limit)

    def claim_wake(self, run_id: str, step: int, *, by: str, lease: float = WAKE_LEASE) -> bool:
        return self.store.claim_wake(run_id, step, by=by, lease=lease)

    def woke(self, run_id: str, step: int) -> None:
        self.store.woke(run_id, step)

    def wait_for_answers(self, timeout: float) -> list[str]:
        return self.store.wait_for_answers(timeout)

    def close(self) -> None:
        self.store.close()


def _find(ref: str, runs: list[Run]) -> Run | None:
    """A run the journals hold by id, name (the newest) or unique id prefix, as
    `Store.find_run` finds a stored one."""
    for run in runs:
        if run.id == ref:
            return run
    named = sorted((run for run in runs if run.name == ref), key=lambda run: run.id)
    if named:
        return named[-1]
    prefixed = [run for run in runs if len(ref) >= 4 and run.id.lower().startswith(ref.lower())]
    return prefixed[0] if len(prefixed) == 1 else None


def _key(exchange: Exchange) -> str:
    """The key `response_keys` gives a response body, as a store would hold it."""
    manifest = Packer().pack_response(exchange.response_body, {}, lambda _: True).dump()
    return manifest + (dump_pieces(exchange.pieces) or "")
