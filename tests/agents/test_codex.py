"""The Codex CLI 0.171.0 under forkpoint: recorded against aimock, replayed offline from a
fresh HOME in another directory with the mock stopped, forked with another model; with a
model provider pointed at forkpoint's base URL, and under --intercept with no provider
configured (its default transport: the Responses API over a WebSocket to api.openai.com) and
its analytics left on."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.agents.conftest import (
    ANSWER,
    BIN,
    PROMPT,
    Done,
    Place,
    fixtures,
    forkpoint,
    place,
    show,
)  # fmt: skip

CODEX = [str(BIN / "codex"), "exec", "--skip-git-repo-check", "--json", PROMPT]
SCRIPT = fixtures(
    "exec_command",
    {"cmd": "cat hello.txt"},
    {"name": "exec_command", "arguments": {"cmd": "printf 'PINEAPPLE\\n' > answer.txt"}},
)
ENV = {"OPENAI_API_KEY": "sk-test"}
# As a careful user runs it: a model from its catalog, no approvals, no sandbox (the tests'
# container has no user namespaces), no retries (a divergence fails at once).
SETTINGS = """\
model = "gpt-5.5"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[features]
unbounded_connection_retries = false
"""
# Pointed at forkpoint by its base URL; analytics and plugin discovery off.
PROVIDER = """\
model_provider = "forkpoint"

[analytics]
enabled = false

[features]
plugins = false
unbounded_connection_retries = false

[model_providers.forkpoint]
name = "forkpoint"
base_url = "http://127.0.0.1:{port}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


def configure(at: Place, port: int | None) -> None:
    """$HOME/.codex/config.toml: with a port, a provider at forkpoint's base URL there."""
    (at.home / ".codex").mkdir()
    settings = (
        SETTINGS if port is None else SETTINGS.split("[features]")[0] + PROVIDER.format(port=port)
    )
    (at.home / ".codex" / "config.toml").write_text(settings)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def final_message(stdout: str) -> str:
    """The text of the last agent message among `codex exec --json`'s events."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    messages = [
        e["item"]["text"] for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]  # fmt: skip
    assert messages, stdout
    return str(messages[-1])


@pytest.mark.parametrize("intercept", [False, True], ids=["base-url", "intercept"])
def test_codex_records_forks_and_replays_offline_elsewhere(
    tmp_path: Path, aimock_for, intercept: bool
):
    cassette = tmp_path / "runs.db"
    aimock = aimock_for(SCRIPT)

    def run(at: Place, *args: str) -> Done:
        port = None if intercept else free_port()
        configure(at, port)
        where = (
            ["--intercept", "--route", f"api.openai.com={aimock.url}"]
            if intercept
            else ["--port", str(port), "--upstream", aimock.url]
        )
        return forkpoint(*args, *where, "--", *CODEX, cassette=cassette, at=at, env=ENV)

    first = place(tmp_path, "recorded")
    recorded = run(first, "record")
    assert recorded.returncode == 0, recorded.stderr
    assert final_message(recorded.stdout) == ANSWER
    assert (first.project / "answer.txt").read_text() == "PINEAPPLE\n"
    steps = show(recorded.run_id, cassette, first)["exchanges"]
    last = max(e["step"] for e in steps if e["kind"] == "llm" and not e["tool_calls"])

    branch = place(tmp_path, "forked")
    forked = run(branch, "fork", recorded.run_id, "--at", str(last), "--model", "gpt-5.4")
    assert forked.returncode == 0, forked.stderr
    assert final_message(forked.stdout) == ANSWER
    child = show(forked.run_id, cassette, branch)
    live = [e for e in child["exchanges"] if e["origin"] == "live" and e["kind"] == "llm"]
    assert child["status"] == "finished" and {e["model"] for e in live} == {"gpt-5.4"}

    aimock.stop()
    again = place(tmp_path, "elsewhere")
    replayed = run(again, "replay", recorded.run_id)
    assert replayed.returncode == 0, replayed.stderr
    assert final_message(replayed.stdout) == ANSWER
    assert (again.project / "answer.txt").read_text() == "PINEAPPLE\n"
    assert show(replayed.run_id, cassette, again)["status"] == "finished"
