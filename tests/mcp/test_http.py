"""Streamable HTTP with the official MCP Python SDK on both sides (its client, a server built
with `MCPServer`), both protocol eras: revision 2025-11-25's handshake, session id, GET stream
and DELETE, and 2026-07-28's stateless requests; answers as SSE and as JSON. Recorded, replayed
with the server stopped, forked with a mocked tool and the live steps after it sent to a new
server (the recorded session mapped to the one it gives)."""

from __future__ import annotations

import pytest

from forkpoint.models import Kind, Origin
from tests.mcp.conftest import SDK_CLIENT, said, started, steps
from tests.runner import forkpoint as run_forkpoint

pytestmark = pytest.mark.slow
ROUTE = "/tools/mcp"  # the server's /mcp endpoint, under forkpoint's --route tools=URL


@pytest.mark.parametrize(
    ("mode", "json_response"), [("legacy", False), ("auto", True), ("auto", False)]
)
def test_record_replay_offline_and_fork_with_a_mocked_tool(
    mode, json_response, http_server, tmp_path, marker
):
    cassette = tmp_path / "c.db"
    agent = [*SDK_CLIENT, mode, "http", ROUTE]
    server = http_server(json_response=json_response)
    env = {"FP_MCP_AUTH": "mcp-secret-bearer-value"}
    recorded = run_forkpoint(
        "record", "--route", f"tools={server.url}", "--", *agent, cassette=cassette, env=env
    )
    assert recorded.returncode == 0, recorded.output
    seen = said(recorded.stdout)
    assert seen[1]["text"] == ["order A1: refundable within 30 days"] and seen[3]["text"] == ["5"]
    exchanges = steps(cassette, recorded.run_id)
    tools = [e for e in exchanges if e.summary.kind is Kind.TOOL]
    assert [e.summary.tool_calls[0].name for e in tools] == ["refund_policy", "slow_count", "add"]
    assert all(e.summary.dialect == "mcp" for e in exchanges)
    assert b"mcp-secret-bearer-value" not in cassette.read_bytes()  # the Authorization header
    server.stop()

    replayed = run_forkpoint("replay", recorded.run_id, "--", *agent, cassette=cassette)
    assert replayed.returncode == 0, replayed.output
    assert said(replayed.stdout) == seen
    assert "diverged" not in replayed.stderr

    fresh = http_server(json_response=json_response)
    policy = tmp_path / "policy.json"
    policy.write_text('"no refunds after 7 days"')
    at = tools[0].step
    forked = run_forkpoint(
        "fork", recorded.run_id, "--at", at, "--mock", f"mcp:refund_policy=@{policy}",
        "--route", f"tools={fresh.url}", "--", *agent, cassette=cassette, env=env,
    )  # fmt: skip
    assert forked.returncode == 0, forked.output
    after = said(forked.stdout)
    assert after[1]["text"] == ["no refunds after 7 days"]
    assert after[2:] == seen[2:]  # live, from the new server
    origins = [e.origin for e in steps(cassette, forked.run_id)]
    assert origins[at] is Origin.MOCKED and Origin.LIVE in origins[at + 1 :]
    assert started(marker) == 2


def test_a_divergence_over_http_is_the_servers_error_to_the_client(http_server, tmp_path):
    cassette = tmp_path / "c.db"
    server = http_server()
    agent = [*SDK_CLIENT, "auto", "http", ROUTE]
    env = {"TOOLS": 'refund_policy:{"order_id": "A1"}'}
    recorded = run_forkpoint(
        "record", "--route", f"tools={server.url}", "--", *agent, cassette=cassette, env=env
    )
    assert recorded.returncode == 0, recorded.output
    server.stop()
    other = {"TOOLS": 'refund_policy:{"order_id": "B2"}'}
    replayed = run_forkpoint("replay", recorded.run_id, "--", *agent, cassette=cassette, env=other)
    assert replayed.returncode != 0
    assert (
        f"no recorded exchange matches POST {ROUTE} (MCP tool call refund_policy)"
        in replayed.stderr
    )
    assert '$.params.arguments.order_id: "A1" → "B2"' in replayed.stderr
