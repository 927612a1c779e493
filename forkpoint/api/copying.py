"""`copy`: runs moved between stores as they are, e.g. from an SQLite file to the team's
PostgreSQL store and back."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.transfer import copy_runs
from forkpoint.models import Run

__all__ = ["Copied", "copy"]


@dataclass(frozen=True, slots=True)
class Copied:
    """What `copy` did: the runs it copied (with their steps), and those the target had."""

    copied: list[tuple[Run, int]] = field(default_factory=list)
    skipped: list[Run] = field(default_factory=list)


def copy(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    runs: Sequence[str] = (),
    *,
    on_run: Callable[[Run, int | None], None] | None = None,
) -> Copied:
    """Copy `runs` (ids, id prefixes or names; every run if none), with the runs they were
    forked from, from the store at `source` to the one at `target` (each an SQLite path or a
    `postgresql://` URL). A run the target holds already is left as it is. The source is
    only read. `on_run` hears of each run as it is done."""
    copied: list[tuple[Run, int]] = []
    skipped: list[Run] = []
    reader = open_store(source, create=False, read_only=True)
    try:
        writer = open_store(target)
        try:
            for run, steps in copy_runs(reader, writer, runs):
                if steps is None:
                    skipped.append(run)
                else:
                    copied.append((run, steps))
                if on_run is not None:
                    on_run(run, steps)
        finally:
            writer.close()
    finally:
        reader.close()
    return Copied(copied, skipped)
