"""Waking parked runs from a long-lived proxy (`serve`): the loop that hears answers, answers
deadlines, claims each wake and hands it to a wake target.

The loop waits on the store (`ParkStore.wait_for_answers`: PostgreSQL's LISTEN/NOTIFY, a poll
elsewhere), then reads the answered parks off their index, so an answer given while no proxy
ran (or to a proxy killed since) wakes its run as soon as one runs again; an answer this proxy
took itself is woken at once (`soon`), without waiting for the store to tell. Each wake is
claimed first (`claim_wake`: of every proxy on the store, exactly one wins), then started by
its launch's target: serve's own proxy (`api.waking.WakeHere`), a local process
(`LocalProcess`: the resume command line, run here) or an `--on-wake` hook (`Hook`: a platform
starts it elsewhere). A wake claimed by a waker that died before it started is claimed again
once its lease is over (`claim_wake`'s), so it is never lost; a wake this loop is starting
itself is never read nor claimed again by its own scan, however long its start takes. Wakes of
launches that wake in the foreground (`record -- CMD`: `forkpoint answer` wakes them) are left
to them.

An answer taken here is woken at once, and the store's news of it (PostgreSQL's NOTIFY, which
comes back to this loop too) starts no scan of its own while the loop scanned within `poll`:
the scan's reads and a second try at the same claim ran beside the wake, on the same pool and
interpreter, and held up its spawn (benchmarks/park_wake.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from forkpoint.cassettes.store import WAKE_LEASE, Store
from forkpoint.engine.launches import resume_line, wake_env
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import ForkpointError
from forkpoint.models import Launch, Park, ParkState, Waker
from forkpoint.runtime.answers import deliver_deadline

log = logging.getLogger(__name__)

# How often the loop looks again when told nothing (s): deadlines, and stores that poll.
POLL = 1.0


class WakeTarget(Protocol):
    """Where a woken agent starts. `start` returns once it has started (or was handed on)."""

    async def start(self, launch: Launch, env: Mapping[str, str]) -> None: ...

    async def close(self) -> None: ...


class LocalProcess:
    """The woken agent as a process here: `forkpoint resume RUN … -- COMMAND`, in the launch's
    directory, in a session of its own (it outlives this proxy)."""

    def __init__(self, program: Sequence[str]):
        self.program = tuple(program)
        self._running: set[asyncio.Task[None]] = set()

    async def start(self, launch: Launch, env: Mapping[str, str]) -> None:
        line = resume_line(launch, program=self.program)
        process = await asyncio.create_subprocess_exec(
            *line, env=dict(env), cwd=launch.cwd, start_new_session=True
        )
        task = asyncio.create_task(self._reap(launch.run_id, process))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    @staticmethod
    async def _reap(run_id: str, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        log.info("forkpoint: woken run %s exited %d", run_id, code)

    async def close(self) -> None:
        """Stop watching the woken agents (they run on: each is its own run's proxy)."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)


class Hook:
    """`--on-wake CMD`: CMD is run with the run id and the resume command line as arguments,
    and as FORKPOINT_RUN and FORKPOINT_RESUME; it starts the agent where it will (a
    Kubernetes Job, a sandbox). Its environment is the woken agent's."""

    def __init__(self, command: Sequence[str] = ()):
        self.command = tuple(command)

    async def start(self, launch: Launch, env: Mapping[str, str]) -> None:
        line = resume_line(launch)
        command = self.command or launch.on_wake
        hooked = {**env, "FORKPOINT_RUN": launch.run_id, "FORKPOINT_RESUME": shlex.join(line)}
        process = await asyncio.create_subprocess_exec(
            *command, launch.run_id, *line, env=hooked, cwd=launch.cwd
        )
        code = await process.wait()
        if code != 0:
            raise ForkpointError(f"--on-wake exited {code}", run_id=launch.run_id)

    async def close(self) -> None:
        return None


class WakeLoop:
    """Hears answers and deadlines, claims wakes and starts them, until stopped."""

    def __init__(
        self,
        store: Store,
        *,
        location: str,
        targets: Mapping[Waker, WakeTarget],
        environ: Mapping[str, str] = os.environ,
        match: MatchConfig = MatchConfig(),
        who: str = "serve",
        poll: float = POLL,
        lease: float = WAKE_LEASE,
    ):
        self.store = store
        self.location = location
        self.targets = targets
        self.environ = environ
        self.match = match
        self.who = who
        self.poll = poll
        self.lease = lease
        self._told: set[tuple[str, int]] = set()  # wakes that cannot start, logged once
        self._soon: set[asyncio.Task[bool]] = set()
        self._answered_here: set[str] = set()  # runs woken by `soon`, until the store tells
        self._starting: set[tuple[str, int]] = set()  # wakes this loop claims and starts now
        self._scanned = 0.0  # when `once` last ran (monotonic)

    async def run(self, stop: asyncio.Event) -> None:
        told: list[str] = []
        while not stop.is_set():
            if not self._only_ours(told):
                try:
                    await self.once()
                except ForkpointError as error:  # a store away for a while: try again
                    log.warning("forkpoint: waking parked runs: %s", error)
            if stop.is_set():
                return
            told = await asyncio.to_thread(self.store.wait_for_answers, self.poll)

    def _only_ours(self, told: list[str]) -> bool:
        """Whether the store told of answers `soon` is waking already, and nothing else, while
        the last scan is recent: no scan for them (deadlines and parks answered elsewhere wait
        no longer than they would for the poll)."""
        ours = self._answered_here.intersection(told)
        self._answered_here -= ours
        recent = time.monotonic() - self._scanned < self.poll
        return bool(told) and len(ours) == len(told) and recent

    async def once(self) -> None:
        """Answer the parks past their deadline, then wake every answered park this loop may."""
        self._scanned = time.monotonic()
        self._answered_here.clear()  # told or not, a scan sees whatever they left
        for park in await asyncio.to_thread(self.store.due, time.time()):
            try:
                await asyncio.to_thread(deliver_deadline, self.store, park, match=self.match)
            except ForkpointError:  # answered meanwhile (a person, another proxy)
                continue
            log.info("forkpoint: run %s step %d answered by its deadline", park.run_id, park.step)
        for park in await asyncio.to_thread(self.store.parks, states=("answered",), limit=100):
            await self.wake(park)
        # claimed, never woken: the claim's lease decides whether its waker is gone
        for park in await asyncio.to_thread(self.store.parks, states=("waking",), limit=100):
            await self.wake(park, again=True)

    def expect(self, run: str) -> None:
        """An answer to `run` is being given through this proxy, which `soon` will wake: the
        store's news of it, which may come back before the answer's call returns (PostgreSQL
        notifies as it commits), starts no scan. An answer refused stays expected until the next
        scan, which comes within `poll`."""
        self._answered_here.add(run)

    def soon(self, park: Park) -> None:
        """Wake `park`, answered through this proxy, now: its claim decides, as the loop's."""
        self._answered_here.add(park.run_id)
        task = asyncio.get_running_loop().create_task(self.wake(park))
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def wake(self, park: Park, *, again: bool = False) -> bool:
        """Claim and start one answered park's wake; False when it is not this loop's.
        `again`: a park claimed already (`waking`), taken again only if its claim lapsed and
        this loop claims its launch's wakes (a worker's job retries its own)."""
        key = (park.run_id, park.step)
        if key in self._starting:  # this loop is at it (`soon`, or a scan): never twice
            return False
        self._starting.add(key)
        try:
            return await self._wake(park, again=again)
        finally:
            self._starting.discard(key)

    async def _wake(self, park: Park, *, again: bool) -> bool:
        launch = await asyncio.to_thread(self.store.launch, park.run_id)
        target = None if launch is None else self.targets.get(launch.waker)
        if again and (target is None or not getattr(target, "claims", True)):
            return False
        if launch is None or target is None:
            return self._cannot(park, "its launch wakes elsewhere (forkpoint wake RUN)")
        if not getattr(target, "claims", True):  # handed on: whoever takes it claims it
            try:
                await target.start(launch, {})
            except (OSError, ForkpointError) as error:
                return self._cannot(park, str(error))
            return False
        try:
            env = wake_env(launch, self.environ, store=self.location)
        except ForkpointError as error:
            return self._cannot(park, str(error))
        claimed = await asyncio.to_thread(
            self.store.claim_wake, park.run_id, park.step, by=self.who, lease=self.lease
        )
        if not claimed:
            return False
        if park.state is ParkState.WAKING:
            log.warning("forkpoint: run %s was claimed by a waker lost mid-wake; waking it",
                        park.run_id)  # fmt: skip
        try:
            await target.start(launch, env)
        except (OSError, ForkpointError) as error:
            log.warning("forkpoint: run %s could not be woken: %s", park.run_id, error)
            return False
        await asyncio.to_thread(self.store.woke, park.run_id, park.step)
        log.info("forkpoint: run %s woken (%s)", park.run_id, launch.waker)
        return True

    def _cannot(self, park: Park, why: str) -> bool:
        if (park.run_id, park.step) not in self._told:
            self._told.add((park.run_id, park.step))
            log.warning("forkpoint: run %s is answered but not woken here: %s", park.run_id, why)
        return False

    async def close(self) -> None:
        if self._soon:
            await asyncio.gather(*self._soon, return_exceptions=True)
        for target in self.targets.values():
            await target.close()
