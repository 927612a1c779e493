"""Claude Code 2.1.197 under forkpoint: recorded against aimock, replayed offline from a fresh
HOME in another directory with the mock stopped, forked with another model; by its base URL
with non-essential traffic off, and under --intercept with its telemetry left on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agents.conftest import ANSWER, BIN, PROMPT, fixtures, forkpoint, place, show

CLAUDE = [
    str(BIN / "claude"), "-p", PROMPT, "--output-format", "json", "--allowedTools", "Read,Write",
]  # fmt: skip
SCRIPT = fixtures(
    "Read",
    {"file_path": "hello.txt"},
    {"name": "Write", "arguments": {"file_path": "answer.txt", "content": "PINEAPPLE\n"}},
)
# A dummy key (a replay needs none) and no retries: a divergence fails at once.
ENV = {"ANTHROPIC_API_KEY": "sk-ant-test", "CLAUDE_CODE_MAX_RETRIES": "0"}
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def answered(stdout: str) -> str:
    result = json.loads(stdout)
    assert not result["is_error"], result
    return str(result["result"])


@pytest.mark.parametrize("intercept", [False, True], ids=["base-url", "intercept"])
def test_claude_code_records_forks_and_replays_offline_elsewhere(
    tmp_path: Path, aimock_for, intercept: bool
):
    cassette = tmp_path / "runs.db"
    env = ENV if intercept else {**ENV, **QUIET}
    extra = ["--intercept"] if intercept else []
    aimock = aimock_for(SCRIPT)

    first = place(tmp_path, "recorded")
    recorded = forkpoint(
        "record", *extra, "--route", f"anthropic={aimock.url}", "--", *CLAUDE,
        cassette=cassette, at=first, env=env,
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert answered(recorded.stdout) == ANSWER
    assert (first.project / "answer.txt").read_text() == "PINEAPPLE\n"
    run = show(recorded.run_id, cassette, first)
    model_steps = [e for e in run["exchanges"] if e["kind"] == "llm" and e["tool_calls"] == []]
    last = model_steps[-1]["step"]  # the call that gave the final answer

    branch = place(tmp_path, "forked")
    forked = forkpoint(
        "fork", recorded.run_id, "--at", str(last), "--model", "claude-sonnet-4-5", *extra,
        "--", *CLAUDE, cassette=cassette, at=branch, env=env,
    )  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert answered(forked.stdout) == ANSWER
    child = show(forked.run_id, cassette, branch)
    assert child["status"] == "finished" and child["fork_step"] == last
    live = [e for e in child["exchanges"] if e["origin"] == "live" and e["kind"] == "llm"]
    assert live and {e["model"] for e in live} == {"claude-sonnet-4-5"}

    aimock.stop()
    again = place(tmp_path, "elsewhere")  # another directory, a fresh HOME, no model server
    replayed = forkpoint(
        "replay", recorded.run_id, *extra, "--", *CLAUDE, cassette=cassette, at=again, env=env,
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr
    assert answered(replayed.stdout) == ANSWER
    assert (again.project / "answer.txt").read_text() == "PINEAPPLE\n"
    replay = show(replayed.run_id, cassette, again)
    assert replay["status"] == "finished"
    assert {e["origin"] for e in replay["exchanges"]} <= {"replayed", "mocked"}
