"""Workers under faults: one killed mid-job (kill -9), a job for an agent no worker has, a
worker stopped by SIGTERM in the middle of a job, a job that fails every try."""

from __future__ import annotations

import os
import time
import uuid

import psycopg

from forkpoint import api
from forkpoint.api.experiments import ExperimentSpec
from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.models import RunStatus
from forkpoint.workers.handlers import LOST
from tests.cli.test_serve_postgres import postgres_is_local, restart_postgres
from tests.pg import SERVER, in_schema, unavailable
from tests.workers.conftest import Recorded, Workers, wait_for


def submit(url: str, recorded: Recorded, name: str, agent: str, *names: str) -> None:
    select = ("label:batch=t", f"name:{names[0]}") if len(names) == 1 else ("label:batch=t",)
    runs = () if len(names) == 1 else names
    api.submit_experiment(
        ExperimentSpec(command=(), at="0", runs=runs, select=() if runs else select, name=name,
                       agent=agent),
        api.Options(cassette=url, upstream=recorded.upstream.url,
                    routes={"tools": recorded.upstream.url}),
    )  # fmt: skip


def forks(url: str, name: str) -> list:  # type: ignore[type-arg]
    store = PostgresStore(url, read_only=True)
    try:
        return [r for r in store.list_runs() if r.labels.get("experiment") == name]
    finally:
        store.close()


def read_line(process, text: str) -> str:  # type: ignore[no-untyped-def]
    while True:
        line = process.stderr.readline()
        assert line, f"the worker ended before saying {text!r}"
        if text in line:
            return line


def test_a_worker_killed_mid_job_leaves_its_run_crashed_and_another_retries_it_once(
    store_url: str, recorded: Recorded, workers: Workers
):
    doomed = workers.start(store_url, f"qa={recorded.hanging(30)}", concurrency=1)
    submit(store_url, recorded, "killed", "qa", "q01")
    read_line(doomed, "probe 0 of killed with agent qa (try 1 of 3)")
    wait_for(lambda: len(forks(store_url, "killed")) == 1, "the first try's fork run")
    doomed.kill()  # SIGKILL: the worker, as by kill -9 (its agent lives on, then ends alone)
    doomed.communicate(timeout=30)

    survivor = workers.start(store_url, f"qa={recorded.command}", lease=1.0)
    options = api.Options(cassette=store_url)
    wait_for(lambda: api.experiment_progress("killed", options).ended, "the retried probe", 90)
    log = workers.stop(survivor)
    assert (
        "probe 0 of killed was left running by a lost worker; queued again (try 2 of 3)" in log
    ), log
    first, second = sorted(forks(store_url, "killed"), key=lambda run: run.id)
    assert first.status is RunStatus.CRASHED and first.error == LOST
    assert second.status is RunStatus.FINISHED
    results = api.experiment_results("killed", options)
    assert [(b.seq, b.run.id if b.run else None, b.ok) for b in results.branches] == [
        (0, second.id, True)
    ]  # one result, counted once: the retry's


def test_a_job_for_an_agent_no_worker_has_waits_for_one_with_one_clear_line(
    store_url: str, recorded: Recorded, workers: Workers
):
    submit(store_url, recorded, "billing-only", "billing", "q02")
    worker = workers.start(store_url, f"qa={recorded.command}")
    line = read_line(worker, "wait for agent")
    assert line.strip() == (
        "forkpoint worker: 1 job(s) wait for agent 'billing', which this worker does not have "
        "(it runs qa): left for another worker"
    )
    time.sleep(2.0)
    options = api.Options(cassette=store_url)
    progress = api.experiment_progress("billing-only", options)
    assert (progress.queued, progress.running, progress.done) == (1, 0, 0)  # left, not taken
    log = workers.stop(worker)
    assert "wait for agent" not in log  # said once
    billing = workers.start(store_url, f"billing={recorded.command}")
    wait_for(lambda: api.experiment_progress("billing-only", options).ended, "the billing worker")
    workers.stop(billing)
    assert api.experiment_results("billing-only", options).branches[0].ok


def test_sigterm_stops_a_worker_after_the_job_under_way(
    store_url: str, recorded: Recorded, workers: Workers
):
    slow = f"{recorded.hanging(3)}"  # a probe of three seconds, which ends well (exit 0)
    worker = workers.start(store_url, f"qa={slow}", concurrency=1)
    submit(store_url, recorded, "stopping", "qa", "q03", "q04")
    read_line(worker, "probe 0 of stopping with agent qa")
    started = time.monotonic()
    log = workers.stop(worker)  # SIGTERM
    assert worker.returncode == 0 and time.monotonic() - started < 20, log
    assert "stopping after the jobs under way" in log and "stopped" in log
    progress = api.experiment_progress("stopping", api.Options(cassette=store_url))
    assert (progress.done, progress.queued, progress.running) == (1, 1, 0)  # the other waits


