"""kill -9 of `forkpoint record -- CMD` while its agent talks: every answer the agent got is
in the cassette once the next forkpoint on it starts (issue 14.1)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from forkpoint.cassettes.sqlite.store import SqliteStore

AGENT = textwrap.dedent("""
    import os, sys, httpx
    url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
    with httpx.Client(timeout=10) as http:
        for index in range(100_000):
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{index}"}]}
            try:
                answer = http.post(url, json=body)
            except httpx.HTTPError:
                sys.exit(3)  # the proxy is gone
            if answer.status_code == 200:
                print(f"q{index}", flush=True)
""")


def record(cassette: Path, upstream_url: str, agent: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "record", "--cassette", str(cassette),
         "--upstream", upstream_url, "--name", "killed", "--", sys.executable, "-c", agent],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def test_kill_9_of_record_loses_nothing_its_agent_received(upstream, tmp_path):
    cassette = tmp_path / "record.db"
    recording = record(cassette, upstream.url, AGENT)
    assert recording.stdout is not None
    received = [recording.stdout.readline().strip() for _ in range(60)]
    recording.send_signal(signal.SIGKILL)
    recording.wait(10)
    received += [line.strip() for line in recording.stdout]  # the agent's last, then it exits
    recording.stdout.close()
    # whatever is left of the group (none, normally: the agent runs in a group of its own,
    # and ends with forkpoint)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(recording.pid, signal.SIGKILL)
    later = record(cassette, upstream.url, "pass")  # the next forkpoint merges the journal
    assert later.wait(60) == 0
    assert later.stdout is not None
    later.stdout.close()
    store = SqliteStore(cassette)
    try:
        run = next(run for run in store.list_runs() if store.step_count(run.id) > 0)
        stored = [json.loads(e.request_body)["messages"][0]["content"]
                  for e in store.exchanges(run.id)]  # fmt: skip
    finally:
        store.close()
    missing = set(received) - set(stored)
    assert not missing, f"{len(missing)} of {len(received)} received answers lost"
    assert len(stored) == len(set(stored))
