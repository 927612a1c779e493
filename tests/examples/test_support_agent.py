"""The support agent example, end to end through the real CLI: record, stop everything, replay.

The fake LLM and the tool service run in the test process on free ports, so the test can count
what reached them; `forkpoint` and the agent run as subprocesses, as a user runs them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from examples.support_agent.script import support_script
from examples.support_agent.tools_service import APPROVALS, REFUNDS, create_app
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.script import parse_prompt
from forkpoint.testing.upstream import Reply, ScriptedUpstream, ToolCallSpec
from tests.runner import Ran
from tests.runner import forkpoint as run_forkpoint

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "examples" / "support_agent" / "agent.py"
TICKET = "My order A1001 arrived but the shoes don't fit. Can I get a refund?"
ANSWER = "Refund of $89.90 issued for order A1001 (RF-7001)."


class RunningTools:
    """The tool service on its own loop thread, stoppable mid-test like the fake LLM."""

    def __init__(self) -> None:
        self.app = create_app()
        self._thread = LoopThread("support-tools")
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)  # made on the loop that runs it
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.call(self._runner.cleanup())
            self._thread.close()


@pytest.fixture
def tools() -> Iterator[RunningTools]:
    running = RunningTools()
    yield running
    running.stop()


def forkpoint(*args: str, api_key: bool = True) -> Ran:
    """Run the CLI as a user would, with none of the caller's agent or forkpoint settings."""
    env = {"OPENAI_API_KEY": "sk-test"} if api_key else {}
    return run_forkpoint(*args, env=env, clean=True, console=True, cwd=REPO)


def answer_and_run(done: Ran) -> tuple[str, str]:
    """The agent's answer (its stdout) and the run id forkpoint reported."""
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.run_id


