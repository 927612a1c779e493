"""A replay that serves fewer exchanges than were recorded says so and fails (issue 27.2: it
ended `finished`, exit 0, with no word, hiding a client that bypassed the proxy or an agent
that stopped early); a fork's change that touched no request says so (27.4)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Run
from tests.runner import Ran
from tests.runner import forkpoint as run_forkpoint

# Asks each question of argv; with --trace first, also exports a trace on the side (an
# optional route: a replay need not see it again).
AGENT = """
import os, sys, urllib.error, urllib.request, openai
client = openai.OpenAI(max_retries=0)
questions = sys.argv[1:]
if questions[:1] == ["--trace"]:
    questions = questions[1:]
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/traces", data=b"{}")
    try:
        urllib.request.urlopen(request)
    except urllib.error.HTTPError:
        pass
for question in questions:
    answer = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": question}])
    print(answer.choices[0].message.content)
"""


def forkpoint(*args: str, cassette: Path) -> Ran:
    return run_forkpoint(*args, cassette=cassette, env={"OPENAI_API_KEY": "sk-test"})


@pytest.fixture
def recorded(upstream, cassette: Path, tmp_path: Path) -> list[str]:  # type: ignore[no-untyped-def]
    """Run `rec`: a trace export, then three questions; returns the agent's command."""
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    command = [sys.executable, str(agent)]
    done = forkpoint("record", "--name", "rec", "--upstream", upstream.url, "--", *command,
                     "--trace", "a", "b", "c", cassette=cassette)  # fmt: skip
    assert done.returncode == 0 and "finished, 4 steps" in done.stderr, done.stderr
    upstream.stop()
    return command


def _run(cassette: Path, run_id: str) -> Run:
    store = SqliteStore(cassette, read_only=True)
    try:
        return store.get_run(run_id)
    finally:
        store.close()


def test_a_replay_says_how_much_it_served_and_fails_when_the_agent_asked_for_less(
    recorded: list[str], cassette: Path
) -> None:
    whole = forkpoint("replay", "rec", "--", *recorded, "a", "b", "c", cassette=cassette)
    assert whole.returncode == 0, whole.stderr
    assert "3 steps, 3 of 3 recorded served" in whole.stderr  # the trace is optional: not owed

    short = forkpoint("replay", "rec", "--", *recorded, "a", cassette=cassette)
    assert short.returncode == 4, short.stderr
    assert short.stdout == "[gpt-4o] a\n"
    assert "1 steps, 1 of 3 recorded served" in short.stderr
    assert "the agent never asked for steps 2, 3" in short.stderr
    assert "--allow-unserved" in short.stderr
    run = _run(cassette, short.run_id)
    assert run.status == "finished" and run.error is not None and "steps 2, 3" in run.error
    shown = forkpoint("show", short.run_id, cassette=cassette)
    assert "served 1 of the 3 exchanges recorded in" in shown.stdout
    as_json = json.loads(forkpoint("show", short.run_id, "--json", cassette=cassette).stdout)
    assert as_json["served"] == {"served": 1, "recorded": 3}

    nothing = forkpoint("replay", "rec", "--", "true", cassette=cassette)  # a client that bypassed
    assert nothing.returncode == 4 and "0 of 3 recorded served" in nothing.stderr

    allowed = forkpoint("replay", "rec", "--allow-unserved", "--", *recorded, "a",
                        cassette=cassette)  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    assert "1 of 3 recorded served" in allowed.stderr
    assert _run(cassette, allowed.run_id).error is None


def test_a_command_that_fails_keeps_its_own_exit_code(recorded: list[str], cassette: Path) -> None:
    failed = forkpoint("replay", "rec", "--", sys.executable, "-c", "raise SystemExit(7)",
                       cassette=cassette)  # fmt: skip
    assert failed.returncode == 7 and "0 of 3 recorded served" in failed.stderr


def test_a_fork_whose_agent_skipped_part_of_its_prefix_fails_the_same_way(
    recorded: list[str], cassette: Path
) -> None:
    """Before its fork step the agent asked "b" only: "a", recorded before it, was never asked
    for, so the branch did not start where its parent was."""
    forked = forkpoint("fork", "rec", "--at", "3", "--", *recorded, "b", cassette=cassette)
    assert forked.returncode == 4, forked.stderr
    assert "1 of 2 recorded served" in forked.stderr and "never asked for step 1 " in forked.stderr


def test_a_fork_whose_change_touched_no_request_says_so(
    recorded: list[str], cassette: Path
) -> None:
    """Forked at its end, nothing goes live: --model and --system-prompt changed nothing."""
    forked = forkpoint("fork", "rec", "--at", "4", "--model", "gpt-4o-mini", "--system-prompt",
                       "Be brief.", "--", *recorded, "a", "b", "c", cassette=cassette)  # fmt: skip
    assert forked.returncode == 0, forked.stderr
    assert "forkpoint: --model changed no request" in forked.stderr
    assert "forkpoint: --system-prompt changed no request" in forked.stderr
    change = _run(cassette, forked.run_id).change
    assert change is not None and change["unapplied"] == ["model", "system_prompt"]
    assert "unapplied" in forkpoint("runs", cassette=cassette).stdout
