"""The `Store` protocol: what the proxy and the CLI need from a cassette, whatever holds it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from forkpoint.cassettes.models import Exchange, Run, RunStatus, Snapshot


class Store(Protocol):
    """A cassette. Writes are durable when the call returns; a closed store refuses calls."""

    def create_run(self, run: Run) -> None: ...

    def finish_run(
        self,
        run_id: str,
        status: RunStatus,
        *,
        error: str | None = None,
        fork_step: int | None = None,
    ) -> None: ...

    def get_run(self, run_id: str) -> Run: ...

    def find_run(self, ref: str) -> Run:
        """A run by id, unique id prefix or name (newest first); raises RunNotFound."""
        ...

    def list_runs(self) -> list[Run]: ...

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        """Store completed exchanges, all in one transaction."""
        ...

    def exchanges(self, run_id: str, *, bodies: bool = True) -> list[Exchange]:
        """A run's exchanges in step order; `bodies=False` skips loading request/response bytes."""
        ...

    def step_count(self, run_id: str) -> int: ...

    def add_snapshot(self, snapshot: Snapshot) -> None: ...

    def snapshots(self, run_id: str, *, data: bool = False) -> list[Snapshot]: ...

    def latest_snapshots(self, run_id: str, *, at_most: int | None = None) -> list[Snapshot]:
        """For each adapter, its newest good snapshot at a step <= `at_most`, state loaded."""
        ...

    def close(self) -> None: ...
