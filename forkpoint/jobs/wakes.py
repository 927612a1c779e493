"""Wakes on the workers (`Waker.WORKERS`): an answered park becomes a `wake` job on the queue of
the agent its launch names, and the worker that takes it claims the wake itself.

The answering side (serve's wake loop, `forkpoint answer`) only enqueues: the job names the run
and the agent, never a command. One job per run waits at a time (the library's queueing lock),
so a wake loop that sees the same answered park on each pass, or two replicas that both see
it, queue it once; the worker's `claim_wake` decides who wakes it in any case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import procrastinate

from forkpoint.errors import ConfigError
from forkpoint.jobs.kinds import wake
from forkpoint.jobs.queue import JobQueue
from forkpoint.models import Launch

__all__ = ["QueuedWake", "enqueue_wake"]


def enqueue_wake(url: str, launch: Launch) -> bool:
    """Queue the wake of `launch`'s run for a worker with its agent; False when one waits
    already."""
    agent = launch.options.get("agent")
    if not agent:
        raise ConfigError(f"run {launch.run_id} wakes on workers but its launch names no agent",
                          run_id=launch.run_id)  # fmt: skip
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("waking on workers needs a PostgreSQL store (--store postgresql://…)",
                          run_id=launch.run_id)  # fmt: skip
    with JobQueue(url) as queue:
        try:
            queue.enqueue([wake(launch.run_id, str(agent))], lock=f"wake:{launch.run_id}")
        except procrastinate.exceptions.AlreadyEnqueued:
            return False
    return True


class QueuedWake:
    """The wake loop's target for `Waker.WORKERS`: enqueue, never claim (`claims`); the
    worker that takes the job claims the wake and starts the agent."""

    claims = False

    def __init__(self, url: str) -> None:
        self.url = url

    async def start(self, launch: Launch, env: Mapping[str, str]) -> None:
        await asyncio.to_thread(enqueue_wake, self.url, launch)

    async def close(self) -> None:
        return None
