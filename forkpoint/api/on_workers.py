"""Experiments on workers: the probes put on the job queue, followed, cancelled.

`submit_experiment` stores the experiment as `experiment` does, its spec naming an agent
instead of a command (and how many probes it has), and puts one `probe` job per selected run
on the queue in the store's database (`forkpoint.jobs`). Workers (`forkpoint worker`) take
them, each running the same `Prober` as a local experiment with the command it has for that
agent, and store each branch once (`add_experiment_branch` refuses a second). The results
are read as any experiment's (`experiment_results`), from any machine, while it runs too.
`experiment_progress` counts from the store (done, failed) and the queue (running, queued);
`cancel_experiment` cancels through the queue library and marks the experiment ended.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from forkpoint.api.experiments import ExperimentSpec, check_spec, default_name
from forkpoint.api.options import Options, store_location
from forkpoint.cassettes.open import is_postgres, open_store
from forkpoint.cassettes.store import Store, StoredExperiment
from forkpoint.compare.experiment_check import load_check
from forkpoint.compare.experiment_select import select_runs
from forkpoint.errors import CassetteError, ConfigError

if TYPE_CHECKING:
    from forkpoint.jobs import QueueCounts

__all__ = [
    "Progress", "cancel_experiment", "experiment_progress", "submit_experiment",
    "watch_experiment",
]  # fmt: skip

POLL = 1.0  # seconds between two looks at a running experiment


@dataclass(frozen=True, slots=True)
class Progress:
    """Where an experiment on workers stands. `done` counts every branch stored, `failed`
    those among them that failed; `running` and `queued` are the queue's."""

    name: str
    total: int
    done: int
    failed: int
    running: int
    queued: int
    ended: bool  # finished (every probe stored) or cancelled


def submit_experiment(spec: ExperimentSpec, options: Options = Options()) -> str:
    """Store the experiment and queue one probe per selected run for the workers that have
    `spec.agent`; its name. Nothing is queued when it cannot be: no run selected, a check that
    does not load here, a store that is no PostgreSQL database."""
    jobs = _jobs()
    check_spec(spec)
    if spec.agent is None:
        raise ConfigError("name the agent the workers run: --agent NAME")
    jobs.check_agent_name(spec.agent)
    path = store_location(options.cassette)
    if not is_postgres(path):
        raise ConfigError(
            "--on-workers needs a PostgreSQL store that the workers share: --store postgresql://…"
        )
    store = open_store(path)
    try:
        sources = select_runs(store, spec.runs, spec.select)
        if not sources:
            raise ConfigError(f"no run in the store matches {' '.join(spec.select)}")
        if spec.check:
            load_check(spec.check)  # a typo fails here, not once on every worker
        name = spec.name or default_name(store)
        document = {**spec.to_json(options), "probes": len(sources)}
        store.create_experiment(StoredExperiment(name, time.time(), None, document))
        with jobs.JobQueue(path) as queue:
            queue.enqueue(
                [jobs.probe(name, seq, run.id, spec.agent) for seq, run in enumerate(sources)]
            )
        return name
    finally:
        store.close()


def experiment_progress(name: str, options: Options = Options()) -> Progress:
    """Where experiment `name` stands now."""
    return next(watch_experiment(name, options, until_ended=False))


def watch_experiment(
    name: str, options: Options = Options(), *, until_ended: bool = True
) -> Iterator[Progress]:
    """Where experiment `name` stands, once every `POLL` seconds, until it ends (or once).
    Only reads: the store is opened read-only and the queue only counted."""
    path = store_location(options.cassette)
    if not is_postgres(path):
        raise ConfigError(f"{path} is no PostgreSQL store: experiments on workers live in one")
    store = open_store(path, read_only=True)
    try:
        with _jobs().JobQueue(path, create=False) as queue:
            counts = queue.counts(name)
            while True:
                progress = _progress(store, counts, name)
                yield progress
                if progress.ended or not until_ended:
                    return
                time.sleep(POLL)
                with contextlib.suppress(CassetteError):  # the database restarting: go on
                    counts = queue.counts(name)
    finally:
        store.close()


def cancel_experiment(name: str, options: Options = Options()) -> Progress:
    """Cancel experiment `name`'s waiting probes, stop its running ones (their workers end
    their agents and store nothing) and mark it ended; where it stood."""
    path = store_location(options.cassette)
    store = open_store(path)
    try:
        stored = _stored(store, name)
        with _jobs().JobQueue(path) as queue:
            cancelled = queue.cancel(name)
        if stored.ended_at is None:
            store.finish_experiment(name, ended_at=time.time())
        return _progress(store, cancelled, name)
    finally:
        store.close()


def finish_if_complete(store: Store, name: str, total: int) -> bool:
    """Mark experiment `name` ended once it holds a branch for each of its `total` probes
    (called by the worker that stored one, after its write: of two storing the last two at
    once, the later sees both)."""
    done, _ = store.experiment_counts(name)
    if done < total:
        return False
    if _stored(store, name).ended_at is None:
        store.finish_experiment(name, ended_at=time.time())
    return True


def _jobs() -> ModuleType:
    """`forkpoint.jobs`, or the one line that names the extra it needs."""
    try:
        return importlib.import_module("forkpoint.jobs")
    except ImportError as missing:
        raise ConfigError(str(missing)) from None


def _stored(store: Store, name: str) -> StoredExperiment:
    found = [e for e in store.list_experiments() if e.name == name]
    if not found:
        raise ConfigError(f"no experiment {name!r} in the store (see: forkpoint experiment list)")
    return found[0]


def _progress(store: Store, counts: QueueCounts, name: str) -> Progress:
    stored = _stored(store, name)
    done, failed = store.experiment_counts(name)
    total = int(stored.spec.get("probes", done))
    settled = done >= total  # a job still `doing` then has stored its branch: it is finishing
    return Progress(
        name=name,
        total=total,
        done=done,
        failed=failed,
        running=0 if settled else counts.running,
        queued=0 if settled else counts.queued,
        ended=stored.ended_at is not None,
    )
