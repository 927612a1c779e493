"""A Node MCP server from npm, the reference `@modelcontextprotocol/server-everything` (the
TypeScript SDK; revision 2025-11-25), behind the stdio door, with the Python SDK's client in
`auto` mode: it probes `server/discover`, which this server refuses, and falls back to the
handshake. Recorded, replayed with the server's package gone from PATH (it cannot start), forked
with a tool mocked by a callable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forkpoint.models import Exchange, Kind, Origin
from tests.mcp.conftest import HERE, SDK_CLIENT, door, said, steps
from tests.runner import forkpoint as run_forkpoint

pytestmark = pytest.mark.slow
EVERYTHING = HERE / "node_modules" / ".bin" / "mcp-server-everything"
CALLS = 'echo:{"message": "hi"};get-sum:{"a": 2, "b": 3};trigger-long-running-operation:{"duration": 1, "steps": 2}'


def tool_step(exchanges: list[Exchange], name: str) -> Exchange:
    tools = (e for e in exchanges if e.summary and e.summary.kind is Kind.TOOL)
    return next(e for e in tools if e.summary and e.summary.tool_calls[0].name == name)


def test_the_reference_everything_server_records_replays_and_forks(tmp_path: Path):
    assert EVERYTHING.exists(), "run scripts/bootstrap: it installs tests/mcp's npm packages"
    # the server's package in a place of its own, removed before the replay
    copy = tmp_path / "everything"
    shutil.copytree(HERE / "node_modules", copy / "node_modules", symlinks=True)
    server = str(copy / "node_modules" / ".bin" / "mcp-server-everything")
    agent = [*SDK_CLIENT, "auto", "stdio", *door(server, "stdio")]
    cassette = tmp_path / "c.db"
    env = {"TOOLS": CALLS}
    recorded = run_forkpoint("record", "--", *agent, cassette=cassette, env=env, timeout=180)
    assert recorded.returncode == 0, recorded.output
    seen = said(recorded.stdout)
    assert "echo" in seen[0]["tools"] and seen[1]["text"] == ["Echo: hi"]
    assert "5" in seen[2]["text"][0]
    exchanges = steps(cassette, recorded.run_id)
    assert exchanges[0].route == "/mcp-stdio/mcp-server-everything"
    # the probe, then the handshake
    assert b"server/discover" in exchanges[0].request_body
    assert b'"initialize"' in exchanges[1].request_body
    long_call = tool_step(exchanges, "trigger-long-running-operation")
    assert long_call.streamed and b"notifications/progress" in long_call.response_body
    assert seen[3]["progress"] == [1, 2]  # the progress the server reported, as it went

    shutil.rmtree(copy)  # the server is gone
    replayed = run_forkpoint("replay", recorded.run_id, "--", *agent, cassette=cassette, env=env)
    assert replayed.returncode == 0, replayed.output
    assert said(replayed.stdout) == seen

    sums = tool_step(exchanges, "get-sum").step
    forked = run_forkpoint(
        "fork", recorded.run_id, "--at", sums, "--mock", "mcp:get-*=tests.mcp.mocks:wrong_sum",
        "--", *agent, cassette=cassette, env={**env, "TOOLS": CALLS.split(";")[0] + ";" + CALLS.split(";")[1]},
    )  # fmt: skip
    assert forked.returncode == 0, forked.output
    assert said(forked.stdout)[2]["text"] == ["2 + 3 = 23"]
    assert steps(cassette, forked.run_id)[sums].origin is Origin.MOCKED
