"""Benchmark: `forkpoint experiment` over 50 recorded runs of 20 steps, forked at step 10.

    .venv/bin/python benchmarks/experiment.py            # about a minute on an idle 4-core box
    .venv/bin/python benchmarks/experiment.py --runs 12  # quicker

The agent (AGENT below) sends 20 Chat Completions requests with the openai SDK, each run its
own, and notes when it started and ended; the upstream is the scripted one (echo), in a process
of its own. The runs are recorded first (not timed). Then, at concurrency 4:

- agents alone: every run's agent against the upstream directly, 4 at a time: the agents' own
  time (start-up, imports, 20 requests), the floor no experiment can beat;
- experiment: `run_experiment` forks every run at step 10 with another model (steps 0-9
  replayed, 10-19 live), stores the branches, then `load_experiment` diffs each against its
  parent for the report.

Per-run overhead, the target (under 0.3 s), is measured for each fork: the time in its
`api.fork` (cassette opened, parent loaded, proxy started, agent run with steps 0-9 replayed,
proxy stopped, branch recorded) minus the agent's own wall time within it (spawn to exit, by
bash's clock), median over the runs. Both sides of each difference share the same moment, so
a busy machine moves them alike. The wall-time rows compare the whole experiment with the agents
alone; on a machine with fewer free cores than 4 agents need, they mostly measure contention.
forkpoint's CPU per run is this process's CPU (every proxy and the store; the agents are
children) over the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forkpoint import api  # noqa: E402
from forkpoint.api import experiments as experiment_module  # noqa: E402
from forkpoint.api.experiments import ExperimentSpec  # noqa: E402
from forkpoint.engine.changes import Change  # noqa: E402

STEPS = 20
FORK_AT = 10
CONCURRENCY = 4
TARGET_S = 0.3
AGENT = """
import json, sys
import openai
with openai.OpenAI(max_retries=0) as client:
    for body in json.loads(open(sys.argv[1]).read()):
        client.chat.completions.create(**body)
"""
# Runs the agent and writes its wall time, spawn to exit, to the file named first: bash's own
# clock, so no process is added around the agent.
TIMED = 'start=$EPOCHREALTIME; "$@"; code=$?; echo "$start $EPOCHREALTIME" >"$0"; exit $code'
UPSTREAM = """
import asyncio
from forkpoint.testing.upstream import ScriptedUpstream
async def main():
    upstream = ScriptedUpstream()
    print(await upstream.start(), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def bodies(run: int) -> list[dict[str, object]]:
    """Run `run`'s 20 requests: a growing conversation about its own topic."""
    system = {"role": "system", "content": "You are a support agent. Be brief. " * 10}
    turns = [
        {"role": "user", "content": f"run {run}, turn {i}: " + "details " * 40}
        for i in range(STEPS)
    ]
    return [{"model": "gpt-4o", "messages": [system, turn]} for turn in turns]


def record_all(cassette: Path, work: Path, upstream: str, runs: int) -> None:
    def record(run: int) -> None:
        requests = work / f"requests-{run}.json"
        requests.write_text(json.dumps(bodies(run)))
        labels = {"batch": "bench", "requests": str(requests), "marks": str(work / f"marks-{run}")}
        command = [sys.executable, str(work / "agent.py"), str(requests)]
        options = api.Options(
            cassette=cassette, upstream=upstream, name=f"run-{run}", labels=labels
        )
        result = api.record(command, options)
        assert result.exit_code == 0 and result.steps == STEPS, result

    record(0)  # alone: processes creating one cassette at once can find it locked
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(record, range(1, runs)))


def agents_alone(work: Path, upstream: str, runs: int) -> float:
    """Wall seconds for every run's agent against the upstream itself, CONCURRENCY at a time."""
    env = {**os.environ, "OPENAI_BASE_URL": f"{upstream}/v1"}

    def run(index: int) -> None:
        command = [sys.executable, str(work / "agent.py"), str(work / f"requests-{index}.json")]
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)

    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(run, range(runs)))
    return time.perf_counter() - started


