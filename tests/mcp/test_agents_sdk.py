"""An OpenAI Agents SDK agent whose tools are an MCP server's, over stdio and over streamable
HTTP; its model calls go to the scripted upstream. The MCP calls are steps of the same run as the
model calls, in the agent's order: recorded, replayed with neither the model nor the server
reachable (the stdio server never started), forked with the tool mocked."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.models import Kind, Origin
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream, ToolCallSpec
from tests.mcp.conftest import HERE, TOOL_SERVER, door, said, started, steps
from tests.runner import forkpoint as run_forkpoint

pytestmark = [pytest.mark.slow, pytest.mark.stacks]  # openai-agents: the stacks extra
AGENT = [str(Path(TOOL_SERVER[0])), str(HERE / "agents" / "agents_sdk.py")]
ENV = {"OPENAI_API_KEY": "sk-test-agents", "OPENAI_AGENTS_DISABLE_TRACING": "1"}


def support(prompt: Prompt) -> Reply:
    """Ask for the policy, then say what the tool answered."""
    if not prompt.tool_results:
        return Reply(tool_calls=(ToolCallSpec("refund_policy", {"order_id": "A1"}),))
    return Reply(text=f"Policy: {prompt.tool_results[-1]}")


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_agents_sdk_agent_with_mcp_tools_records_replays_and_forks(
    transport, start_upstream, http_server, tmp_path, marker
):
    model = start_upstream(ScriptedUpstream(support))
    cassette = tmp_path / "c.db"
    env = {**ENV, "FP_MCP_MARKER": str(marker)}
    if transport == "stdio":
        agent, routes = [*AGENT, "stdio", *door(*TOOL_SERVER)], []
    else:
        server = http_server()
        agent, routes = [*AGENT, "http", "/tools/mcp"], ["--route", f"tools={server.url}"]
    recorded = run_forkpoint(
        "record", "--upstream", model.url, *routes, "--", *agent, cassette=cassette, env=env
    )
    assert recorded.returncode == 0, recorded.output
    final = said(recorded.stdout)[-1]["final"]
    assert "order A1: refundable within 30 days" in final
    exchanges = steps(cassette, recorded.run_id)
    kinds = [(e.summary.kind, e.summary.dialect) for e in exchanges]
    model_steps = [i for i, (kind, _) in enumerate(kinds) if kind is Kind.LLM]
    call = next(e for e in exchanges if e.summary.kind is Kind.TOOL)
    assert call.summary.tool_calls[0].name == "refund_policy"
    assert model_steps[0] < call.step < model_steps[-1]  # in the agent's order, one numbering
    asked = model.request_count

    if transport == "http":
        server.stop()
    marker.unlink(missing_ok=True)
    replayed = run_forkpoint("replay", recorded.run_id, "--", *agent, cassette=cassette, env=env)
    assert replayed.returncode == 0, replayed.output
    assert said(replayed.stdout)[-1]["final"] == final
    assert model.request_count == asked and started(marker) == 0

    if transport == "http":
        routes = ["--route", f"tools={http_server().url}"]
    policy = tmp_path / "policy.json"
    policy.write_text('"no refunds after 7 days"')
    forked = run_forkpoint(
        "fork", recorded.run_id, "--at", call.step, "--mock", f"mcp:refund_policy=@{policy}",
        *routes, "--", *agent, cassette=cassette, env=env,
    )  # fmt: skip
    assert forked.returncode == 0, forked.output
    assert "no refunds after 7 days" in said(forked.stdout)[-1]["final"]
    # the agent may list its tools again before or after the call: found by what they are
    branch = steps(cassette, forked.run_id)
    mocked = [e for e in branch if e.summary and e.summary.kind is Kind.TOOL]
    assert [e.origin for e in mocked] == [Origin.MOCKED]
    assert branch[-1].summary and branch[-1].summary.kind is Kind.LLM
    assert branch[-1].origin is Origin.LIVE
