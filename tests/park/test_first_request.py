"""A woken agent's first request reaches its own run even when it comes before the proxy has
read the run's launch: `resume` started its command early, and a request served while the
launch was still being read used to open a new run of its own (recorded live, the woken run
left waiting on a step it never got: diverged). The launch's read is held up here by a lock on
PostgreSQL's table, as a loaded store would hold it; the agent is curl, quick to ask."""

from __future__ import annotations

import subprocess
import sys
import time

import psycopg

from forkpoint.models import Origin, RunStatus
from tests.park.conftest import API_KEY, PARK, exchanges_of, read_store, status_of
from tests.runner import command_env

AGENT_SH = """\
curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' "$OPENAI_BASE_URL/chat/completions" \
    -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}'
curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"amount": 250}' \
    "$FORKPOINT_URL/r/$FORKPOINT_RUN/approvals/refund"
curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' "$OPENAI_BASE_URL/chat/completions" \
    -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "thanks"}]}'
"""


def forkpoint(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "forkpoint", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env=command_env(None, {"OPENAI_API_KEY": API_KEY}, clean=True),
    )  # fmt: skip


def test_a_woken_agents_first_request_waits_for_its_run(approvals, postgres_url, tmp_path):
    agent = ["sh", str(tmp_path / "agent.sh")]
    (tmp_path / "agent.sh").write_text(AGENT_SH)
    store = ["--store", postgres_url]
    upstream = ["--upstream", approvals.url]
    parked = forkpoint("record", *store, "--name", "r", *PARK, *upstream, "--", *agent)
    assert parked.communicate(timeout=120) and parked.returncode == 75
    answered = forkpoint("answer", *store, "r", "--no-wake", "--body", '{"ok": 1}')
    assert answered.communicate(timeout=120) and answered.returncode == 0
    approvals.upstream.reset()

    with psycopg.connect(postgres_url, autocommit=True) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE launches IN ACCESS EXCLUSIVE MODE")  # the launch's read waits
        woken = forkpoint("resume", *store, "r", *PARK, *upstream, "--", *agent)
        time.sleep(4)  # the agent has long asked by now
        locker.execute("COMMIT")
        _, err = woken.communicate(timeout=120)
    assert woken.returncode == 0, err

    reading = read_store(postgres_url)
    try:
        runs = [run.id for run in reading.list_runs()]
    finally:
        reading.close()
    run_id = next(line.split()[2] for line in err.splitlines() if line.startswith("forkpoint: run"))
    assert runs == [run_id]  # no run of its own for the early request
    assert status_of(postgres_url, run_id) is RunStatus.FINISHED
    origins = [e.origin for e in exchanges_of(postgres_url, run_id)]
    assert origins == [Origin.LIVE, Origin.ANSWERED, Origin.LIVE]
    assert [r.json["messages"][0]["content"] for r in approvals.upstream.requests] == ["thanks"]
