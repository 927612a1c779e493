"""LangGraph with langchain-openai: a ReAct-style graph (model node, ToolNode, tools_condition)
streamed in "messages" mode over Chat Completions (examples/stacks/langgraph_agent.py)."""

from __future__ import annotations

import pytest

from forkpoint.engine.changes import Change
from tests.stacks.conftest import python_agent
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks

AGENT = python_agent("langgraph_agent.py")


def test_react_graph_with_tools_replays_offline(stacks):
    recorded = stacks.check(AGENT, support_script, min_steps=3)
    seen = recorded.output
    assert seen["final_output"].startswith("[gpt-4o] Refund for A1001 done")
    assert [m["type"] for m in seen["messages"]] == ["human", "ai", "tool", "ai", "tool", "ai"]
    assert len(seen["tokens"]) > 10  # the model's answer came token by token
    assert all(e.route == "/v1/chat/completions" and e.streamed for e in recorded.exchanges)


def test_fork_after_the_first_tool_with_another_model(stacks):
    recorded = stacks.record(AGENT, support_script, min_steps=3)
    forked = stacks.fork(recorded, AGENT, support_script, at=1, change=Change(model="gpt-4o-mini"))
    before, after = recorded.output["messages"], forked.output["messages"]
    assert after[:3] == before[:3]  # the first model turn and its tool result, from the cassette
    assert after[3]["response_metadata"]["model_name"] == "gpt-4o-mini"
    assert forked.output["final_output"].startswith("[gpt-4o-mini] Refund for A1001 done")
