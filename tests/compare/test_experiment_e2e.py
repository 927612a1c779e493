"""`forkpoint experiment` through the real CLI: the support agent (openai SDK, HTTP tools) recorded
over three tickets with gpt-4o, then all of them forked with gpt-4o-mini and judged by the
example's refund-policy check, as scripts/demo does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.support_agent.script import support_script
from forkpoint.testing.upstream import ScriptedUpstream
from tests.e2e.test_fork import AGENT, ROOT, Tools

TICKETS = {
    "A1001": "My order A1001 (trail running shoes) doesn't fit. Can I get a refund?",  # refunded
    "A1003": "The scarf from order A1003 is itchy, I want my money back.",  # 45 days: too late
    "A1004": "Please refund order A1004, the lamp flickers.",  # refunded already
}


@pytest.fixture
def tools() -> Iterator[Tools]:
    service = Tools()
    yield service
    service.stop()


def forkpoint(cassette: Path, *args: str, model: str = "gpt-4o") -> subprocess.Popen[str]:
    env = {**os.environ, "FORKPOINT_CASSETTE": str(cassette), "OPENAI_API_KEY": "sk-test",
           "PYTHONPATH": str(ROOT), "SUPPORT_MODEL": model, "COLUMNS": "160"}  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "forkpoint", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def finish(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def test_an_experiment_over_recorded_tickets_with_a_cheaper_model(cassette, start_upstream, tools):
    llm = start_upstream(ScriptedUpstream(support_script))
    live = ["--upstream", llm.url, "--route", f"tools={tools.url}"]

    def record(order: str, text: str) -> subprocess.Popen[str]:
        return forkpoint(cassette, "record", "--name", f"ticket-{order}", "--label", "batch=e2e",
                         "--label", f"ticket={text}", *live, "--", *AGENT, text)  # fmt: skip

    # the first alone: two processes creating one cassette at once can find it locked
    first, *rest = TICKETS.items()
    finish(record(*first))
    for process in [record(*ticket) for ticket in rest]:
        finish(process)
    tools.reset()  # the recordings refunded A1001: the forks' live steps need the shop as it was
    llm.upstream.reset()

    out = finish(forkpoint(cassette, "experiment", "--select", "label:batch=e2e", "--at", "first-llm",
                           "--model", "gpt-4o-mini", "--check",
                           "examples.support_agent.checks:refund_follows_policy", "--name", "mini",
                           "--json", *live, "--", *AGENT, "{label:ticket}"))  # fmt: skip
    document = json.loads(out)
    summary = document["summary"]
    assert (summary["runs"], summary["forked"], summary["failed"]) == (3, 3, 0)
    assert summary["behaviour_changed"] == 0  # same lookups, policy reads and refund decisions
    assert summary["answer_changed"] == 3  # gpt-4o-mini answers tersely
    check = summary["check"]
    assert (check["branches"]["passed"], check["parents"]["passed"], check["regressed"]) == (
        3,
        3,
        0,
    )
    assert summary["cost_usd"]["delta"] < 0 and summary["cost_usd"]["unpriced"] == 0
    # every model call of the experiment went out as gpt-4o-mini, each ticket's own text in it
    assert {r.json["model"] for r in llm.upstream.requests} == {"gpt-4o-mini"}
    firsts = {r.json["messages"][1]["content"] for r in llm.upstream.requests}
    assert firsts == set(TICKETS.values())
    answers = {r["source"]["name"]: r["answers"]["branch"] for r in document["runs"]}
    assert answers["ticket-A1001"].startswith("Refund of $89.90 issued for order A1001")
    assert answers["ticket-A1003"].startswith("No refund for order A1003")

    shown = finish(forkpoint(cassette, "experiment", "show", "mini"))
    assert "refund_follows_policy: passed 3 of 3 (parents 3 of 3)" in shown
    assert "3 of 3 changed their final answer" in shown
