"""forkpoint's exceptions, all in one place.

    ForkpointError
    ├── CassetteError          the cassette file cannot be used (missing, locked, wrong version)
    │   ├── SchemaVersionError
    │   └── AlreadyRecorded    a run id or a step the store holds already: never rewritten
    ├── RunNotFound            no run matches a reference
    ├── ConfigError            bad options (a route, a header list …)
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


class RunNotFound(ForkpointError):
    pass


class ConfigError(ForkpointError):
    pass


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
