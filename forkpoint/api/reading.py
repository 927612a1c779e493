"""The verbs that read a cassette (runs, show, snapshots, diff, export) or add to it from a
file (import). None of them starts a proxy; the readers open the cassette without creating it,
and read what its journals hold as if merged (`Reader`, `runtime.recording.unmerged`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from forkpoint.api.options import Options, store_location
from forkpoint.api.reader import Reader
from forkpoint.api.results import Imported, RunRecord, RunSnapshots
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store, StoredExperiment
from forkpoint.cassettes.transfer import Atomic, dump_run, import_file, read_file_run
from forkpoint.compare.diff import RunDiff
from forkpoint.compare.experiment_results import Experiment
from forkpoint.errors import CassetteError
from forkpoint.models import Park
from forkpoint.runtime.recording.journaled import held_exchanges

__all__ = [
    "diff",
    "experiment_list",
    "experiment_results",
    "export_run",
    "held",
    "import_run",
    "parks",
    "runs",
    "show",
    "snapshots",
]


@contextmanager
def opened(options: Options, *, write: bool = False) -> Iterator[Store]:
    """The options' cassette, closed after use; a reader never creates one, nor writes."""
    store = open_store(store_location(options.cassette), create=write, read_only=not write)
    try:
        yield store
    finally:
        store.close()


def runs(
    options: Options = Options(), *, newest: int | None = None,
    damaged: list[CassetteError] | None = None,
) -> list[RunRecord]:  # fmt: skip
    """Every run (or the `newest` ones) with its exchanges (without bodies), oldest first. A
    damaged cassette raises a CassetteError naming the run and step; with `damaged`, what does
    not read is left out and its error added there."""
    with Reader(options) as reader:
        view = reader.store
        found = []
        for run in view.list_runs(newest=newest, damaged=damaged):
            exchanges, journaled = view.read(run.id, bodies=False, damaged=damaged)
            found.append(RunRecord(run, exchanges, dict(journaled)))
        return found


def parks(
    options: Options = Options(), *, states: Sequence[str] = ("parked", "answered", "waking"),
    limit: int | None = None, after: str | None = None,
) -> list[Park]:  # fmt: skip
    """The parked runs' parks (what each waits on, since when, until when), by run id, at most
    `limit`, those after run `after`: a page of `forkpoint runs --status parked`."""
    with opened(options) as store:
        return store.parks(states=states, limit=limit, after=after)


def held(options: Options = Options()) -> tuple[dict[str, int], Path | None]:
    """Per run, the exchanges a journal holds that the cassette lacks (held while it took no
    writes, or left by a killed proxy until the next one merges them), and where the journals
    are. The other readers show them already, as if merged."""
    with opened(options) as store:
        counts, directory = held_exchanges(store)
    return dict(counts), directory


def show(
    run: str, options: Options = Options(), *, damaged: list[CassetteError] | None = None
) -> RunRecord:
    """A run (id, id prefix or name) with its exchanges, without bodies; `damaged` as for
    `runs`."""
    with Reader(options) as reader:
        return reader.show(run, damaged=damaged)


def snapshots(run: str, options: Options = Options()) -> RunSnapshots:
    """A run's snapshots (without their state), failed pulls included."""
    with Reader(options) as reader:
        return reader.snapshots(run)


def diff(a: str, b: str, options: Options = Options()) -> RunDiff:
    """Runs `a` and `b` compared step by step, with cost and answers (docs/diff-json.md)."""
    with Reader(options) as reader:
        return reader.diff(a, b)


def experiment_results(name: str, options: Options = Options()) -> Experiment:
    """A stored experiment, each branch diffed against the run it was forked from."""
    with Reader(options) as reader:
        return reader.experiment_results(name)


def experiment_list(options: Options = Options()) -> list[tuple[StoredExperiment, int, int]]:
    """Every stored experiment, oldest first, with how many runs it forked and how many of
    those failed."""
    with Reader(options) as reader:
        return reader.experiment_list()


def export_run(run: str, *, fmt: str = "vcr", options: Options = Options()) -> str:
    """A run as the text of a file: `vcr` (YAML that vcrpy plays), `jsonl` or `har`."""
    with Reader(options) as reader:
        return dump_run(reader.store, run, fmt=fmt)


def import_run(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    name: str | None = None,
    routes: Mapping[str, str] | None = None,
    options: Options = Options(),
) -> Imported:
    """Add the run in the file at `path` (format by extension or content, unless `fmt`) to
    the cassette as a new run; `routes` map a URL back to a route prefix, as `--route` does.
    The file is read an exchange at a time and stored in one transaction: a file that fails
    part-way adds nothing."""
    found = read_file_run(Path(path), fmt=fmt, name=name)  # before the cassette is opened
    with opened(options, write=True) as store:
        # open_store gives an SQL store, whose writes can be one transaction
        steps = import_file(cast(Atomic, store), found, routes=routes)
    return Imported(found.run, steps)
