"""What the verbs return: typed results, never bare tuples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from forkpoint.models import Exchange, Park, Run, RunStatus, Snapshot


@dataclass(frozen=True, slots=True)
class RunResult:
    """A command run under forkpoint: its run, how it ended, and the command's exit code
    (negative: killed by that signal).

    recorded: how many recorded exchanges the run was to be served from its cassette (side
        calls aside): a replay's whole recording, a fork's steps before its fork step, a
        resume's received steps; 0 for a recording.
    unserved: the steps of those the agent never asked for: a client that bypassed the proxy,
        an agent that stopped early (unless `Options.allow_unserved`, the run's error says so).
    unapplied: what of a fork's change ("model", "system_prompt", "patch") touched no request.
    parked: the run's park, when it parked (its agent was ended: `status` is `parked`).
    """

    run_id: str
    exit_code: int
    status: RunStatus
    steps: int
    recorded: int = 0
    unserved: tuple[int, ...] = ()
    unapplied: tuple[str, ...] = ()
    parked: Park | None = None

    @property
    def served(self) -> int:
        """How many of the recorded exchanges were served."""
        return self.recorded - len(self.unserved)


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the cassette holds it, with its exchanges (bodies not loaded). `journaled`:
    the steps read from a journal (a killed proxy's, or one held while the store took no
    writes), not in the cassette yet, each with whether its number is provisional (a request
    of a run several proxies serve, which the store has not numbered)."""

    run: Run
    exchanges: list[Exchange]
    journaled: dict[int, bool] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunSnapshots:
    """A run's snapshots (state not loaded), failed pulls included."""

    run: Run
    snapshots: list[Snapshot]


@dataclass(frozen=True, slots=True)
class Imported:
    """A run added to the cassette from a file."""

    run: Run
    steps: int


def unserved_error(recorded: int, unserved: Sequence[int]) -> str:
    """Why a replay that left recorded exchanges unserved did not replay its recording."""
    steps = ", ".join(map(str, unserved[:10])) + (", …" if len(unserved) > 10 else "")
    return (
        f"served {recorded - len(unserved)} of {recorded} recorded exchanges: the agent never "
        f"asked for step{'s' if len(unserved) > 1 else ''} {steps} (a client that bypassed "
        "the proxy, or an agent that stopped early)"
    )
