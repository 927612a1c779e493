"""Crash an agent (and the proxy), then resume: recorded steps cost nothing, state comes back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Origin, RunStatus
from tests.runner import Ran, command_env
from tests.runner import forkpoint as run_forkpoint

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(ROOT / "tests/e2e/agents/stateful_agent.py")]


def forkpoint(cassette: Path, *args: str, env: dict[str, str] | None = None,
              agent: list[str] = AGENT) -> Ran:  # fmt: skip
    return run_forkpoint(*args, "--", *agent, cassette=cassette,
                         env={"OPENAI_API_KEY": "k", **(env or {})})  # fmt: skip


def final_state(result: Ran) -> dict:  # type: ignore[type-arg]
    return json.loads(result.stdout.splitlines()[0])


def committed_exchanges(cassette: Path) -> int:
    """Read-only, so the poll never races the proxy creating the file."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{cassette}?mode=ro", uri=True)) as conn:
            return int(conn.execute("SELECT count(*) FROM exchanges").fetchone()[0])
    except sqlite3.Error:
        return 0


def open_store(cassette: Path):  # type: ignore[no-untyped-def]
    return SqliteStore(cassette)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_an_agent_killed_mid_run_resumes_without_resending_a_step(upstream, cassette, flavour):
    mode = {"ASYNC": "1"} if flavour == "asyncio" else {}
    whole = forkpoint(cassette, "record", "--name", "whole", "--upstream", upstream.url, env=mode)
    assert whole.returncode == 0, whole.stderr
    upstream.upstream.reset()

    crashed = forkpoint(cassette, "record", "--name", "crashy", "--upstream", upstream.url,
                        env={"CRASH_AFTER": "4", **mode})  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL
    assert [r.json["messages"][0]["content"] for r in upstream.requests] == [
        f"question {i}" for i in range(4)
    ]
    store = open_store(cassette)
    run = store.find_run("crashy")
    assert run.status is RunStatus.CRASHED and store.step_count(run.id) == 4
    assert [s.step for s in store.snapshots(run.id)] == [0, 1, 2, 3]
    store.close()

    upstream.upstream.reset()
    resumed = forkpoint(cassette, "resume", "crashy", "--upstream", upstream.url, env=mode)
    assert resumed.returncode == 0, resumed.stderr
    assert "restored_step=3 turn=3" in resumed.stderr
    # only the turns never recorded went upstream
    assert [r.json["messages"][0]["content"] for r in upstream.requests] == [
        "question 4",
        "question 5",
    ]
    assert final_state(resumed) == final_state(whole)
    store = open_store(cassette)
    run = store.find_run("crashy")
    exchanges = store.exchanges(run.id)
    assert run.status is RunStatus.FINISHED
    assert [e.step for e in exchanges] == list(range(6))
    assert all(e.origin is Origin.LIVE for e in exchanges)
    store.close()
    shown = run_forkpoint("snapshots", "crashy", cassette=cassette).stdout
    assert "agent" in shown and "FAILED" not in shown


def test_a_fork_restores_the_snapshot_nearest_before_its_step(upstream, cassette):
    forkpoint(cassette, "record", "--name", "base", "--upstream", upstream.url)
    upstream.upstream.reset()
    forked = forkpoint(cassette, "fork", "base", "--at", "3", "--model", "gpt-4o-mini",
                       "--upstream", upstream.url)  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert "restored_step=3 turn=3" in forked.stderr  # no replay needed: the state came back
    assert [r.json["model"] for r in upstream.requests] == ["gpt-4o-mini"] * 3
    answers = final_state(forked)["answers"]
    assert answers[:3] == [f"[gpt-4o] question {i}" for i in range(3)]
    assert answers[3:] == [f"[gpt-4o-mini] question {i}" for i in range(3, 6)]
    store = open_store(cassette)
    child = store.find_run(forked.run_id)
    steps = store.exchanges(child.id)
    assert [e.origin for e in steps] == [Origin.REPLAYED] * 3 + [
        Origin.LIVE
    ] * 3  # complete history
    store.close()


