"""Pulling agent state at step boundaries, without ever holding up the agent's request.

Each pull runs as its own task with a timeout; whatever it yields — the state, or the reason
it failed — becomes a `Snapshot` handed to the recorder.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from forkpoint.adapters.protocol import Adapter, State
from forkpoint.engine.decide import restore
from forkpoint.engine.session import Session
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Snapshot

log = logging.getLogger(__name__)


class Snapshotter:
    """The adapters of each run, and the pulls in flight."""

    def __init__(self, policy: SnapshotPolicy, submit: Callable[[Exchange | Snapshot], None]):
        self.policy = policy
        self._submit = submit
        self._adapters: dict[str, dict[str, Adapter]] = {}
        self._last_pull: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self, run_id: str, adapter: Adapter) -> None:
        """A later registration under the same name replaces the earlier (a restarted agent)."""
        self._adapters.setdefault(run_id, {})[adapter.name] = adapter

    async def attach(
        self, session: Session, adapter: Adapter, *, moves_agent: bool = True
    ) -> int | None:
        """Register `adapter` for the session's run; in a fork or a resume, first put back the
        snapshot it has there (the engine says which). Returns the step restored from;
        raises CassetteError, naming the snapshot, for a state the adapter refuses.

        `moves_agent` is False for state the agent does not hold itself (a workspace): it is
        restored, but the agent still goes on from wherever its own state says.
        """
        snapshot, replayed = restore(
            session, adapter.name, now=time.time(), moves_agent=moves_agent
        )
        if snapshot is not None:
            try:
                await adapter.restore(State(snapshot.content_type, snapshot.data))
            except ValueError as error:  # a state it refuses (one that leaves its workspace)
                raise CassetteError(
                    f"run {snapshot.run_id} step {snapshot.step}, {adapter.name}: {error}",
                    run_id=snapshot.run_id,
                    step=snapshot.step,
                ) from error
        for exchange in replayed:  # what the snapshot stands for, recorded as replayed
            self._submit(exchange)
        self.register(session.run.id, adapter)
        return None if snapshot is None else snapshot.step

    def on_request(self, run_id: str, step: int, *, llm: bool) -> list[asyncio.Task[None]]:
        """Start the pulls this request is due for; they run while the request goes upstream.

        The caller holds the response until they end (each is bounded by the timeout): the
        agent cannot change its state before the pull has read it, so the snapshot is
        consistent, and a pull slower than the upstream only delays, never fails, the request.
        """
        adapters = self._adapters.get(run_id)
        if not adapters:
            return []
        now = time.monotonic()
        if not self.policy.due(step, llm, now - self._last_pull.get(run_id, 0.0)):
            return []
        self._last_pull[run_id] = now
        started = []
        for adapter in adapters.values():
            task = asyncio.create_task(self._pull(run_id, step, adapter))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(task)
        return started

    async def pull(self, run_id: str, step: int) -> None:
        """Pull every adapter of the run now, whatever the policy: the run parks at `step`
        and its agent is about to end, so this is the state a wake restores."""
        adapters = list(self._adapters.get(run_id, {}).values())
        self._last_pull[run_id] = time.monotonic()
        await asyncio.gather(*(self._pull(run_id, step, adapter) for adapter in adapters))

    def forget(self, run_id: str) -> None:
        """The run's agent is gone (parked): its adapters answer no more."""
        self._adapters.pop(run_id, None)
        self._last_pull.pop(run_id, None)

    async def _pull(self, run_id: str, step: int, adapter: Adapter) -> None:
        started = time.perf_counter()
        try:
            state = await asyncio.wait_for(adapter.pull(), self.policy.timeout)
            snapshot = Snapshot(run_id, step, adapter.name, state.content_type, state.data)
        except TimeoutError:
            snapshot = Snapshot(
                run_id, step, adapter.name, error=f"pull timed out after {self.policy.timeout} s"
            )
        except Exception as error:  # an adapter is the agent's code: any failure is recorded
            snapshot = Snapshot(
                run_id, step, adapter.name, error=f"pull failed: {type(error).__name__}: {error}"
            )
        snapshot.duration_ms = round((time.perf_counter() - started) * 1000, 3)
        if snapshot.error:
            log.warning(
                "forkpoint: run %s step %d, %s: %s", run_id, step, adapter.name, snapshot.error
            )
        self._submit(snapshot)

    async def close(self) -> None:
        """Let the pulls in flight finish (each is bounded by the timeout)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
