"""Pulling agent state at step boundaries, without ever holding up the agent's request.

Each pull runs as its own task with a timeout; whatever it yields — the state, or the reason
it failed — becomes a `Snapshot` handed to the recorder.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from forkpoint.adapters.protocol import Adapter
from forkpoint.errors import ConfigError
from forkpoint.models import Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When to pull: at each LLM request, and/or every N exchanges, and/or every T seconds."""

    on_llm: bool = True
    every_steps: int | None = None
    every_seconds: float | None = None
    timeout: float = 2.0

    @classmethod
    def parse(cls, text: str | None, *, timeout: float = 2.0) -> SnapshotPolicy:
        """`llm` (the default), `N` exchanges, `Ts` seconds, or `off`."""
        if text in (None, "llm"):
            return cls(timeout=timeout)
        assert text is not None
        if text == "off":
            return cls(on_llm=False, timeout=timeout)
        try:
            if text.endswith("s"):
                return cls(on_llm=False, every_seconds=float(text[:-1]), timeout=timeout)
            return cls(on_llm=False, every_steps=int(text), timeout=timeout)
        except ValueError:
            raise ConfigError(f"--snapshot-every takes llm, off, N or Ts, not {text!r}") from None

    def due(self, step: int, llm: bool, since_last: float) -> bool:
        return (
            (self.on_llm and llm)
            or (self.every_steps is not None and step % self.every_steps == 0)
            or (self.every_seconds is not None and since_last >= self.every_seconds)
        )


class Snapshotter:
    """The adapters of each run, and the pulls in flight."""

    def __init__(self, policy: SnapshotPolicy, submit: Callable[[Snapshot], None]):
        self.policy = policy
        self._submit = submit
        self._adapters: dict[str, dict[str, Adapter]] = {}
        self._last_pull: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self, run_id: str, adapter: Adapter) -> None:
        """A later registration under the same name replaces the earlier (a restarted agent)."""
        self._adapters.setdefault(run_id, {})[adapter.name] = adapter

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
