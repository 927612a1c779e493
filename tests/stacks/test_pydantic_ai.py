"""Pydantic AI: an agent with tools on `openai:` (the Responses API), run once and once
streamed (examples/stacks/pydantic_ai_agent.py)."""

from __future__ import annotations

import pytest

from tests.stacks.conftest import python_agent
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks

AGENT = python_agent("pydantic_ai_agent.py")


def test_agent_with_tools_plain_and_streamed_replays_offline(stacks):
    recorded = stacks.check(AGENT, support_script, min_steps=6)
    for run in ("plain", "stream"):
        assert recorded.output[run]["final_output"].startswith("[gpt-4o] Refund for A1001 done")
        calls = [
            part["tool_name"]
            for message in recorded.output[run]["messages"]
            for part in message["parts"]
            if part["part_kind"] == "tool-call"
        ]
        assert calls == ["lookup_order", "issue_refund"]
    assert all(e.route == "/v1/responses" for e in recorded.exchanges)
    assert [e.streamed for e in recorded.exchanges] == [False] * 3 + [True] * 3
