"""The verbs that read a cassette (runs, show, snapshots, diff, export) or add to it from a
file (import). None of them starts a proxy; the readers open the cassette without creating it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from forkpoint.api.options import Options, store_location
from forkpoint.api.results import Imported, RunRecord, RunSnapshots
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store, StoredExperiment
from forkpoint.cassettes.transfer import dump_run, load_file
from forkpoint.compare.diff import RunDiff, diff_stored
from forkpoint.compare.experiment_results import Experiment, load_experiment
from forkpoint.errors import CassetteError
from forkpoint.runtime.recording.journaled import held_exchanges

__all__ = [
    "diff",
    "experiment_list",
    "experiment_results",
    "export_run",
    "held",
    "import_run",
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
    with opened(options) as store:
        return [
            RunRecord(run, store.exchanges(run.id, bodies=False, damaged=damaged))
            for run in store.list_runs(newest=newest, damaged=damaged)
        ]


def held(options: Options = Options()) -> tuple[dict[str, int], Path | None]:
    """Per run, the exchanges a journal holds that the cassette lacks (held while it took no
    writes, or left by a killed proxy until the next one merges them), and where the journals
    are."""
    with opened(options) as store:
        counts, directory = held_exchanges(store)
    return dict(counts), directory


def show(
    run: str, options: Options = Options(), *, damaged: list[CassetteError] | None = None
) -> RunRecord:
    """A run (id, id prefix or name) with its exchanges, without bodies; `damaged` as for
    `runs`."""
    with opened(options) as store:
        found = store.find_run(run)
        return RunRecord(found, store.exchanges(found.id, bodies=False, damaged=damaged))


def snapshots(run: str, options: Options = Options()) -> RunSnapshots:
    """A run's snapshots (without their state), failed pulls included."""
    with opened(options) as store:
        found = store.find_run(run)
        return RunSnapshots(found, store.snapshots(found.id))


def diff(a: str, b: str, options: Options = Options()) -> RunDiff:
    """Runs `a` and `b` compared step by step, with cost and answers (docs/diff-json.md)."""
    with opened(options) as store:
        return diff_stored(store, a, b)


def experiment_results(name: str, options: Options = Options()) -> Experiment:
    """A stored experiment, each branch diffed against the run it was forked from."""
    with opened(options) as store:
        return load_experiment(store, name)


def experiment_list(options: Options = Options()) -> list[tuple[StoredExperiment, int, int]]:
    """Every stored experiment, oldest first, with how many runs it forked and how many of
    those failed."""
    with opened(options) as store:
        found = []
        for stored in store.list_experiments():
            branches = store.get_experiment(stored.name)[1]
            failed = sum(1 for branch in branches if branch.error is not None)
            found.append((stored, len(branches), failed))
        return found


def export_run(run: str, *, fmt: str = "vcr", options: Options = Options()) -> str:
    """A run as the text of a file: `vcr` (YAML that vcrpy plays), `jsonl` or `har`."""
    with opened(options) as store:
        return dump_run(store, run, fmt=fmt)


def import_run(
    path: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    name: str | None = None,
    routes: Mapping[str, str] | None = None,
    options: Options = Options(),
) -> Imported:
    """Add the run in the file at `path` (format by extension or content, unless `fmt`) to
    the cassette as a new run; `routes` map a URL back to a route prefix, as `--route` does."""
    run, exchanges = load_file(Path(path), fmt=fmt, routes=routes)
    imported = replace(run, name=name or run.name)
    with opened(options, write=True) as store:
        store.create_run(imported)
        store.add_exchanges(replace(e, run_id=imported.id) for e in exchanges)
    return Imported(imported, len(exchanges))
