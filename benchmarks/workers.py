"""Benchmark: an experiment's probes over 1, 2 and 4 `forkpoint worker` processes against the
local `experiment --concurrency 4`, and the job queue's own cost per job.

    .venv/bin/python benchmarks/workers.py                 # 200 probes: minutes on 2 busy cores
    .venv/bin/python benchmarks/workers.py --probes 40     # quicker
    .venv/bin/python benchmarks/workers.py --queue-only    # the queue's cost alone, ~1 minute

Needs the PostgreSQL server ($FORKPOINT_TEST_POSTGRES_URL, default the local one) and the
`workers` extra; it works in a schema of its own, dropped at the end.

- probes: one run of the experiments' stdlib agent (tests/api/test_experiments.py: a model
  call, a tool call, a model call) is recorded, then cloned as PROBES source runs in the store
  (same exchanges, new ids). Each configuration forks all of them at the first model call with
  another model: locally (`api.experiment`, 4 at a time), then queued (`submit_experiment`) for
  1, 2 and 4 worker processes of concurrency 1, timed from the submission until the last
  branch is stored. Throughput is probes per second of wall time.
- queue: procrastinate itself, on forkpoint's queue names, with a task that does nothing: the
  claim + complete cost per job (wall time / jobs, one worker, one job at a time), with 200
  and with 10,000 jobs queued, and the enqueue cost per job.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from forkpoint import api  # noqa: E402
from forkpoint.api.experiments import ExperimentSpec  # noqa: E402
from forkpoint.cassettes.postgres import PostgresStore  # noqa: E402
from forkpoint.engine.changes import Change  # noqa: E402
from forkpoint.jobs import Job, JobQueue, app_for  # noqa: E402
from forkpoint.models import Run, new_run_id  # noqa: E402
from forkpoint.testing.upstream import ScriptedUpstream  # noqa: E402
from tests.api.test_experiments import AGENT, lookup, script  # noqa: E402
from tests.conftest import RunningUpstream  # noqa: E402
from tests.pg import SERVER, in_schema  # noqa: E402


def clone_sources(url: str, source: str, count: int) -> None:
    """`count` runs with `source`'s exchanges under new ids, labelled batch=bench."""
    store = PostgresStore(url)
    try:
        run = store.get_run(source)
        exchanges = store.exchanges(source)
        for index in range(count):
            copy = Run(new_run_id(), name=f"s{index:04d}", labels={**run.labels, "batch": "bench"},
                       status=run.status, mode=run.mode)  # fmt: skip
            store.create_run(copy)
            store.add_exchanges(dataclasses.replace(e, run_id=copy.id) for e in exchanges)
            store.finish_run(copy.id, run.status)
    finally:
        store.close()


def probes(args: argparse.Namespace, url: str, agent: Path, upstream: str) -> None:
    command = (sys.executable, str(agent), "{label:q}")
    options = api.Options(cassette=url, upstream=upstream, routes={"tools": upstream})
    select = ("label:batch=bench",)
    print(f"{args.probes} probes (fork at the first model call, another model):")
    started = time.perf_counter()
    spec = ExperimentSpec(command=command, at="first-llm", select=select, concurrency=4,
                          change=Change(model="gpt-4o-mini"), name="local")  # fmt: skip
    done = api.experiment(spec, options)
    local = time.perf_counter() - started
    assert done.summary.forked == args.probes, done.summary
    print(f"  local --concurrency 4   {local:7.1f} s   {args.probes / local:6.2f} probes/s")
    for count in (1, 2, 4):
        name = f"workers-{count}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        agent_flag = f"--agent=qa={' '.join(command)}"
        started = time.perf_counter()
        api.submit_experiment(
            ExperimentSpec(command=(), at="first-llm", select=select, agent="qa", name=name,
                           change=Change(model="gpt-4o-mini")), options,
        )  # fmt: skip
        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "forkpoint",
                    "worker",
                    "--store",
                    url,
                    agent_flag,
                    "--concurrency",
                    "1",
                ],
                env=env,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(count)
        ]
        try:
            while not api.experiment_progress(name, api.Options(cassette=url)).ended:
                time.sleep(0.2)
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(60)
        took = time.perf_counter() - started
        result = api.experiment_results(name, api.Options(cassette=url))
        assert result.summary.forked == args.probes, result.summary
        print(f"  {count} worker{'s' if count > 1 else ' '} (1 job each) {took:7.1f} s   "
              f"{args.probes / took:6.2f} probes/s")  # fmt: skip


async def queue_cost(url: str, queued: int, processed: int) -> tuple[float, float]:
    """(enqueue, claim + complete) seconds per job of a task that does nothing."""
    with JobQueue(url) as queue:
        started = time.perf_counter()
        queue.enqueue([Job("bench", "bench", {"i": i}) for i in range(queued)])
        enqueue = (time.perf_counter() - started) / queued
    app = app_for(url)
    count = 0

    @app.task(name="forkpoint.bench", queue="forkpoint.bench")
    async def nothing(i: int) -> None:
        nonlocal count
        count += 1

    async with app.open_async():
        started = time.perf_counter()
        working = asyncio.create_task(app.run_worker_async(
            queues=["forkpoint.bench"], install_signal_handlers=False, delete_jobs="successful",
            fetch_job_polling_interval=0.5,
        ))  # fmt: skip
        while count < processed:
            await asyncio.sleep(0.001)
        took = time.perf_counter() - started
        working.cancel()
        await asyncio.gather(working, return_exceptions=True)
    return enqueue, took / processed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--queue-only", action="store_true")
    args = parser.parse_args()
    server = os.environ.get("FORKPOINT_TEST_POSTGRES_URL", SERVER)
    schemas: list[str] = []

    def fresh() -> str:
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        schemas.append(schema)
        return in_schema(server, schema)

    try:
        print("queue (procrastinate, a task doing nothing, one job at a time):")
        for queued, processed in ((200, 200), (10_000, 1000)):
            enqueue, claim = asyncio.run(queue_cost(fresh(), queued, processed))
            print(f"  {queued:6} queued: claim + complete {claim * 1000:6.2f} ms/job "
                  f"(over {processed}), enqueue {enqueue * 1000:5.2f} ms/job")  # fmt: skip
        if args.queue_only:
            return
        upstream = ScriptedUpstream(script)
        upstream.app.router.add_get("/lookup", lookup)
        running = RunningUpstream(upstream)
        try:
            url = fresh()
            with tempfile.TemporaryDirectory() as work:
                agent = Path(work) / "agent.py"
                agent.write_text(AGENT)
                recorded = api.record(
                    [sys.executable, str(agent), "how tall is K2"],
                    api.Options(cassette=url, labels={"q": "how tall is K2"},
                                upstream=running.url, routes={"tools": running.url}),
                )  # fmt: skip
                clone_sources(url, recorded.run_id, args.probes)
                probes(args, url, agent, running.url)
        finally:
            running.stop()
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            for schema in schemas:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    main()
