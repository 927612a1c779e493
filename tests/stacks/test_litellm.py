"""LiteLLM as a client library: `litellm.completion("openai/…", api_base=…)` with tools, plain
and streamed (examples/stacks/litellm_agent.py)."""

from __future__ import annotations

import pytest

from tests.stacks.conftest import python_agent
from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks

# Without it LiteLLM fetches its price list from the internet at import.
AGENT = python_agent("litellm_agent.py", env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"})


def test_completion_with_tools_plain_and_streamed_replays_offline(stacks):
    recorded = stacks.check(AGENT, support_script, min_steps=6)
    for run in ("plain", "stream"):
        assert recorded.output[run]["final_output"].startswith("[gpt-4o] Refund for A1001 done")
    assert [e.streamed for e in recorded.exchanges] == [False] * 3 + [True] * 3
