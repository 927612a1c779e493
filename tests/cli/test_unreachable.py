"""An upstream that cannot be reached is explained: once on stderr per upstream and cause, however
often the agent's SDK retries, and in `forkpoint show`."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.runner import forkpoint

AGENT = """
import os, sys, urllib.request, openai
for _ in range(2):  # a tool service, asked twice
    try:
        urllib.request.urlopen(os.environ["FORKPOINT_URL"] + "/tools/orders/A1")
    except OSError as error:
        print("tool failed:", error, file=sys.stderr)
client = openai.OpenAI(max_retries=2)  # three attempts, each unanswered
client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
"""


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_upstream_is_said_once_per_upstream_and_in_show(tmp_path: Path):
    model, tools = f"http://127.0.0.1:{closed_port()}", f"http://127.0.0.1:{closed_port()}"
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    cassette = tmp_path / "c.db"
    done = forkpoint(
        "record", "--name", "nowhere", "--upstream", model, "--route", f"tools={tools}",
        "--", sys.executable, str(agent),
        cassette=cassette, env={"OPENAI_API_KEY": "sk-x"},
    )  # fmt: skip
    assert done.exit_code == 1, done.output
    said = [line for line in done.stderr.splitlines() if "cannot reach upstream" in line]
    advice = "; the agent got no answer (check the upstream's address and the network)"
    assert len(said) == 2, done.stderr  # two upstreams, five requests: one line each
    for line, url in zip(said, (f"{tools}/orders/A1", f"{model}/v1/chat/completions"), strict=True):
        assert line.startswith(f"forkpoint: cannot reach upstream {url}: Cannot connect to host")
        assert line.endswith(advice) and "Connect call failed" in line  # aiohttp's cause
    store = SqliteStore(cassette)
    [run] = store.list_runs()
    exchanges = store.exchanges(run.id, bodies=False)
    store.close()
    assert len(exchanges) == 5 and all(e.status is None and e.error for e in exchanges)

    shown = forkpoint("show", "nowhere", cassette=cassette)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].endswith("crashed  nowhere  (command exited with 1)")
    steps = lines[2:7]
    assert all("[no answer: cannot reach upstream http://127.0.0.1:" in s for s in steps)
    assert "/v1/chat/completions: Cannot connect to host" in steps[-1]
