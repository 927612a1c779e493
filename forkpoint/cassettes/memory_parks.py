"""The memory store's `ParkStore`: parks and launches in dictionaries, each transition made
under the store's lock (one process holds a memory store, so its lock is every writer's), and
waiters told through a condition rather than a poll."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence

from forkpoint.cassettes.park_rows import (
    PENDING,
    already_answered,
    answered_at,
    not_parked,
    states_of,
)
from forkpoint.cassettes.store import WAKE_LEASE
from forkpoint.errors import AlreadyRecorded, CassetteError, RunNotFound
from forkpoint.models import (
    Exchange,
    Kind,
    Launch,
    Park,
    ParkState,
    Run,
    RunStatus,
    Snapshot,
    Summary,
)


class MemoryParks:
    """Mixed into `MemoryStore`, whose lock, runs and exchanges it shares."""

    label: str
    _lock: threading.Lock
    _runs: dict[str, Run]
    _exchanges: dict[str, dict[int, Exchange]]
    _snapshots: dict[str, dict[tuple[int, str], Snapshot]]
    _open: Callable[[], None]  # raises CassetteError once the store is closed

    def _init_parks(self) -> None:
        self._parks: dict[tuple[str, int], Park] = {}
        self._launches: dict[str, Launch] = {}
        self._answered = threading.Condition(self._lock)
        self._reported: set[tuple[str, int]] = set()  # answers `wait_for_answers` told of
        self._claimed: dict[tuple[str, int], float] = {}  # when each wake was claimed

    def _run(self, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotFound(f"no run {run_id!r} in {self.label}", run_id=run_id)
        return run

    def set_launch(self, launch: Launch) -> None:
        with self._lock:
            self._open()
            self._run(launch.run_id)
            self._launches[launch.run_id] = copy.deepcopy(launch)

    def launch(self, run_id: str) -> Launch | None:
        with self._lock:
            self._open()
            return copy.deepcopy(self._launches.get(run_id))

    def park(self, park: Park) -> None:
        self._insert_park(park, parking=True)

    def add_park(self, park: Park) -> None:
        self._insert_park(park, parking=False)

    def _insert_park(self, park: Park, *, parking: bool) -> None:
        with self._lock:
            self._open()
            run = self._run(park.run_id)
            key = (park.run_id, park.step)
            recorded = park.step in self._exchanges.get(park.run_id, {})
            if key in self._parks or (parking and recorded):
                raise AlreadyRecorded(
                    f"{self.label} already holds run {park.run_id} step {park.step}, parked or "
                    "answered: it is never rewritten",
                    run_id=park.run_id, step=park.step,
                )  # fmt: skip
            self._parks[key] = copy.deepcopy(park)
            if parking:
                run.status, run.ended_at = RunStatus.PARKED, None

    def parked(self, run_id: str) -> Park | None:
        with self._lock:
            self._open()
            waiting = [p for (r, _), p in self._parks.items() if r == run_id and p.state in PENDING]
            newest = max(waiting, key=lambda p: p.step, default=None)
            return copy.deepcopy(newest)

    def run_parks(self, run_id: str) -> list[Park]:
        with self._lock:
            self._open()
            mine = [p for (r, _), p in self._parks.items() if r == run_id]
            return copy.deepcopy(sorted(mine, key=lambda p: p.step))

    def last_park(self, run_id: str) -> Park | None:
        with self._lock:
            self._open()
            mine = [p for (r, _), p in self._parks.items() if r == run_id]
            return copy.deepcopy(max(mine, key=lambda p: p.step, default=None))

    def parks(
        self,
        *,
        states: Sequence[str] = ("parked",),
        limit: int | None = None,
        after: str | None = None,
    ) -> list[Park]:
        wanted = states_of(states)
        with self._lock:
            self._open()
            found = sorted(
                (key, park)
                for key, park in self._parks.items()
                if park.state in wanted and (after is None or key[0] > after)
            )
            return [copy.deepcopy(park) for _, park in found[:limit]]

    def answer(self, exchange: Exchange, *, by: str) -> Park:
        with self._lock:
            self._open()
            park = self._waiting(exchange.run_id, exchange.step)
            stored = copy.copy(exchange)  # as `add_exchanges` keeps one: its own chunk list
            stored.chunks = None if exchange.chunks is None else list(exchange.chunks)
            stored.summary = stored.summary or Summary(Kind.OTHER, "generic")
            self._exchanges[exchange.run_id][exchange.step] = stored
            return self._answered_by(park, by)

    def mark_answered(self, run_id: str, step: int, *, by: str) -> Park:
        with self._lock:
            self._open()
            park = self._waiting(run_id, step, answered=True)
            if step not in self._exchanges.get(run_id, {}):
                raise CassetteError(
                    f"run {run_id} step {step} has no exchange in {self.label} yet: "
                    "store its answer first", run_id=run_id, step=step,
                )  # fmt: skip
            return self._answered_by(park, by)

    def _waiting(self, run_id: str, step: int, *, answered: bool = False) -> Park:
        """The park at (run, step) still waiting for its answer, or the error saying why not.
        With `answered`, the step's exchange is its answer; else one there is a first answer."""
        run = self._run(run_id)
        park = self._parks.get((run_id, step))
        if park is None:
            pending = sorted(s for (r, s), p in self._parks.items()
                             if r == run_id and p.state is ParkState.PARKED)  # fmt: skip
            raise not_parked(run_id, step, run.status, pending)
        if park.state is not ParkState.PARKED:
            raise already_answered(run_id, step, park.answered_by, park.answered_at)
        exchange = self._exchanges.get(run_id, {}).get(step)
        if exchange is not None and not answered:
            raise already_answered(run_id, step, None, answered_at(exchange))
        return park

    def _answered_by(self, park: Park, by: str) -> Park:
        park.state, park.answered_at, park.answered_by = ParkState.ANSWERED, time.time(), by
        self._answered.notify_all()
        return copy.deepcopy(park)

    def due(self, now: float, *, limit: int = 100) -> list[Park]:
        with self._lock:
            self._open()
            found = sorted(
                ((p.deadline, key), p)
                for key, p in self._parks.items()
                if p.state is ParkState.PARKED and p.deadline is not None and p.deadline <= now
            )
            return [copy.deepcopy(park) for _, park in found[:limit]]

    def claim_wake(self, run_id: str, step: int, *, by: str, lease: float = WAKE_LEASE) -> bool:
        with self._lock:
            self._open()
            key, now = (run_id, step), time.time()
            park = self._parks.get(key)
            if park is None or park.state not in (ParkState.ANSWERED, ParkState.WAKING):
                return False
            if park.state is ParkState.WAKING and (
                self._claimed.get(key, 0.0) > now - lease or self._went_on(run_id, step)
            ):
                return False
            park.state, self._claimed[key] = ParkState.WAKING, now
            return True

    def _went_on(self, run_id: str, step: int) -> bool:
        """Whether the run recorded anything after `step` (its woken agent got somewhere)."""
        later = any(s > step for s in self._exchanges.get(run_id, {}))
        return later or any(s > step for s, _ in self._snapshots.get(run_id, {}))

    def woke(self, run_id: str, step: int) -> None:
        with self._lock:
            self._open()
            run = self._run(run_id)
            park = self._parks.get((run_id, step))
            if park is None or park.state is not ParkState.WAKING:
                raise not_parked(run_id, step, run.status, [])
            park.state, park.woken_at = ParkState.WOKEN, time.time()
            if run.status is RunStatus.PARKED:  # not moved on by its woken agent already
                run.status, run.ended_at, run.error = RunStatus.RUNNING, None, None

    def wait_for_answers(self, timeout: float) -> list[str]:
        """The runs of parks answered that this store has not told of yet (those answered
        before the first call included), waiting up to `timeout` seconds for one."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                self._open()
                answered = {k for k, p in self._parks.items() if p.state is ParkState.ANSWERED}
                self._reported &= answered  # a park claimed since is no longer news
                news = sorted(answered - self._reported)
                left = deadline - time.monotonic()
                if news or left <= 0:
                    self._reported |= set(news)
                    return list(dict.fromkeys(run_id for run_id, _ in news))
                self._answered.wait(left)
