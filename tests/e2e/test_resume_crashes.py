"""Crash-resume as a user meets it: an agent that asks at once, crashes again and again, dies
in the middle of a streamed answer. Every answer the run holds is served on the next resume:
the upstream is asked each question once, however many crashes it took."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import RunStatus
from forkpoint.testing.upstream import ScriptedUpstream
from tests.runner import Ran
from tests.runner import forkpoint as run_forkpoint

ROOT = Path(__file__).resolve().parents[2]
QUICK = [sys.executable, str(ROOT / "tests/e2e/agents/quick_agent.py")]
TURNS = 6


def forkpoint(cassette: Path, *args: str, crash: int | None = None) -> Ran:
    env = {"OPENAI_API_KEY": "k", "TURNS": str(TURNS)}
    if crash is not None:
        env["CRASH_MID_STREAM"] = str(crash)
    return run_forkpoint(*args, "--", *QUICK, cassette=cassette, env=env)


def asked(upstream) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.json["messages"][0]["content"] for r in upstream.requests]


def answers(result: Ran) -> list[str]:
    return result.stdout.splitlines()


@pytest.fixture
def slow_stream(start_upstream):  # type: ignore[no-untyped-def]
    """Streams that take a while, so a crash lands in the middle of one."""
    return start_upstream(ScriptedUpstream(chunk_delay=0.02))


def test_a_resumed_agent_that_asks_at_once_is_served_its_run_not_a_new_one(slow_stream, cassette):
    """Found by attacking main: the resumed session was registered only once its run had
    loaded, so an agent asking at once got step 0 live again, in a stray new run."""
    crashed = forkpoint(cassette, "record", "--name", "quick", "--upstream", slow_stream.url,
                        crash=3)  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL
    before = len(asked(slow_stream))
    resumed = forkpoint(cassette, "resume", "quick", "--upstream", slow_stream.url)
    assert resumed.returncode == 0, resumed.stderr
    assert answers(resumed) == [f"[gpt-4o] question {i}" for i in range(TURNS)]
    again = asked(slow_stream)[before:]
    assert "question 0" not in again and again[-2:] == ["question 4", "question 5"]
    with contextlib.closing(SqliteStore(cassette)) as store:
        runs = store.list_runs()
    assert [(r.name, r.status) for r in runs] == [("quick", RunStatus.FINISHED)]


def test_every_answer_the_run_holds_is_served_however_many_crashes_it_took(slow_stream, cassette):
    """Found by attacking main: killed at step 0, resumed, killed at step 5, resumed again:
    the second resume served nothing past the first cut, and the upstream was asked steps 1-4
    twice. Answers cut by a crash are not kept here (`--on-hangup cancel`): the cut steps are
    asked again, once each, and nothing else is."""
    cancel = ("--on-hangup", "cancel", "--upstream", slow_stream.url)
    first = forkpoint(cassette, "record", "--name", "twice", *cancel, crash=0)
    assert first.returncode == 128 + signal.SIGKILL
    second = forkpoint(cassette, "resume", "twice", *cancel, crash=5)
    assert second.returncode == 128 + signal.SIGKILL
    third = forkpoint(cassette, "resume", "twice", *cancel)
    assert third.returncode == 0, third.stderr
    assert answers(third) == [f"[gpt-4o] question {i}" for i in range(TURNS)]
    questions = [f"question {i}" for i in range(TURNS)]
    assert asked(slow_stream) == ["question 0", *questions, "question 5"]
    with contextlib.closing(SqliteStore(cassette)) as store:
        run = store.find_run("twice")
        steps = store.exchanges(run.id)
    assert run.status is RunStatus.FINISHED
    assert [e.complete for e in steps] == [False, True, True, True, True, True, False, True]


def test_an_answer_cut_by_the_agents_crash_is_read_to_its_end_and_served_on_resume(
    slow_stream, cassette
):
    """Found by attacking main: a kill in the middle of a stream cost that call twice, and the
    run's cost became unknown. By default (`--on-hangup finish`) the proxy reads the answer
    its agent left to its end and keeps it whole, so the resume serves it at no cost."""
    crashed = forkpoint(cassette, "record", "--name", "mid", "--upstream", slow_stream.url,
                        crash=3)  # fmt: skip
    assert crashed.returncode == 128 + signal.SIGKILL
    with contextlib.closing(SqliteStore(cassette)) as store:
        steps = store.exchanges(store.find_run("mid").id)
    assert [e.complete for e in steps] == [True] * 4
    assert "hung up" in (steps[3].note or "") and steps[3].response_body.endswith(b"[DONE]\n\n")
    resumed = forkpoint(cassette, "resume", "mid", "--upstream", slow_stream.url)
    assert resumed.returncode == 0, resumed.stderr
    assert answers(resumed) == [f"[gpt-4o] question {i}" for i in range(TURNS)]
    assert asked(slow_stream) == [f"question {i}" for i in range(TURNS)]  # each once
    shown = run_forkpoint("show", "mid", "--json", cassette=cassette)
    totals = json.loads(shown.stdout)["totals"]
    assert totals["cost_usd"] is not None and totals["unpriced_steps"] == []


def test_killed_again_and_again_mid_stream_the_upstream_is_asked_each_question_once(
    slow_stream, cassette
):
    """Issue 25.2 with the default: killed at step 0, resumed, killed at step 5, resumed."""
    first = forkpoint(cassette, "record", "--name", "again", "--upstream", slow_stream.url,
                      crash=0)  # fmt: skip
    assert first.returncode == 128 + signal.SIGKILL
    second = forkpoint(cassette, "resume", "again", "--upstream", slow_stream.url, crash=5)
    assert second.returncode == 128 + signal.SIGKILL
    third = forkpoint(cassette, "resume", "again", "--upstream", slow_stream.url)
    assert third.returncode == 0, third.stderr
    assert answers(third) == [f"[gpt-4o] question {i}" for i in range(TURNS)]
    assert asked(slow_stream) == [f"question {i}" for i in range(TURNS)]
    with contextlib.closing(SqliteStore(cassette)) as store:
        run = store.find_run("again")
        steps = store.exchanges(run.id)
    assert run.status is RunStatus.FINISHED
    assert [(e.step, e.complete) for e in steps] == [(i, True) for i in range(TURNS)]
