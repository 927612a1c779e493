"""A non-Python client: the official Node `openai` package (from package-lock.json) and its tool
runner, plain and streamed, run with node (examples/stacks/node/agent.mjs)."""

from __future__ import annotations

import pytest

from forkpoint.engine.changes import Change
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks


def test_node_tool_runner_plain_and_streamed_replays_offline(stacks, node_agent):
    recorded = stacks.check(node_agent, support_script, min_steps=6)
    for run in ("plain", "stream"):
        assert recorded.output[run]["final_output"].startswith("[gpt-4o-mini] Refund for A1001")
    assert len(recorded.output["plain"]["completions"]) == 3
    assert len(recorded.output["stream"]["chunks"]) > 20
    assert [e.streamed for e in recorded.exchanges] == [False] * 3 + [True] * 3


def test_fork_the_streamed_run_with_another_model(stacks, node_agent):
    recorded = stacks.record(node_agent, support_script, min_steps=6)
    forked = stacks.fork(recorded, node_agent, support_script, at=4, change=Change(model="gpt-4o"))
    assert forked.output["plain"] == recorded.output["plain"]
    assert forked.output["stream"]["final_output"].startswith("[gpt-4o] Refund for A1001")
