"""An experiment on workers gives what the same experiment gives locally; it is followed from
another process while it runs, detached from with Ctrl-C, and cancelled."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import orjson

from forkpoint import api
from forkpoint.api.experiments import ExperimentSpec
from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.compare.experiment_render import experiment_json
from forkpoint.engine.changes import Change
from forkpoint.models import RunStatus
from tests.runner import forkpoint, start_forkpoint
from tests.workers.conftest import RUNS, Recorded, Workers, wait_for

CHECK = "tests.api.test_experiments:answers_the_question"
FLAGS = ["--select", "label:batch=t", "--at", "first-llm", "--model", "gpt-4o-mini",
         "--check", CHECK]  # fmt: skip


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """An experiment's JSON without what differs between two runs of it: names, ids, times."""
    rows = []
    for row in document["runs"]:
        branch = row["branch"] or {}
        kept = {
            key: value for key, value in row.items() if key not in ("branch", "error", "from_fork")
        }
        kept["branch"] = {"status": branch.get("status"), "exit_code": branch.get("exit_code")}
        kept["failed"] = row["error"] is not None
        if row["from_fork"]:  # each side's totals without timings; the delta (null unless ok)
            kept["from_fork"] = {
                side: {k: v for k, v in row["from_fork"][side].items() if not k.endswith("_ms")}
                for side in ("parent", "branch")
            }
            kept["from_fork"]["delta"] = row["from_fork"]["delta"]
        rows.append(kept)
    return {"runs": rows, "summary": document["summary"]}


def test_thirty_runs_over_three_workers_match_the_same_experiment_run_locally(
    store_url: str, recorded: Recorded, workers: Workers
):
    # Queued with no worker yet: Ctrl-C detaches, and cancels nothing.
    submitting = start_forkpoint("experiment", "--store", store_url, *FLAGS, *recorded.upstream_flags(),
                                 "--name", "remote", "--on-workers", "--agent", "qa")  # fmt: skip
    assert submitting.stderr is not None
    first = submitting.stderr.readline()
    assert "experiment remote queued for the workers with agent qa" in first, first
    progress = submitting.stderr.readline()
    assert f"remote: 0/{RUNS} done (0 failed), 0 running, {RUNS} queued, ETA ?" in progress
    submitting.send_signal(signal.SIGINT)
    _, rest = submitting.communicate(timeout=30)
    assert submitting.returncode == 0 and "detached; the workers go on" in rest, rest
    assert api.experiment_progress("remote", api.Options(cassette=store_url)).queued == RUNS

    # Three workers take the probes; a second process follows the experiment to its end.
    following = start_forkpoint("experiment", "show", "remote", "--follow", "--json",
                                "--store", store_url)  # fmt: skip
    for _ in range(3):
        workers.start(store_url, f"qa={recorded.command}")
    out, err = following.communicate(timeout=300)
    assert following.returncode == 0, err
    lines = [line for line in err.splitlines() if line.startswith("forkpoint: remote:")]
    assert lines[-1].startswith(
        f"forkpoint: remote: {RUNS}/{RUNS} done (4 failed), 0 running, 0 queued"
    )
    assert any(" running, " in line and "0 running" not in line for line in lines), lines
    remote = json.loads(out)

    # The same experiment, run here.
    spec = ExperimentSpec(command=(*recorded.command.split()[:2], "{label:q}", "{label:exit}"),
                          at="first-llm", select=("label:batch=t",), change=Change(model="gpt-4o-mini"),
                          check=CHECK, name="local")  # fmt: skip
    options = api.Options(cassette=store_url, upstream=recorded.upstream.url,
                          routes={"tools": recorded.upstream.url})  # fmt: skip
    local = json.loads(orjson.dumps(experiment_json(api.experiment(spec, options))))
    assert comparable(remote) == comparable(local)
    assert remote["summary"]["runs"] == RUNS and remote["summary"]["failed"] == 4

    # Each probe counted once, each branch a fork made by a worker into the shared store.
    store = PostgresStore(store_url, read_only=True)
    try:
        stored, branches = store.get_experiment("remote")
        assert [b.seq for b in branches] == list(range(RUNS)) and stored.ended_at is not None
        assert stored.spec["agent"] == "qa" and stored.spec["command"] == []
        forks = [r for r in store.list_runs() if r.labels.get("experiment") == "remote"]
        assert sorted(r.id for r in forks) == sorted(b.branch_id for b in branches)
    finally:
        store.close()
    shown = forkpoint("experiment", "show", "remote", "--store", store_url)
    assert shown.returncode == 0 and f"{RUNS} runs" in shown.stdout, shown.output


def test_cancel_drops_the_queued_probes_and_stops_the_running_one(
    store_url: str, recorded: Recorded, workers: Workers
):
    worker = workers.start(store_url, f"slow={recorded.hanging(120)}", concurrency=1)
    api.submit_experiment(
        ExperimentSpec(command=(), at="0", select=("label:batch=t", "name:q0[0-2]"),
                       name="doomed", agent="slow"),
        api.Options(cassette=store_url, upstream=recorded.upstream.url),
    )  # fmt: skip
    options = api.Options(cassette=store_url)
    wait_for(lambda: api.experiment_progress("doomed", options).running == 1, "a running probe")
    shown = forkpoint("experiment", "show", "doomed", "--store", store_url)
    assert shown.returncode == 0, shown.output
    assert "experiment doomed is running: 0 of 3 stored (--follow waits" in shown.stderr
    cancelled = forkpoint("experiment", "cancel", "doomed", "--store", store_url)
    assert cancelled.returncode == 0, cancelled.output
    assert (
        "cancelled: 2 queued probes dropped, 1 running stopped, 0 of 3 stored" in cancelled.stderr
    )

    def stopped() -> bool:
        store = PostgresStore(store_url, read_only=True)
        try:
            forks = [r for r in store.list_runs() if r.labels.get("experiment") == "doomed"]
            return len(forks) == 1 and forks[0].status is RunStatus.CRASHED
        finally:
            store.close()

    wait_for(stopped, "the cancelled probe's agent stopped and its run ended", timeout=30)
    time.sleep(1.0)  # what the worker does next, it does within this
    progress = api.experiment_progress("doomed", options)
    assert (progress.done, progress.running, progress.queued, progress.ended) == (0, 0, 0, True)
    log = workers.stop(worker)
    assert worker.returncode == 0 and "probe 0 of doomed was stopped" in log, log