def test_the_workspace_comes_back_on_resume(upstream, cassette, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("kept")
    crashed = forkpoint(cassette, "record", "--name", "ws", "--workspace", str(workspace),
                        "--upstream", upstream.url,
                        env={"CRASH_AFTER": "3", "WORKSPACE": str(workspace)})  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL
    # the crash left a stray file and a damaged one; resume puts the snapshot back
    (workspace / "stray.tmp").write_text("garbage")
    (workspace / "turn-0.txt").write_text("damaged")
    resumed = forkpoint(cassette, "resume", "ws", "--workspace", str(workspace), "--upstream", upstream.url,
                        env={"WORKSPACE": str(workspace)})  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert not (workspace / "stray.tmp").exists()
    assert (workspace / "turn-0.txt").read_text() == "[gpt-4o] question 0"
    assert sorted(p.name for p in workspace.iterdir()) == [
        "notes.txt",
        *[f"turn-{i}.txt" for i in range(6)],
    ]


def test_a_killed_proxy_leaves_a_resumable_run(upstream, cassette):
    env = command_env(cassette, {"OPENAI_API_KEY": "k", "TURNS": "40"})
    process = subprocess.Popen([sys.executable, "-m", "forkpoint", "record", "--name", "doomed",
                                "--upstream", upstream.url, "--", *AGENT],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and committed_exchanges(cassette) < 5:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the proxy and its agent, mid-run
    process.wait(10)
    store = open_store(cassette)
    run = store.find_run("doomed")
    recorded = store.step_count(run.id)
    assert run.status is RunStatus.RUNNING and recorded >= 5
    assert len(store.snapshots(run.id)) >= recorded - 1
    store.close()
    upstream.upstream.reset()
    resumed = forkpoint(
        cassette, "resume", "doomed", "--upstream", upstream.url, env={"TURNS": "40"}
    )
    assert resumed.returncode == 0, resumed.stderr
    assert len(final_state(resumed)["answers"]) == 40
    assert upstream.request_count <= 40 - recorded + 1


def test_resuming_a_finished_run_is_a_clear_error(upstream, cassette):
    forkpoint(cassette, "record", "--name", "done", "--upstream", upstream.url)
    result = forkpoint(cassette, "resume", "done", "--upstream", upstream.url)
    assert result.returncode == 2 and "nothing to resume" in result.stderr


STREAMING = [sys.executable, str(ROOT / "tests/e2e/agents/streaming_agent.py")]


def test_a_run_killed_mid_stream_resumes_sending_the_cut_step_live_again(start_upstream, cassette):
    """Found by a user: the cut stream was served again, the agent got a connection error and
    the run stayed `crashed` on every resume. With `--on-hangup cancel` the answer is kept cut
    (by default it is read to its end: tests/e2e/test_resume_crashes.py)."""
    from forkpoint.testing.upstream import ScriptedUpstream

    upstream = start_upstream(ScriptedUpstream(chunk_delay=0.02))
    crashed = forkpoint(cassette, "record", "--name", "cut", "--on-hangup", "cancel",
                        "--upstream", upstream.url, env={"CRASH_MID_STREAM": "1"},
                        agent=STREAMING)  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL
    with contextlib.closing(open_store(cassette)) as store:
        first, cut = store.exchanges(store.find_run("cut").id)
    assert first.complete and not cut.complete
    sent = upstream.request_count
    resumed = forkpoint(cassette, "resume", "cut", "--upstream", upstream.url, agent=STREAMING)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == [f"[gpt-4o] question {i}" for i in range(3)]
    assert upstream.request_count == sent + 2  # the cut turn again, and the last; not the first
    with contextlib.closing(open_store(cassette)) as store:
        run = store.find_run("cut")
        steps = store.exchanges(run.id)
    assert run.status is RunStatus.FINISHED
    assert [(e.step, e.complete) for e in steps] == [(0, True), (1, False), (2, True), (3, True)]


def test_a_resume_that_differs_from_its_recording_says_where(upstream, cassette):
    """Found by a user: an IntegrityError traceback, and the run ended `diverged`."""
    forkpoint(cassette, "record", "--name", "was", "--upstream", upstream.url,
              env={"CRASH_AFTER": "2"})  # fmt: skip
    other = [sys.executable, "-c", (
        "import openai; openai.OpenAI(max_retries=0).chat.completions.create("
        "model='gpt-4o', messages=[{'role': 'user', 'content': 'not question 0'}])"
    )]  # fmt: skip
    failed = forkpoint(cassette, "resume", "was", "--upstream", upstream.url, agent=other)
    # the agent's own SDK raises the divergence (its traceback is the agent's); forkpoint logs none
    assert failed.returncode != 0 and "IntegrityError" not in failed.stderr
    assert "forkpoint divergence" in failed.stderr
    assert '"question 0" → "not question 0"' in failed.stderr
    live = forkpoint(cassette, "resume", "was", "--on-divergence", "live", "--upstream",
                     upstream.url, agent=other)  # fmt: skip
    assert live.returncode == 0, live.stderr
