"""The agents a worker may run: a name and a command template, from the worker's own
configuration (`--agent NAME=COMMAND`, `[agents]` in forkpoint.toml or `[tool.forkpoint.agents]`).

A job names an agent and never carries a command: a worker runs only what it was configured
with, with its own environment (so the agent's keys are the worker's). The command is split
as a shell would split it, but run without one; `{run}`, `{name}` and `{label:KEY}` are filled
in per run as in an experiment's command, each within its own argument.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from forkpoint.errors import ConfigError
from forkpoint.jobs import check_agent_name

__all__ = ["Agent", "parse_agents"]


@dataclass(frozen=True, slots=True)
class Agent:
    name: str
    command: tuple[str, ...]


def parse_agents(
    given: Sequence[str], configured: Iterable[tuple[str, str]] = ()
) -> dict[str, Agent]:
    """The agents of `configured` (name, command) pairs, then of `given` `NAME=COMMAND`
    texts, which replace a configured one of the same name."""
    agents: dict[str, Agent] = {}
    pairs = [*configured, *(_split(text) for text in given)]
    for name, command in pairs:
        try:
            argv = tuple(shlex.split(command))
        except ValueError as error:
            raise ConfigError(f"agent {name!r}: its command does not parse: {error}") from None
        if not argv:
            raise ConfigError(f"agent {name!r} has no command")
        agents[check_agent_name(name)] = Agent(name, argv)
    return agents


def _split(text: str) -> tuple[str, str]:
    name, sep, command = text.partition("=")
    if not sep:
        raise ConfigError(f"--agent {text!r}: give NAME=COMMAND, e.g. support='python agent.py'")
    return name.strip(), command
