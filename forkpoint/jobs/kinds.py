"""What a job is: a kind, the agent that runs it, and the ids of what it is about.

Each kind is a procrastinate task of its own name (`forkpoint.KIND`); each agent is a queue
of its own (`forkpoint.AGENT`), so a worker takes only the jobs of the agents it has, by the
library's own queue filter, and a job for an agent no worker has waits for one. A new kind
(a wake, a bisect probe, an import batch) is one more name here and one more handler in
`forkpoint.workers.handlers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forkpoint.errors import ConfigError

__all__ = ["PROBE", "WAKE", "Job", "check_agent_name", "probe", "queue_of", "task_of", "wake"]

PROBE = "probe"  # one fork of an experiment: {experiment, seq, source}
WAKE = "wake"  # the wake of a parked, answered run: {run}
PREFIX = "forkpoint."
# Short: procrastinate's NOTIFY channel is `procrastinate_queue_v1#QUEUE`, and PostgreSQL cuts
# a channel name at 63 bytes.
_AGENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,29}")


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work, by reference: its kind, the agent that runs it and its arguments
    (JSON: ids and numbers, never a command)."""

    kind: str
    agent: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        return task_of(self.kind)

    @property
    def queue(self) -> str:
        return queue_of(self.agent)


def check_agent_name(name: str) -> str:
    """`name` if it can name an agent (letters, digits, `_.-`, at most 30), else ConfigError."""
    if not _AGENT.fullmatch(name):
        raise ConfigError(f"agent name {name!r}: use letters, digits, '_', '.' or '-' (at most 30)")
    return name


def task_of(kind: str) -> str:
    return PREFIX + kind


def queue_of(agent: str) -> str:
    return PREFIX + check_agent_name(agent)


def agent_of(queue: str) -> str | None:
    """The agent a queue is for; None for a queue that is not forkpoint's."""
    return queue.removeprefix(PREFIX) if queue.startswith(PREFIX) else None


def probe(experiment: str, seq: int, source: str, agent: str) -> Job:
    """Fork run `source` for experiment `experiment` (its `seq`th selected run) with `agent`:
    the change, the fork step and the check are the experiment's, read from the store."""
    return Job(PROBE, agent, {"experiment": experiment, "seq": seq, "source": source})


def wake(run_id: str, agent: str) -> Job:
    """Wake parked run `run_id`, answered, with `agent` (the worker's own command for it):
    what it resumes with is the run's launch, read from the store."""
    return Job(WAKE, agent, {"run": run_id})
