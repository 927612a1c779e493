"""What each kind of job means: one handler per kind, over the same API the local commands use.

A handler gets a `Work`: the job's arguments, the agent it names (this worker's own command),
the worker's store, and whether this is a retry. `run` does the job; `give_up` records, for
a job that failed its last try or whose workers were all lost, why it has no result, so it is
reported rather than missing. A new kind (the wake of a parked run, a bisect probe, a batch
of traces to import) is one more handler in `HANDLERS` and one more name in `jobs.kinds`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from forkpoint.api.experiments import Prober, stored_spec
from forkpoint.api.on_workers import finish_if_complete
from forkpoint.cassettes.store import Store, StoredBranch, location_of
from forkpoint.compare.experiment_check import load_check
from forkpoint.errors import AlreadyRecorded, ConfigError
from forkpoint.jobs import PROBE, WAKE
from forkpoint.models import RunStatus
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.workers.agents import Agent

__all__ = ["HANDLERS", "Aborted", "Handler", "Work"]

log = logging.getLogger("forkpoint.worker")
LOST = "its worker was lost mid-probe (killed, or cut off past its lease); the probe was retried"


class Aborted(Exception):
    """The job was cancelled (or the worker is stopping) while it ran: nothing is stored."""


@dataclass(frozen=True, slots=True)
class Work:
    """One job as a handler sees it."""

    args: Mapping[str, Any]
    agent: Agent
    store: Store  # the worker's, shared by its jobs; its calls go on threads
    retried: bool  # an earlier try of this job ran somewhere (and may have left a run)
    should_abort: Callable[[], bool]
    probers: dict[tuple[str, str], Prober] = field(default_factory=dict)  # the worker's cache


class Handler(Protocol):
    async def run(self, work: Work) -> None: ...

    def give_up(self, store: Store, args: Mapping[str, Any], reason: str) -> None: ...


class ProbeHandler:
    """A probe of an experiment: the experiment's `Prober` (the local path's), with the
    command this worker has for the agent; its branch stored once."""

    async def run(self, work: Work) -> None:
        name, seq, source_id = work.args["experiment"], int(work.args["seq"]), work.args["source"]
        store = work.store
        if work.retried:
            _, stored = await asyncio.to_thread(store.get_experiment, name)
            if any(branch.seq == seq for branch in stored):
                log.info("forkpoint worker: probe %d of %s was stored already", seq, name)
                return
            await asyncio.to_thread(_crash_leftovers, store, name, source_id)
        prober = await self._prober(work, name)
        source = await asyncio.to_thread(store.get_run, source_id)
        with tempfile.TemporaryDirectory(prefix="forkpoint-worker-") as logs:
            branch = await on_own_loop(prober.probe(seq, source, Path(logs)))
        if work.should_abort():
            raise Aborted(f"probe {seq} of {name} was cancelled")
        await asyncio.to_thread(_store_once, store, name, branch)

    def give_up(self, store: Store, args: Mapping[str, Any], reason: str) -> None:
        name, seq, source_id = args["experiment"], int(args["seq"]), args["source"]
        _crash_leftovers(store, name, source_id)
        _store_once(store, name, StoredBranch(seq, source_id, None, reason, {"at": None}))

    async def _prober(self, work: Work, name: str) -> Prober:
        key = (name, work.agent.name)
        if key not in work.probers:
            work.probers[key] = await asyncio.to_thread(_prober, work.store, name, work.agent)
        return work.probers[key]


async def on_own_loop[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """`coroutine` on a loop of its own, on a thread, as the local pool runs a probe: a fork's
    start (its store opened, the proxy's imports) never holds up this worker's loop and so its
    heartbeat. Cancelled (the job aborted), it is cancelled there too and waited for: the
    agent is stopped and its run ended before this returns."""
    thread = LoopThread("forkpoint-probe")
    stop = asyncio.Event()  # bound to the thread's loop when it is first waited on there
    done = asyncio.run_coroutine_threadsafe(_stoppable(coroutine, stop), thread.loop)
    try:
        return await asyncio.shield(asyncio.wrap_future(done))
    except asyncio.CancelledError:
        thread.loop.call_soon_threadsafe(stop.set)
        with contextlib.suppress(BaseException):
            await asyncio.wrap_future(done)
        raise
    finally:
        thread.close()


async def _stoppable[T](coroutine: Coroutine[Any, Any, T], stop: asyncio.Event) -> T:
    work = asyncio.ensure_future(coroutine)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    work.cancel()  # nothing when it is done
    return await work


def _prober(store: Store, name: str, agent: Agent) -> Prober:
    found = [e for e in store.list_experiments() if e.name == name]
    if not found:
        raise ConfigError(f"no experiment {name!r} in the store")
    spec, options = stored_spec(name, found[0].spec)
    location = location_of(store)
    if location is None:
        raise ConfigError("a worker needs a store other processes can open (PostgreSQL)")
    options = replace(options, cassette=location)
    check = load_check(spec.check) if spec.check else None
    return Prober(spec, options, name, store, check, agent.command, store_errors_retry=True)


def _store_once(store: Store, name: str, branch: StoredBranch) -> None:
    """Store `branch`; a probe another worker stored already counts once (the run this try
    made stays in the store, uncounted), then end the experiment if that was its last probe."""
    try:
        store.add_experiment_branch(name, branch)
    except AlreadyRecorded:
        log.warning(
            "forkpoint worker: probe %d of %s was stored by another worker; this try's run %s "
            "is not counted", branch.seq, name, branch.branch_id or "-",
        )  # fmt: skip
    total = next((e.spec.get("probes") for e in store.list_experiments() if e.name == name), None)
    if isinstance(total, int):
        finish_if_complete(store, name, total)


def _crash_leftovers(store: Store, name: str, source_id: str) -> None:
    """Mark `crashed` the runs an earlier try of this probe left `running` (its worker was
    killed): a branch of `source_id` labelled with this experiment. Only on a retry, which
    is rare: it reads every run."""
    for run in store.list_runs():
        if run.parent_id != source_id or run.labels.get("experiment") != name:
            continue
        if run.status is not RunStatus.RUNNING:
            continue
        store.finish_run(run.id, RunStatus.CRASHED, error=LOST)
        log.warning("forkpoint worker: run %s of probe %s/%s marked crashed: %s",
                    run.id, name, source_id, LOST)  # fmt: skip


def _handlers() -> dict[str, Handler]:
    from forkpoint.workers.wakes import WakeHandler  # it imports this module's Work

    return {PROBE: ProbeHandler(), WAKE: WakeHandler()}


HANDLERS: dict[str, Handler] = _handlers()