def test_a_job_that_fails_every_try_is_reported_failed_with_its_reason(
    store_url: str, recorded: Recorded, workers: Workers
):
    """The experiment's check loads where it was submitted, not on the worker (a module it
    lacks): each try fails, the last one stores why."""
    api.submit_experiment(
        ExperimentSpec(command=(), at="0", select=("label:batch=t", "name:q05"), name="broken",
                       agent="qa", check="tests.workers.test_faults:fussy_check"),
        api.Options(cassette=store_url, upstream=recorded.upstream.url,
                    routes={"tools": recorded.upstream.url}),
    )  # fmt: skip
    worker = workers.start(store_url, f"qa={recorded.command}", env={"FUSSY_CHECK": "missing"})
    options = api.Options(cassette=store_url)
    wait_for(lambda: api.experiment_progress("broken", options).ended, "the last try", 90)
    log = workers.stop(worker)
    assert log.count("probe 0 of broken failed (try") == 3, log
    assert "Traceback" not in log, log  # the library's report of each failure: said already
    (branch,) = api.experiment_results("broken", options).branches
    assert branch.run is None and branch.error is not None
    assert branch.error.startswith("failed on each of 3 tries: "), branch.error
    assert "no module named 'a_module_this_worker_lacks'" in branch.error.lower(), branch.error
    assert forks(store_url, "broken") == []


def fussy_check(run) -> bool:  # type: ignore[no-untyped-def]
    return True


if os.environ.get("FUSSY_CHECK") == "missing":
    import a_module_this_worker_lacks  # type: ignore[import-not-found]  # noqa: F401


def test_the_database_restarting_mid_experiment_loses_no_result(
    store_url: str, recorded: Recorded, workers: Workers
):
    if not postgres_is_local():
        unavailable("the test restarts the local PostgreSQL cluster: it needs it and root")
    names = [f"q{index:02d}" for index in range(10, 22)]
    submit(store_url, recorded, "restarted", "qa", *names)
    for _ in range(2):
        workers.start(store_url, f"qa={recorded.command}")
    options = api.Options(cassette=store_url)
    wait_for(lambda: api.experiment_progress("restarted", options).done >= 3, "a few probes")
    restart_postgres()
    wait_for(lambda: api.experiment_progress("restarted", options).ended, "every probe", 240)
    logs = [workers.stop(worker) for worker in workers.started]
    results = api.experiment_results("restarted", options)
    assert [b.seq for b in results.branches] == list(range(len(names))), logs
    assert [b.source.name for b in results.branches] == names
    failed = {b.source.name: b.error for b in results.branches if not b.ok}
    assert set(failed) <= {"q13", "q20"}, "\n".join([*map(str, failed.items()), *logs])
    said = "\n".join(logs)  # a restart no connection met is rightly not said: only how
    assert "Traceback" not in said and "error connecting in" not in said, said


def test_a_database_lost_under_a_worker_is_said_in_forkpoints_words_and_work_goes_on(
    store_url: str, recorded: Recorded, workers: Workers
):
    """Found by CI: PostgreSQL restarting under a worker printed one of the library's tracebacks
    (`procrastinate.exceptions.ConnectorException: Database error.`) and no line of
    forkpoint's. Here the server ends the worker's connections and refuses new ones for 5 s
    (its role may not log in) while a probe runs: the outage is said in forkpoint's words,
    no traceback, and both probes end well."""
    role = f"fp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(store_url, autocommit=True) as admin:
        schema = admin.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
        submit(store_url, recorded, "cut", "qa", "q05", "q06")  # the queue's tables too
        admin.execute(f"CREATE ROLE {role} LOGIN")
        for kind in ("SCHEMA", "ALL TABLES IN SCHEMA", "ALL SEQUENCES IN SCHEMA"):
            admin.execute(f"GRANT ALL ON {kind} {schema} TO {role}")
        try:
            url = in_schema(SERVER.replace("//postgres@", f"//{role}@"), schema)
            worker = workers.start(url, f"qa={recorded.hanging(3)}", concurrency=1)
            read_line(worker, "probe 0 of cut with agent qa")
            admin.execute(f"ALTER ROLE {role} NOLOGIN")
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            time.sleep(5.0)
            admin.execute(f"ALTER ROLE {role} LOGIN")
            options = api.Options(cassette=store_url)
            wait_for(lambda: api.experiment_progress("cut", options).ended, "both probes", 90)
            log = workers.stop(worker)
        finally:
            for process in workers.started:
                process.kill()
            admin.execute(f"REASSIGN OWNED BY {role} TO postgres")
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
    assert "Traceback" not in log and "procrastinate" not in log, log
    assert "the job queue's database is unreachable" in log, log
    assert all(branch.ok for branch in api.experiment_results("cut", options).branches), log
