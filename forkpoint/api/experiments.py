"""Experiments: fork many recorded runs with one change, in parallel, and keep the branches.

`experiment` forks every selected run (`experiment_select`) at a step given as a number or
as `first-llm` / `last-llm` (each run's first or last model call), each fork a real
`forkpoint.fork` on a worker thread (it runs its own event loop and proxy), at most
`concurrency` at a time, each with the same `Options` (where live traffic goes, the divergence
policy, the labels every branch gets). The command is a template: `{run}`, `{name}` and
`{label:KEY}` are replaced by each selected run's id, name and label, so each agent gets its
own input back (a ticket recorded with `--label ticket=…` is passed as `"{label:ticket}"`).

The agents' output goes to a log per fork, not to the terminal, where K agents would
interleave; a failed fork reports the log's last lines. A run that cannot be forked (no model
call, a missing label, a command that fails, a divergence) is stored with its error, and the
experiment goes on. The experiment and each branch are stored in the cassette as they finish,
so an interrupted experiment keeps what it did; `experiment_results` reads them back.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from forkpoint.api.commands import afork
from forkpoint.api.mocks import parse_mock
from forkpoint.api.options import Options, store_location
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store, StoredBranch, StoredExperiment
from forkpoint.compare.experiment_check import Check, CheckRun, load_check
from forkpoint.compare.experiment_results import Experiment, load_experiment
from forkpoint.compare.experiment_select import select_runs
from forkpoint.engine.changes import Change
from forkpoint.engine.config import OnDivergence
from forkpoint.engine.urls import without_userinfo
from forkpoint.errors import CassetteError, ConfigError, ForkpointError
from forkpoint.models import Exchange, Kind, Origin, Run, RunStatus

__all__ = [
    "ExperimentSpec", "Prober", "aexperiment", "experiment", "fork_step", "substitute",
]  # fmt: skip

AT_NAMES = ("first-llm", "last-llm")
_PLACEHOLDER = re.compile(r"\{(run|name|label:[^{}]+)\}")
LOG_LINES = 5  # of a failed fork's output, kept with its error


@dataclass(frozen=True, slots=True)
class ExperimentSpec:
    """What an experiment does, beside the `Options` each fork runs with; stored with it as
    JSON (`to_json`)."""

    command: tuple[str, ...]
    at: str  # a step number, "first-llm" or "last-llm"
    runs: tuple[str, ...] = ()
    select: tuple[str, ...] = ()
    change: Change = Change()
    check: str | None = None
    concurrency: int = 4
    name: str | None = None  # None: exp-YYYYMMDD-HHMMSS
    agent: str | None = None  # on workers: the agent a job names, in place of `command`

    def to_json(self, options: Options) -> dict[str, Any]:
        on_workers = {"agent": self.agent} if self.agent else {}
        return on_workers | {
            "runs": list(self.runs),
            "select": list(self.select),
            "at": self.at,
            "change": self.change.to_json(),
            "check": self.check,
            "command": list(self.command),
            "concurrency": self.concurrency,
            "on_divergence": options.on_divergence.value,
            "restore": options.restore,
            "upstream": options.upstream and without_userinfo(options.upstream),
            "routes": {name: without_userinfo(url) for name, url in options.routes.items()},
            "labels": dict(options.labels),
        }


def stored_spec(name: str, document: Mapping[str, Any]) -> tuple[ExperimentSpec, Options]:
    """The spec and the options of experiment `name` as `to_json` stored them: what a worker
    runs a probe with (the store it forks in and the agent's command are its own)."""
    change = document.get("change") or {}
    spec = ExperimentSpec(
        command=tuple(document.get("command") or ()),
        at=str(document["at"]),
        runs=tuple(document.get("runs") or ()),
        select=tuple(document.get("select") or ()),
        change=Change(
            model=change.get("model"),
            upstream=change.get("upstream"),
            system_prompt=change.get("system_prompt"),
            patch=tuple(change.get("patch") or ()),
            mocks=tuple(parse_mock(text) for text in change.get("mocks") or ()),
        ),
        check=document.get("check"),
        concurrency=int(document.get("concurrency") or 1),
        name=name,
        agent=document.get("agent"),
    )
    options = Options(
        on_divergence=OnDivergence(document.get("on_divergence", OnDivergence.FAIL.value)),
        restore=bool(document.get("restore", True)),
        upstream=document.get("upstream"),
        routes=dict(document.get("routes") or {}),
        labels=dict(document.get("labels") or {}),
    )
    return spec, options


def fork_step(at: str, run: Run, exchanges: Sequence[Exchange]) -> int:
    """The step to fork `run` at: `at` itself, or its first or last model call's step."""
    if at not in AT_NAMES:
        return int(at)
    llm = [e.step for e in exchanges if e.summary and e.summary.kind == Kind.LLM]
    if not llm:
        raise ConfigError(f"run {run.id} has no model call to fork at ({at})", run_id=run.id)
    return llm[0] if at == "first-llm" else llm[-1]


def substitute(command: Sequence[str], run: Run) -> tuple[str, ...]:
    """The command with `{run}`, `{name}` and `{label:KEY}` filled in from `run`."""

    def value(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "run":
            return run.id
        if key == "name":
            if run.name is None:
                raise ConfigError(f"run {run.id} has no name for {{name}}", run_id=run.id)
            return run.name
        label = key.removeprefix("label:")
        if label not in run.labels:
            raise ConfigError(f"run {run.id} has no label {label!r} for {{{key}}}", run_id=run.id)
        return run.labels[label]

    return tuple(_PLACEHOLDER.sub(value, part) for part in command)


OnBranch = Callable[[StoredBranch, Run, int], None]


def experiment(
    spec: ExperimentSpec, options: Options = Options(), *, on_branch: OnBranch | None = None
) -> Experiment:
    """Fork the selected runs, store the experiment, and return its results.

    `on_branch(branch, source, total)` is called on this thread as each branch is stored, for
    progress reports. Raises ConfigError before forking anything when no run is selected, the
    check cannot be loaded, `at` is not a step or the name is taken.
    """
    check_spec(spec)
    path = store_location(options.cassette)
    store = open_store(path, create=False)
    try:
        sources = select_runs(store, spec.runs, spec.select)
        if not sources:
            raise ConfigError(f"no run in {path} matches {' '.join(spec.select)}")
        check = load_check(spec.check) if spec.check else None
        name = spec.name or default_name(store)
        store.create_experiment(StoredExperiment(name, time.time(), None, spec.to_json(options)))
        prober = Prober(spec, options, name, store, check, spec.command)
        with tempfile.TemporaryDirectory(prefix="forkpoint-experiment-") as logs:
            pool = ThreadPoolExecutor(spec.concurrency, thread_name_prefix="forkpoint-fork")
            try:
                futures: dict[Future[StoredBranch], Run] = {
                    pool.submit(prober.run, seq, source, Path(logs)): source
                    for seq, source in enumerate(sources)
                }
                for future in as_completed(futures):
                    branch = future.result()
                    store.add_experiment_branch(name, branch)
                    if on_branch is not None:
                        on_branch(branch, futures[future], len(sources))
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
        store.finish_experiment(name, ended_at=time.time())
        return load_experiment(store, name)
    finally:
        store.close()


def check_spec(spec: ExperimentSpec) -> None:
    """Refuse a spec whose fork step or concurrency cannot be, before anything is stored."""
    if spec.at not in AT_NAMES and not spec.at.isdigit():
        raise ConfigError(f"--at {spec.at!r}: give a step number, first-llm or last-llm")
    if spec.concurrency < 1:
        raise ConfigError("--concurrency must be 1 or more")


async def aexperiment(
    spec: ExperimentSpec, options: Options = Options(), *, on_branch: OnBranch | None = None
) -> Experiment:
    """`experiment` for asyncio code: the forks run on worker threads, the loop goes on."""
    return await asyncio.to_thread(experiment, spec, options, on_branch=on_branch)


def default_name(store: Store) -> str:
    taken = {experiment.name for experiment in store.list_experiments()}
    base = datetime.now().strftime("exp-%Y%m%d-%H%M%S")
    return next(n for n in (base, *(f"{base}-{i}" for i in range(2, 1000))) if n not in taken)


@dataclass(frozen=True, slots=True)
class Prober:
    """One probe of an experiment: fork one selected run with the change, judge the branch.

    The local pool (`experiment`, a thread and an event loop per probe) and a worker (a job,
    on the worker's loop: `forkpoint.workers`) run this same probe: one code path, two ways to
    schedule it. `command` is the template `substitute` fills in: the experiment's own
    locally, the worker's for the agent a job names. The store is shared: it serializes its
    calls, which run on threads so a worker's loop never waits on them.
    """

    spec: ExperimentSpec
    options: Options
    name: str
    store: Store
    check: Check | None
    command: tuple[str, ...]
    # A worker's: a store that cannot be reached (restarting) fails the try, to be retried,
    # rather than stand as the probe's result. Locally it is the result, as it always was.
    store_errors_retry: bool = False

    def run(self, seq: int, source: Run, logs: Path) -> StoredBranch:
        """`probe` on an event loop of this thread's own (the local pool's threads)."""
        return run_sync(self.probe(seq, source, logs))

    async def probe(self, seq: int, source: Run, logs: Path) -> StoredBranch:
        """Fork `source` (the `seq`th selected run), its agent's output in a log under `logs`;
        the branch to store, or the error that left it without one."""
        result: dict[str, Any] = {"at": None}
        try:
            recorded = await asyncio.to_thread(self.store.exchanges, source.id, bodies=False)
            result["at"] = at = fork_step(self.spec.at, source, recorded)
            command = substitute(self.command, source)
        except ForkpointError as error:
            return self._failed(error, StoredBranch(seq, source.id, None, str(error), result))
        log = logs / f"{seq}.log"
        try:
            options = replace(
                self.options,
                name=f"{self.name}/{source.name or source.id}",
                labels={**source.labels, **self.options.labels, "experiment": self.name},
            )
            forked = await afork(
                source.id, _logged(command, log), at=at, change=self.spec.change, options=options
            )
        except (ForkpointError, OSError) as error:
            return self._failed(error, StoredBranch(seq, source.id, None, str(error), result))
        result["exit_code"] = forked.exit_code
        return await asyncio.to_thread(self._judged, seq, source, forked.run_id, log, result)

    def _failed(self, error: Exception, branch: StoredBranch) -> StoredBranch:
        if self.store_errors_retry and isinstance(error, CassetteError):
            raise error
        return branch

    def _judged(
        self, seq: int, source: Run, branch_id: str, log: Path, result: dict[str, Any]
    ) -> StoredBranch:
        branch = self.store.get_run(branch_id)
        steps = self.store.exchanges(branch.id, bodies=False)
        failure = _failure(branch, steps, result["exit_code"], log)
        if self.check is not None:
            parent = CheckRun(source, self.store.exchanges(source.id))
            result["parent_check"] = self.check(parent).to_json()
            if failure is None:
                judged = CheckRun(branch, self.store.exchanges(branch.id), parent)
                result["check"] = self.check(judged).to_json()
        return StoredBranch(seq, source.id, branch.id, failure, result)


def _logged(command: Sequence[str], log: Path) -> list[str]:
    """`command` with its stdout and stderr sent to `log`; `exec` keeps its pid and signals."""
    return ["/bin/sh", "-c", 'exec "$@" >"$0" 2>&1', str(log), *command]


def _failure(branch: Run, steps: Sequence[Exchange], exit_code: int, log: Path) -> str | None:
    """Why a fork failed (its status, the divergence or error, the last lines of the agent's
    output), or None if it did not."""
    if branch.status is RunStatus.FINISHED and exit_code == 0:
        return None
    diverged = [e for e in steps if e.origin is Origin.DIVERGED and e.error]
    if diverged and diverged[0].error:
        reason = diverged[0].error.splitlines()[0]
    else:
        reason = branch.error or f"command exited with {exit_code}"
    try:
        lines = log.read_text(errors="replace").strip().splitlines()[-LOG_LINES:]
    except OSError:
        lines = []
    output = "".join(f"\n  | {line[:300]}" for line in lines)
    return f"{branch.status}: {reason}{output}"