@dataclass(frozen=True)
class Measured:
    wall_s: float  # run_experiment, end to end
    report_s: float  # load_experiment: every branch diffed against its parent
    cpu_s: float  # this process's CPU during run_experiment: proxies, store, checks
    overheads: list[float]  # per fork: `api.fork` minus its agent's own wall time


def experiment(cassette: Path, work: Path, upstream: str) -> Measured:
    spec = ExperimentSpec(
        command=("bash", "-c", TIMED, "{label:marks}", sys.executable, str(work / "agent.py"),
                 "{label:requests}"),
        at=str(FORK_AT),
        select=("label:batch=bench",),
        change=Change(model="gpt-4o-mini"),
        concurrency=CONCURRENCY,
    )  # fmt: skip
    options = api.Options(cassette=cassette, upstream=upstream)
    forks: dict[str, float] = {}  # run id -> seconds in api.fork
    real_fork = experiment_module.fork

    def timed_fork(*args: Any, **kwargs: Any) -> api.RunResult:
        started = time.perf_counter()
        result = real_fork(*args, **kwargs)
        forks[result.run_id] = time.perf_counter() - started
        return result

    experiment_module.fork = timed_fork  # type: ignore[assignment]
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    try:
        name = api.experiment(spec, options).name
    finally:
        experiment_module.fork = real_fork
    wall = time.perf_counter() - started
    used = resource.getrusage(resource.RUSAGE_SELF)
    report = api.experiment_results(name, options)
    summary = report.summary
    assert summary.forked == len(report.branches) and summary.failed == 0, summary
    assert all(b.diff and b.diff.b.totals.replayed_steps == FORK_AT for b in report.branches)
    overheads = []
    for branch in report.branches:
        assert branch.run is not None
        start, end = map(float, Path(branch.source.labels["marks"]).read_text().split())
        overheads.append(forks[branch.run.id] - (end - start))
    return Measured(
        wall_s=wall,
        report_s=time.perf_counter() - started - wall,
        cpu_s=used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime,
        overheads=overheads,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    runs = parser.parse_args().runs
    os.environ["OPENAI_API_KEY"] = "k"  # the agents' SDK insists on one; the upstream needs none
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "agent.py").write_text(AGENT)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen(
            [sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, env=env, text=True
        )
        try:
            assert server.stdout is not None
            upstream = server.stdout.readline().strip()
            cassette = work / "experiment.db"
            record_all(cassette, work, upstream, runs)
            alone = agents_alone(work, upstream, runs)
            measured = experiment(cassette, work, upstream)
        finally:
            server.terminate()
            server.wait()
    overhead = statistics.median(measured.overheads)
    slot = CONCURRENCY / runs
    rows = [
        ("runs x steps, fork step, concurrency", f"{runs} x {STEPS}, {FORK_AT}, {CONCURRENCY}", ""),
        ("per-run overhead beyond the agent, p50", f"{overhead:.3f} s",
         f"< {TARGET_S} {'PASS' if overhead < TARGET_S else 'FAIL'}"),
        ("  p90", f"{statistics.quantiles(measured.overheads, n=10)[-1]:.3f} s", ""),
        ("forkpoint CPU per run", f"{measured.cpu_s / runs:.3f} s", ""),
        ("experiment: wall (fork, store, check)", f"{measured.wall_s:.2f} s", ""),
        ("  per run and slot", f"{measured.wall_s * slot:.3f} s", ""),
        ("agents alone, 4 at a time: wall", f"{alone:.2f} s", ""),
        ("  per run and slot", f"{alone * slot:.3f} s", ""),
        ("report: load + diff every branch", f"{measured.report_s:.2f} s", ""),
    ]  # fmt: skip
    print(f"{'measure':40}  {'value':>16}  target")
    for name, value, target in rows:
        print(f"{name:40}  {value:>16}  {target}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