def test_record_then_replay_offline(start_upstream, tools, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    llm = start_upstream(ScriptedUpstream(support_script, chunk_delay=0.01))
    cassette = str(tmp_path / "demo.db")
    agent = [sys.executable, str(AGENT), TICKET]

    recorded = forkpoint(
        "record", "--cassette", cassette, "--name", "ticket", "--upstream", llm.url,
        "--route", f"tools={tools.url}", "--", *agent,
    )  # fmt: skip
    answer, run_id = answer_and_run(recorded)
    assert answer == ANSWER
    assert "tools: lookup_order(" in recorded.stderr
    assert llm.request_count == 4
    assert len(tools.app[REFUNDS]) == 1

    llm.stop()
    tools.stop()
    replayed = forkpoint("replay", "--cassette", cassette, "ticket", "--", *agent, api_key=False)
    replay_answer, replay_id = answer_and_run(replayed)
    assert replay_answer == answer
    assert llm.request_count == 4
    assert len(tools.app[REFUNDS]) == 1

    shown = json.loads(forkpoint("show", "--cassette", cassette, run_id, "--json").stdout)
    assert shown["status"] == "finished"
    exchanges = shown["exchanges"]
    assert [(e["kind"], e["method"], e["route"], e["status"]) for e in exchanges] == [
        ("llm", "POST", "/v1/chat/completions", 200),
        ("tool", "GET", "/tools/orders/A1001", 200),
        ("llm", "POST", "/v1/chat/completions", 200),
        ("tool", "GET", "/tools/refund-policy", 200),
        ("llm", "POST", "/v1/chat/completions", 200),
        ("tool", "POST", "/tools/refunds", 201),
        ("llm", "POST", "/v1/chat/completions", 200),
    ]
    llm_calls = [e for e in exchanges if e["kind"] == "llm"]
    assert all(e["model"] == "gpt-4o-mini" and e["streamed"] for e in llm_calls)
    assert all(e["usage"]["input"] > 0 and e["usage"]["output"] > 0 for e in llm_calls)
    called = [c["name"] for e in llm_calls for c in e["tool_calls"]]
    assert called == ["lookup_order", "refund_policy", "issue_refund"]

    replay = json.loads(forkpoint("show", "--cassette", cassette, replay_id, "--json").stdout)
    assert (replay["mode"], replay["status"], replay["parent_id"]) == ("replay", "finished", run_id)
    assert {e["origin"] for e in replay["exchanges"]} == {"replayed"}


ORDER = {"order_id": "A1001", "item": "Shoes", "amount": 89.9, "status": "delivered",
         "days_since_delivery": 12}  # fmt: skip
POLICY = {"policy": "30 days", "window_days": 30}
ToolTurn = tuple[str, dict[str, Any], Any]  # tool name, arguments, result
READ_POLICY: ToolTurn = ("refund_policy", {}, POLICY)


def chat(model: str, *tool_turns: ToolTurn) -> Reply:
    """`support_script`'s reply to a Chat Completions history of the ticket and tool turns."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": TICKET}]
    for n, (name, arguments, result) in enumerate(tool_turns):
        call = {"id": f"call_{n}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{n}", "content": json.dumps(result)}
        )
    reply = support_script(parse_prompt("openai_chat", {"model": model, "messages": messages}))
    assert isinstance(reply, Reply)
    return reply


def test_script_refunds_an_eligible_order() -> None:
    assert chat("gpt-4o-mini").tool_calls == (ToolCallSpec("lookup_order", {"order_id": "A1001"}),)
    looked_up: ToolTurn = ("lookup_order", {"order_id": "A1001"}, ORDER)
    assert chat("gpt-4o-mini", looked_up).tool_calls == (ToolCallSpec("refund_policy"),)
    refund = chat("gpt-4o-mini", looked_up, READ_POLICY).tool_calls
    assert refund == (ToolCallSpec("issue_refund", {"order_id": "A1001", "amount": 89.9}),)
    refunded = ("issue_refund", refund[0].arguments, {"refund_id": "RF-1", "amount": 89.9})
    assert chat("gpt-4o-mini", looked_up, READ_POLICY, refunded).text == (
        "Refund of $89.90 issued for order A1001 (RF-1)."
    )


def test_script_skips_the_refund_outside_the_window_and_words_it_by_model() -> None:
    late: ToolTurn = ("lookup_order", {"order_id": "A1001"}, {**ORDER, "days_since_delivery": 45})
    terse = chat("gpt-4o-mini", late, READ_POLICY)
    chatty = chat("gpt-4o", late, READ_POLICY)
    assert not terse.tool_calls and not chatty.tool_calls
    assert terse.text == (
        "No refund for order A1001 ($89.90): it was delivered 45 days ago, "
        "outside the 30-day refund window."
    )
    assert chatty.text and chatty.text.startswith("I'm sorry, but I can't refund order A1001")


BIG_TICKET = "My headphones (order A1005) hum constantly. I want a refund."  # $199.99: over $100


def test_a_refund_over_the_limit_asks_for_approval_which_the_tool_service_gives_itself(
    start_upstream, tools, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    llm = start_upstream(ScriptedUpstream(support_script, chunk_delay=0.01))
    cassette = str(tmp_path / "c.db")
    recorded = forkpoint(
        "record", "--cassette", cassette, "--upstream", llm.url, "--route", f"tools={tools.url}",
        "--", sys.executable, str(AGENT), BIG_TICKET,
    )  # fmt: skip
    answer, _ = answer_and_run(recorded)
    assert (
        answer == "Refund of $199.99 issued for order A1005 (RF-7001, approved by auto-approval)."
    )
    assert tools.app[APPROVALS] == [
        {"action": "refund", "order_id": "A1005", "amount": 199.99, "limit": 100.0}
    ]
    assert [r["amount"] for r in tools.app[REFUNDS]] == [199.99]


def test_a_parked_approval_answered_no_wakes_the_agent_to_refuse_the_refund(
    start_upstream, tools, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    llm = start_upstream(ScriptedUpstream(support_script, chunk_delay=0.01))
    cassette = str(tmp_path / "c.db")
    parked = forkpoint(
        "record", "--cassette", cassette, "--park", "POST /tools/approvals*", "--upstream",
        llm.url, "--route", f"tools={tools.url}", "--", sys.executable, str(AGENT), BIG_TICKET,
    )  # fmt: skip
    assert parked.returncode == 75, parked.stderr
    assert "asking for approval" in parked.stderr and parked.stdout == ""
    assert tools.app[APPROVALS] == [] and tools.app[REFUNDS] == []  # the request went nowhere
    denial = '{"approved": false, "by": "bob", "note": "over the monthly budget"}'
    woken = forkpoint("answer", "--cassette", cassette, parked.run_id, "--body", denial)
    assert woken.returncode == 0, woken.stderr
    assert woken.stdout.strip() == (
        "No refund for order A1005 ($199.99): a refund over $100.00 needs approval, and bob did "
        "not give it: over the monthly budget."
    )
    assert tools.app[APPROVALS] == [] and tools.app[REFUNDS] == []  # no refund was issued
    shown = json.loads(forkpoint("show", "--cassette", cassette, parked.run_id, "--json").stdout)
    assert [(e["route"], e["origin"]) for e in shown["exchanges"][4:]] == [
        ("/v1/chat/completions", "live"),
        ("/tools/approvals", "answered"),
        ("/v1/chat/completions", "live"),
    ]
