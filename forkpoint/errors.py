"""forkpoint's exceptions, all in one place.

    ForkpointError
    ├── CassetteError          the cassette file cannot be used (missing, locked, wrong version)
    │   ├── SchemaVersionError
    │   └── AlreadyRecorded    a run id or a step the store holds already: never rewritten
    │   └── AlreadyAnswered    a parked step has its answer already: exactly one wins
    ├── RunNotFound            no run matches a reference
    ├── NotParked              an answer or a wake for a run that waits on nothing
    ├── ConfigError            bad options (a route, a header list …)
    │   └── MissingExtra       an optional dependency is not installed (also an ImportError)
    └── UpstreamError          the upstream failed: refused, timed out, cut the connection

Each carries the run (and step) it is about where there is one, so a message can name them.
"""

from __future__ import annotations


class ForkpointError(Exception):
    def __init__(self, message: str, *, run_id: str | None = None, step: int | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.step = step


class CassetteError(ForkpointError):
    pass


class SchemaVersionError(CassetteError):
    def __init__(self, message: str, *, found: int, expected: int):
        super().__init__(message)
        self.found = found
        self.expected = expected


class AlreadyRecorded(CassetteError):
    """Raised instead of overwriting: a save is never rewritten. Retrying cannot help."""


class AlreadyAnswered(AlreadyRecorded):
    """A second answer for a parked step (from another replica, a deadline, a person): it
    names who answered first and when, so the loser can say so (HTTP 409)."""

    def __init__(self, message: str, *, run_id: str, step: int, by: str | None, at: float):
        super().__init__(message)
        self.run_id, self.step, self.by, self.at = run_id, step, by, at


class RunNotFound(ForkpointError):
    pass


class NotParked(ForkpointError):
    """An answer or a wake for a run that is not parked (finished, running, never parked)."""


class ConfigError(ForkpointError):
    pass


class MissingExtra(ConfigError, ImportError):
    """A part of forkpoint whose optional dependency (an extra of pyproject.toml) is not
    installed; its message names the extra to install. An ImportError too, so code that
    imports a part it may not have (`except ImportError`) treats it as the import it is."""

    def __init__(self, message: str, *, extra: str):
        super().__init__(message)
        self.extra = extra


class UpstreamError(ForkpointError):
    """`timeout` tells a stall from a refusal, so the gateway can answer 504 rather than 502."""

    def __init__(
        self,
        message: str,
        *,
        timeout: bool = False,
        run_id: str | None = None,
        step: int | None = None,
    ):
        super().__init__(message, run_id=run_id, step=step)
        self.timeout = timeout
