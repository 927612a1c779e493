"""The Agents SDK's session as forkpoint state: kill the agent between turns, resume it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import RunStatus
from tests.stacks.conftest import ROOT

AGENT = [sys.executable, str(ROOT / "examples/stacks/agents_session_agent.py")]


def forkpoint(cassette, upstream, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    full = {**os.environ, "FORKPOINT_CASSETTE": str(cassette), "OPENAI_API_KEY": "k",
            "OPENAI_AGENTS_DISABLE_TRACING": "1", "PYTHONPATH": str(ROOT), **(env or {})}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "forkpoint", *args, "--upstream", upstream.url,
                           "--", *AGENT], capture_output=True, text=True, timeout=120, env=full)  # fmt: skip


def test_a_killed_agents_sdk_run_resumes_with_its_session(upstream, cassette):
    whole = forkpoint(cassette, upstream, "record", "--name", "whole")
    assert whole.returncode == 0, whole.stderr
    answers = json.loads(whole.stdout.splitlines()[0])
    assert answers == ["[gpt-4o] Where is order A1001?", "[gpt-4o] Can I return it?",
                       "[gpt-4o] Thanks, please refund it."]  # fmt: skip

    upstream.upstream.reset()
    crashed = forkpoint(cassette, upstream, "record", "--name", "crashy", env={"CRASH_AFTER": "2"})
    assert crashed.returncode == 128 + signal.SIGKILL
    store = SqliteStore(cassette)
    run = store.find_run("crashy")
    assert run.status is RunStatus.CRASHED
    assert {s.adapter for s in store.snapshots(run.id)} == {"openai-agents"}
    store.close()

    upstream.upstream.reset()
    resumed = forkpoint(cassette, upstream, "resume", "crashy")
    assert resumed.returncode == 0, resumed.stderr
    assert "turns_done=1" in resumed.stderr  # the session came back, not a fresh one
    assert json.loads(resumed.stdout.splitlines()[0]) == answers
    # only the turn that never happened reached the model
    asked = [r.json["input"][-1]["content"] for r in upstream.requests]
    assert asked == ["Thanks, please refund it."]
