"""The OpenAI Agents SDK: a triage agent with a function tool hands off to a billing agent with
its own, run streamed over the Responses API (examples/stacks/agents_sdk_agent.py)."""

from __future__ import annotations

import pytest

from forkpoint.engine.changes import Change
from tests.stacks.conftest import python_agent
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks

# Tracing export posts to api.openai.com whatever the base URL: a user turns it off so.
AGENT = python_agent("agents_sdk_agent.py", env={"OPENAI_AGENTS_DISABLE_TRACING": "1"})
HANDOFF = 2  # steps: 0 triage→lookup_order, 1 triage→transfer_to_billing, 2 billing→issue_refund


def test_agent_with_tools_and_handoff_replays_offline(stacks):
    recorded = stacks.check(AGENT, support_script, min_steps=4)
    seen = recorded.output
    assert seen["last_agent"] == "Billing"
    assert seen["final_output"].startswith("[gpt-4o] Refund for A1001 done")
    calls = [item["name"] for r in seen["responses"] for item in r["output"] if item.get("name")]
    assert calls == ["lookup_order", "transfer_to_billing", "issue_refund"]
    assert any(e["type"] == "response.function_call_arguments.delta" for e in seen["events"])
    assert all(e.route == "/v1/responses" and e.streamed for e in recorded.exchanges)


def test_fork_at_the_handoff_with_another_model(stacks):
    recorded = stacks.record(AGENT, support_script, min_steps=4)
    forked = stacks.fork(
        recorded, AGENT, support_script, at=HANDOFF, change=Change(model="gpt-4o-mini")
    )
    before, after = recorded.output["responses"], forked.output["responses"]
    assert after[:HANDOFF] == before[:HANDOFF]  # the triage agent's turns, from the cassette
    assert after[HANDOFF]["response_id"] != before[HANDOFF]["response_id"]
    assert forked.output["final_output"].startswith("[gpt-4o-mini] Refund for A1001 done")
