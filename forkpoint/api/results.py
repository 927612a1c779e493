"""What the verbs return: typed results, never bare tuples."""

from __future__ import annotations

from dataclasses import dataclass

from forkpoint.models import Exchange, Run, RunStatus, Snapshot


@dataclass(frozen=True, slots=True)
class RunResult:
    """A command run under forkpoint: its run, how it ended, and the command's exit code
    (negative: killed by that signal)."""

    run_id: str
    exit_code: int
    status: RunStatus
    steps: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A run as the cassette holds it, with its exchanges (bodies not loaded)."""

    run: Run
    exchanges: list[Exchange]


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
