"""The `wake` job: a worker wakes a parked, answered run with its own command for the agent
the run's launch names, through `forkpoint resume`'s code (its in-process proxy recording into
the shared store), exactly as `forkpoint wake` does on a machine.

Exactly once: the worker claims the wake (`ParkStore.claim_wake`, answered -> waking) before
anything starts; a job that finds the wake claimed by someone else does nothing. A worker that
dies after claiming is not the end of it: the library retries its job (the lease), and a retry
that finds the park `waking` (claimed, never marked woken) or the run woken but not ended
(its agent died with the worker) resumes it, as a crashed run is resumed; a run that ended is
left alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any

from forkpoint.api.commands import aresume
from forkpoint.api.parking import resume_options
from forkpoint.cassettes.store import Store, location_of
from forkpoint.engine.launches import wake_env
from forkpoint.errors import ConfigError
from forkpoint.models import Launch, ParkState, RunStatus
from forkpoint.workers.handlers import Aborted, Work, on_own_loop

__all__ = ["WakeHandler"]

log = logging.getLogger("forkpoint.worker")


class WakeHandler:
    """Claims a run's wake and resumes it with this worker's command for its agent."""

    async def run(self, work: Work) -> None:
        run_id = str(work.args["run"])
        launch = await asyncio.to_thread(_to_wake, work.store, run_id, work.agent.name,
                                         f"worker {work.agent.name}", work.retried)  # fmt: skip
        if launch is None:
            return
        location = location_of(work.store)
        if location is None:
            raise ConfigError("a worker needs a store other processes can open (PostgreSQL)")
        env = wake_env(launch, os.environ)
        options = resume_options(launch, cassette=location, env=env)
        result = await on_own_loop(aresume(run_id, work.agent.command, options))
        if work.should_abort():
            raise Aborted(f"the wake of run {run_id} was cancelled")
        log.info("forkpoint worker: run %s woken with agent %s: %s (exit %d)",
                 run_id, work.agent.name, result.status, result.exit_code)  # fmt: skip

    def give_up(self, store: Store, args: Mapping[str, Any], reason: str) -> None:
        log.warning("forkpoint worker: the wake of run %s failed: %s", args.get("run"), reason)


def _to_wake(store: Store, run_id: str, agent: str, by: str, retried: bool) -> Launch | None:
    """The launch to resume `run_id` with, once this worker holds its wake; None when there
    is nothing for it to do (another waker has it, or the run is done)."""
    launch = store.launch(run_id)
    if launch is None or launch.options.get("agent") != agent:
        raise ConfigError(f"run {run_id} does not wake with agent {agent!r}", run_id=run_id)
    park = store.parked(run_id)
    if park is not None and park.state is ParkState.ANSWERED:
        if store.claim_wake(run_id, park.step, by=by):
            store.woke(run_id, park.step)
            return launch
        park = store.parked(run_id)
    if not retried:
        log.info("forkpoint worker: the wake of run %s is another waker's", run_id)
        return None
    # a retry: the try before claimed it and was lost (its worker killed), mid-wake
    if park is not None and park.state is ParkState.WAKING:
        store.woke(run_id, park.step)
        log.warning("forkpoint worker: run %s was claimed by a lost worker; waking it", run_id)
        return launch
    if park is None and store.get_run(run_id).status in (RunStatus.RUNNING, RunStatus.CRASHED):
        log.warning("forkpoint worker: run %s was woken by a lost worker and did not end; "
                    "resuming it", run_id)  # fmt: skip
        return launch
    return None
