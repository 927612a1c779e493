"""`Reader`: the reading verbs over one cassette held open, for a reader that lives long and
reads often (the web view), where opening the store on every call (a PostgreSQL pool, say)
would cost more than the read.

It opens the cassette read-only on first use, so a reader made before anything was recorded
(`forkpoint serve` mounting the web view over a store it is about to create) still works, and
never writes to it. It reads what the cassette's journals hold as if merged, and shows a run
whose recording process is gone as `crashed` (`runtime.recording.unmerged`). Calls may come
from several threads; the stores serialize them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import TracebackType

from forkpoint.api.options import Options, store_location
from forkpoint.api.results import RunRecord, RunSnapshots
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import StoredExperiment
from forkpoint.compare.diff import RunDiff, diff_stored
from forkpoint.compare.experiment_results import Experiment, load_experiment
from forkpoint.compare.experiment_select import parse_filter
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Launch, Park, Run
from forkpoint.runtime.recording.unmerged import Unmerged

__all__ = ["Reader"]


class Reader:
    """`with Reader(options) as reader: reader.show("ticket-1")`: one store, read-only."""

    def __init__(self, options: Options = Options()) -> None:
        self.location = store_location(options.cassette)
        self._store: Unmerged | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    @property
    def store(self) -> Unmerged:
        """The cassette, read-only, with its journals as if merged."""
        with self._lock:
            if self._store is None:
                # a journaled exchange's fingerprint with the default settings: readers show
                # no fingerprint, and a project's normalizers need not import to read it
                store = open_store(self.location, create=False, read_only=True)
                self._store = Unmerged(store)
            return self._store

    def runs(
        self, filters: Sequence[str] = (), *, damaged: list[CassetteError] | None = None
    ) -> list[Run]:
        """Every run, oldest first, without its exchanges (a cassette of thousands reads in
        one query); `filters` as `experiment --select` takes them (`label:K=V`, `name:GLOB`,
        `status:S`, `since:`, `until:`, `parent:RUN`, `mode:M`), all of which must hold."""
        store = self.store
        tests = [parse_filter(text, store).test for text in filters]
        return [r for r in store.list_runs(damaged=damaged) if all(t(r) for t in tests)]

    def run(self, ref: str) -> Run:
        """A run by id, id prefix or name."""
        return self.store.find_run(ref)

    def show(self, ref: str, *, damaged: list[CassetteError] | None = None) -> RunRecord:
        """A run with its exchanges, without bodies (chunks keep their offsets)."""
        found = self.store.find_run(ref)
        exchanges, journaled = self.store.read(found.id, bodies=False, damaged=damaged)
        return RunRecord(found, exchanges, dict(journaled))

    def exchanges(
        self, run_id: str, *, bodies: bool = False, damaged: list[CassetteError] | None = None
    ) -> list[Exchange]:
        """A run's exchanges in step order; with `bodies`, their bytes (pieces named only);
        `damaged` as for `runs`."""
        return self.store.exchanges(run_id, bodies=bodies, damaged=damaged)

    def step_count(self, run_id: str) -> int:
        """How many exchanges of a run are stored: a cheap test for new ones."""
        return self.store.step_count(run_id)

    def snapshots(self, ref: str) -> RunSnapshots:
        found = self.store.find_run(ref)
        return RunSnapshots(found, self.store.snapshots(found.id))

    def diff(self, a: str, b: str) -> RunDiff:
        return diff_stored(self.store, a, b)

    def experiment_results(self, name: str) -> Experiment:
        return load_experiment(self.store, name)

    def parks(
        self, states: Sequence[str] = ("parked",), *, limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:  # fmt: skip
        """Parks in `states` by run id (a page: at most `limit`, runs after `after`)."""
        return self.store.parks(states=states, limit=limit, after=after)

    def parked(self, run_id: str) -> Park | None:
        """The run's park not yet woken (parked, answered or waking), else None."""
        return self.store.parked(run_id)

    def launch(self, run_id: str) -> Launch | None:
        """How the run's agent started (what wakes it), if the run keeps it."""
        return self.store.launch(run_id)

    def experiment_list(self) -> list[tuple[StoredExperiment, int, int]]:
        """Every stored experiment, oldest first, with how many runs it forked and how many of
        those failed."""
        store = self.store
        found = []
        for stored in store.list_experiments():
            branches = store.get_experiment(stored.name)[1]
            failed = sum(1 for branch in branches if branch.error is not None)
            found.append((stored, len(branches), failed))
        return found
