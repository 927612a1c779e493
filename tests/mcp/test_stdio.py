"""The stdio door with the official MCP Python SDK on both sides: its client (the agent) starts
`forkpoint mcp -- SERVER` as its stdio server, and the server is built with the SDK's
`MCPServer`. Recorded, replayed with the server never started, forked with a mocked tool (the
server started on demand for the live steps after it), diverged, crashed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.models import Kind, Origin
from tests.mcp.conftest import SDK_CLIENT, TOOL_SERVER, door, said, started, steps
from tests.runner import Ran, command_env
from tests.runner import forkpoint as run_forkpoint

pytestmark = pytest.mark.slow
ERAS = ["legacy", "auto"]  # revision 2025-11-25's handshake; 2026-07-28 (the server speaks both)


def agent(mode: str, *server: str) -> list[str]:
    return [*SDK_CLIENT, mode, "stdio", *door(*server)]


@pytest.mark.parametrize("mode", ERAS)
def test_record_replay_and_fork_with_a_mocked_tool(mode: str, tmp_path: Path, marker: Path):
    cassette = tmp_path / "c.db"
    env = {"FP_MCP_MARKER": str(marker)}
    recorded = run_forkpoint("record", "--", *agent(mode, *TOOL_SERVER), cassette=cassette, env=env)
    assert recorded.returncode == 0, recorded.output
    seen = said(recorded.stdout)
    assert seen[1] == {
        "tool": "refund_policy",
        "text": ["order A1: refundable within 30 days"],
        "error": False,
    }
    assert seen[2]["text"] == ["counted to 3"] and seen[3]["text"] == ["5"]
    assert started(marker) == 1
    assert "tool server starting" in recorded.stderr  # the server's stderr is the agent's
    exchanges = steps(cassette, recorded.run_id)
    tools = [
        (e.step, e.summary.tool_calls[0].name) for e in exchanges if e.summary.kind is Kind.TOOL
    ]
    assert [name for _, name in tools] == ["refund_policy", "slow_count", "add"]
    assert all(e.route == "/mcp-stdio/tool_server" and e.complete for e in exchanges)

    marker.unlink()
    replayed = run_forkpoint(
        "replay", recorded.run_id, "--", *agent(mode, *TOOL_SERVER), cassette=cassette, env=env
    )
    assert replayed.returncode == 0, replayed.output
    assert said(replayed.stdout) == seen
    assert started(marker) == 0  # answered from the cassette: the server never started

    policy = tmp_path / "policy.json"
    policy.write_text('"no refunds after 7 days"')
    at = tools[0][0]
    forked = run_forkpoint(
        "fork", recorded.run_id, "--at", at, "--mock", f"mcp:refund_policy=@{policy}",
        "--", *agent(mode, *TOOL_SERVER), cassette=cassette, env=env,
    )  # fmt: skip
    assert forked.returncode == 0, forked.output
    after = said(forked.stdout)
    assert after[1] == {
        "tool": "refund_policy",
        "text": ["no refunds after 7 days"],
        "error": False,
    }
    assert after[2:] == seen[2:]  # live again, from a server started for them
    assert started(marker) == 1
    origins = [e.origin for e in steps(cassette, forked.run_id)]
    assert origins[:at] == [Origin.REPLAYED] * at
    assert origins[at] is Origin.MOCKED and set(origins[at + 1 :]) == {Origin.LIVE}


def record(cassette: Path, marker: Path, tools: str) -> tuple[Ran, dict[str, str]]:
    """A legacy-era agent that makes the calls `tools` (sdk_client's TOOLS), recorded."""
    env = {"FP_MCP_MARKER": str(marker), "TOOLS": tools}
    recorded = run_forkpoint(
        "record", "--", *agent("legacy", *TOOL_SERVER), cassette=cassette, env=env
    )
    return recorded, env


def test_a_divergence_names_the_tool_and_the_argument(tmp_path: Path, marker: Path):
    cassette = tmp_path / "c.db"
    recorded, env = record(cassette, marker, 'refund_policy:{"order_id": "A1"}')
    assert recorded.returncode == 0, recorded.output
    other = {**env, "TOOLS": 'refund_policy:{"order_id": "B2"}'}
    replayed = run_forkpoint(
        "replay",
        recorded.run_id,
        "--",
        *agent("legacy", *TOOL_SERVER),
        cassette=cassette,
        env=other,
    )
    assert replayed.returncode != 0
    # the SDK raised forkpoint's JSON-RPC error, answered to its request's id
    assert (
        "no recorded exchange matches POST /mcp-stdio/tool_server (MCP tool call refund_policy)"
        in replayed.stderr
    )
    assert '$.params.arguments.order_id: "A1" → "B2"' in replayed.stderr
    assert "diverged" in replayed.stderr


def test_a_server_that_crashes_is_seen_as_the_client_sees_it_live_and_in_replay(
    tmp_path: Path, marker: Path
):
    cassette = tmp_path / "c.db"
    recorded, env = record(cassette, marker, "crash:{}")
    assert recorded.returncode != 0
    crashed = steps(cassette, recorded.run_id)[-1]
    assert crashed.summary.tool_calls[0].name == "crash" and not crashed.complete
    marker.unlink()
    replayed = run_forkpoint(
        "replay", recorded.run_id, "--", *agent("legacy", *TOOL_SERVER), cassette=cassette, env=env
    )
    assert replayed.returncode != 0
    assert started(marker) == 0
    # the SDK's own words for a server gone mid-call, both times
    assert _last_error(recorded.stderr) == _last_error(replayed.stderr)


def _last_error(stderr: str) -> str:
    return next(line for line in reversed(stderr.splitlines()) if "Error" in line and ":" in line)


def test_secrets_in_tool_results_are_masked_in_the_cassette(tmp_path: Path, marker: Path):
    cassette = tmp_path / "c.db"
    recorded, _ = record(cassette, marker, 'issue_token:{"user": "ana"}')
    assert recorded.returncode == 0, recorded.output
    assert "T0k3nValue" in recorded.stdout  # the agent got the token
    assert b"T0k3nValue" not in cassette.read_bytes()
    call = steps(cassette, recorded.run_id)[-1]
    assert b"[redacted]" in call.response_body


def test_without_forkpoint_the_door_is_the_server(marker: Path):
    env = {**command_env(), "FP_MCP_MARKER": str(marker), "TOOLS": 'add:{"a": 1, "b": 1}'}
    env = {k: v for k, v in env.items() if not k.startswith("FORKPOINT_")}
    done = subprocess.run(
        agent("legacy", *TOOL_SERVER), capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert said(done.stdout)[1]["text"] == ["2"]
    assert started(marker) == 1


def test_the_door_finds_its_run_in_its_parents_environment():
    from forkpoint.api.mcp import find_proxy

    script = "import os,time; print(os.getpid(), flush=True); time.sleep(30)"
    env = {**os.environ, "FORKPOINT_URL": "http://127.0.0.1:9/t/x", "FORKPOINT_RUN": "R1"}
    with subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE
    ) as parent:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        try:  # an agent started by forkpoint, whose child's environment says nothing
            assert find_proxy({}, pid=pid) == ("http://127.0.0.1:9/t/x", "R1")
        finally:
            parent.kill()
    assert find_proxy({"FORKPOINT_URL": "http://a", "FORKPOINT_RUN": ""}) == ("http://a", None)
    assert json.dumps(find_proxy({}, pid=1)) == "null"
