"""Matching in tiers, with plain data: an exact fingerprint first, then a match that differs
only in what a client generates, served with a note; else a divergence. The bodies are the
requests Claude Code 2.1.197 and Codex 0.171.0 really sent in two runs of the same task
(tests/engine/data), and near misses that must still diverge."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from forkpoint.engine import matching
from forkpoint.engine.decide import Fail, Forward, Serve, decide
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.session import Session
from forkpoint.models import Exchange, Mode, Origin, Run
from tests.engine.test_decide import CONFIG, chat, post, recorded_run, replay_session

DATA = Path(__file__).parent / "data"
CLAUDE = "/anthropic/v1/messages?beta=true"
CODEX = "/v1/responses"


def captured(name: str) -> dict[str, Any]:
    with gzip.open(DATA / f"{name}.json.gz", "rt") as file:
        return json.load(file)["body"]  # type: ignore[no-any-return]


def body(value: Any) -> bytes:
    return orjson.dumps(value)


def replaying(route: str, *recorded: Any) -> Session:
    return replay_session(recorded_run(*(body(v) for v in recorded), route=route))


def served(session: Session, route: str, value: Any) -> Exchange:
    action = decide(session, post(route, body(value)), CONFIG)
    assert isinstance(action, Serve), action.record.error
    assert action.record.origin is Origin.REPLAYED
    return action.record


def diverges(session: Session, route: str, value: Any) -> str:
    action = decide(session, post(route, body(value)), CONFIG)
    assert isinstance(action, Fail), f"served: {action.record.note}"
    return action.record.error or ""


# the similar tier: what two runs of the same agent really sent


def test_claude_code_fresh_home_replays_its_first_call():
    session = replaying(CLAUDE, captured("claude-first-call-run1"))
    record = served(session, CLAUDE, captured("claude-first-call-run2"))
    assert record.note is not None
    assert "$.metadata" in record.note and "$.system[2].text" in record.note


def test_codex_fresh_home_replays_both_calls():
    session = replaying(
        CODEX, captured("codex-first-call-run1"), captured("codex-second-call-run1")
    )
    first = served(session, CODEX, captured("codex-first-call-run2"))
    second = served(session, CODEX, captured("codex-second-call-run2"))
    assert "$.client_metadata" in (first.note or "")
    assert "$.input[6].output" in (second.note or "")  # Chunk ID: 3a139d → d6f5d4


def test_an_exact_match_has_no_note_and_is_preferred():
    run1 = captured("claude-first-call-run1")
    session = replaying(CLAUDE, captured("claude-first-call-run2"), run1)
    record = served(session, CLAUDE, run1)
    assert record.note is None and session.served[0].step == 1


def another_day_directory_and_home(value: Any) -> Any:
    """The same request made the next day, in another directory, from another HOME, on a
    machine with another kernel."""
    text = json.dumps(value)
    for old, new in (
        ("2026-12-01", "2027-01-15"),
        ("/work/scratch-agents/work", "/home/someone/projects/x/work"),
        ("/tmp/cchome.AmrR", "/Users/someone"),
        ("-work-scratch-agents-work", "-home-someone-projects-x-work"),
        ("Linux 6.18.44-fc-v1045", "Linux 6.1.0-28-amd64"),
    ):
        text = text.replace(old, new)
    return json.loads(text)


def test_claude_code_replays_on_another_day_in_another_directory():
    run1 = captured("claude-first-call-run1")
    moved = another_day_directory_and_home(captured("claude-first-call-run2"))
    assert json.dumps(moved) != json.dumps(captured("claude-first-call-run2"))
    record = served(replaying(CLAUDE, run1), CLAUDE, moved)
    assert "$.messages[0].content[0].text" in (record.note or "")  # the date line


def test_codex_replays_on_another_day_in_another_directory():
    run1 = captured("codex-first-call-run1")
    moved = json.loads(
        json.dumps(captured("codex-first-call-run2"))
        .replace("2026-12-01", "2027-01-15")
        .replace("/work/scratch-agents/work-codex", "/srv/ci/build/work-codex")
        .replace("/work/scratch-agents/tmp/codexhome.1pfx", "/root/.codex")
        .replace("Etc/UTC", "Europe/Paris")
    )
    served(replaying(CODEX, run1), CODEX, moved)


# near misses: the similar tier must not serve a different request


def claude_prompt(value: dict[str, Any], text: str) -> dict[str, Any]:
    changed = copy.deepcopy(value)
    changed["messages"][0]["content"][-1]["text"] = text
    return changed


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda v: claude_prompt(v, "Read the file hello.txt and summarize it."), id="prompt"),
        pytest.param(lambda v: {**v, "model": "claude-sonnet-4-5-20250929"}, id="model"),
        pytest.param(lambda v: {**v, "max_tokens": 32000}, id="max_tokens"),
        pytest.param(lambda v: {**v, "tools": v["tools"][1:]}, id="a tool less"),
        pytest.param(
            lambda v: claude_prompt(v, "Read the file /tmp/a/hello.txt."),
            id="a path where there was none",
        ),
    ],
)
def test_claude_code_near_misses_diverge(change: Any):
    run1 = captured("claude-first-call-run1")
    diverges(replaying(CLAUDE, run1), CLAUDE, change(captured("claude-first-call-run2")))


def codex_output(value: dict[str, Any], text: str) -> dict[str, Any]:
    changed = copy.deepcopy(value)
    item = next(i for i in changed["input"] if i["type"] == "function_call_output")
    item["output"] = item["output"].replace("The secret word is PINEAPPLE.", text)
    return changed


@pytest.mark.parametrize(
    "text",
    ["The secret word is BANANA.", "The secret word is PINEAPPLE!", "The secret word is 42."],
)
def test_codex_tool_output_that_differs_diverges(text: str):
    run1 = captured("codex-second-call-run1")
    got = codex_output(captured("codex-second-call-run2"), text)
    message = diverges(replaying(CODEX, run1), CODEX, got)
    assert "PINEAPPLE" in message  # the report shows the recorded text beside the new one


@pytest.mark.parametrize(
    ("recorded", "asked"),
    [
        pytest.param("/tmp/a/work/hello.txt", "/tmp/b/work/secret.txt", id="another file name"),
        pytest.param("order 1234567890123456", "order 1234567890123457", id="a long number"),
        pytest.param("model claude-opus-4-8", "model claude-opus-4-7", id="a model name"),
        pytest.param("at 2026-12-01 ask for 3", "at 2026-12-02 ask for 4", id="a count beside a date"),
        pytest.param(
            "ids 0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c and 0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c",
            "ids 6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716 and 7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d",
            id="one id where two were",
        ),
        pytest.param("photo " + "QUJD" * 40, "photo " + "REVG" * 40, id="base64 data"),
    ],
)
def test_near_misses_in_text_diverge(recorded: str, asked: str):
    session = replaying("/v1/chat/completions", chat_value(recorded))
    diverges(session, "/v1/chat/completions", chat_value(asked))


@pytest.mark.parametrize(
    ("recorded", "asked"),
    [
        pytest.param("session 0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c", "session 6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716", id="uuid"),
        pytest.param("run 01M8REBSWM8ZTA3R94AT3HT65M", "run 01M8RE7XMAGZ38AAQZBQMCFXND", id="ulid"),
        pytest.param("device 7f190dcf5bbcd9ef74388c45e28b44c8", "device 01e548e403bc5e20d6c1430226449fc1", id="hex"),
        pytest.param("msg_01XFDUDYJgAACzvnptvVoYEL sent", "msg_01Ab3kQp9ZzLmN7rTtVw2xYq sent", id="token"),
        pytest.param("at 2026-12-01T09:18:24.773Z", "at 2027-01-15T23:01:02.001Z", id="timestamp"),
        pytest.param("proxy http://127.0.0.1:45051/v1", "proxy http://127.0.0.1:38211/v1", id="proxy port"),
        pytest.param("in `/tmp/x1/.claude/memory/`", "in `/home/u/.claude/memory/`", id="home"),
    ],
)
def test_generated_values_in_text_are_set_aside(recorded: str, asked: str):
    session = replaying("/v1/chat/completions", chat_value(recorded))
    record = served(session, "/v1/chat/completions", chat_value(asked))
    assert record.note is not None and "$.messages[0].content" in record.note


def chat_value(content: str) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}


def test_json_inside_a_string_is_masked_field_by_field():
    def user_id(session_id: str, plan: str) -> dict[str, Any]:
        inner = {"device_id": "7f190dcf5bbcd9ef74388c45e28b44c8", "session_id": session_id, "plan": plan}
        return {**chat_value("hi"), "user": json.dumps(inner)}

    session = replaying("/v1/chat/completions", user_id("0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c", "pro"))
    served(session, "/v1/chat/completions", user_id("6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716", "pro"))
    session = replaying("/v1/chat/completions", user_id("0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c", "pro"))
    diverges(session, "/v1/chat/completions", user_id("6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716", "free"))


def test_dialect_fields_are_set_aside_only_on_their_api():
    """`metadata.user_id` is Anthropic's client id; on a tool API it may name who is asked."""
    def with_user(user: str) -> dict[str, Any]:
        return {"query": "balance", "metadata": {"user_id": user}}

    session = replaying("/anthropic/v1/messages", with_user("alice"))
    served(session, "/anthropic/v1/messages", with_user("bob"))
    session = replaying("/crm/v1/accounts", with_user("alice"))
    diverges(session, "/crm/v1/accounts", with_user("bob"))


def test_ids_in_routes_are_set_aside_but_the_path_is_kept():
    route = "/v1/threads/thread_9Qx2LmZp4TnRt7YvWbK3Hs1D/runs"
    session = replaying(route, chat_value("hi"))
    record = served(session, "/v1/threads/thread_4Kd8NqXa2VmPz6RcTyL9Fu3J/runs", chat_value("hi"))
    assert "the route" in (record.note or "")
    session = replaying(route, chat_value("hi"))
    diverges(session, "/v1/threads/thread_4Kd8NqXa2VmPz6RcTyL9Fu3J/steps", chat_value("hi"))


def test_similar_matches_are_served_in_recorded_order():
    def ask(session_id: str, n: int) -> dict[str, Any]:
        return {**chat_value(f"question {n}"), "user": f"session {session_id}"}

    recorded = "0b9c7a7e-8e0a-4f39-9a3b-1d2f3e4a5b6c"
    session = replaying("/v1/chat/completions", ask(recorded, 1), ask(recorded, 1), ask(recorded, 2))
    fresh = "6f1d2c3b-4a59-4e8f-8d7c-6b5a49382716"
    assert [served(session, "/v1/chat/completions", ask(fresh, n)) for n in (2, 1, 1)]
    assert [session.served[s].step for s in (0, 1, 2)] == [2, 0, 1]


# forks of agents that make side calls concurrently


def test_a_side_call_a_fork_makes_sooner_than_its_parent_goes_live():
    parent = recorded_run(chat("first"), chat("second"), chat("third"), chat("side call"))
    session = Session.fork(Run("child", mode=Mode.FORK, parent_id="rec"), parent, CONFIG, at=3)
    assert isinstance(decide(session, post("/v1/chat/completions", chat("first")), CONFIG), Serve)
    early = decide(session, post("/v1/chat/completions", chat("side call")), CONFIG)
    assert isinstance(early, Forward) and early.record.origin is Origin.LIVE
    assert not session.live  # the prefix is still served
    assert isinstance(decide(session, post("/v1/chat/completions", chat("second")), CONFIG), Serve)


def test_side_calls_made_sooner_do_not_move_the_fork_step_earlier():
    """Found by CI with Codex under --intercept: two plugin fetches the parent made after its
    fork step came sooner in the fork, so the fork's own step count reached the fork step one
    model call early; that call went live (re-spent) and the fork ended with it unserved."""
    parent = recorded_run(
        chat("first"), chat("second"), chat("third"), chat("side one"), chat("side two")
    )
    session = Session.fork(Run("child", mode=Mode.FORK, parent_id="rec"), parent, CONFIG, at=3)
    for asked in ("first", "side one", "second", "side two", "third"):
        action = decide(session, post("/v1/chat/completions", chat(asked)), CONFIG)
        assert isinstance(action, Forward if asked.startswith("side") else Serve), asked
    assert not session.live
    after = decide(session, post("/v1/chat/completions", chat("fourth")), CONFIG)
    assert isinstance(after, Forward) and session.live
    assert session.replayed().unserved == ()


def test_a_request_the_parent_never_made_before_the_fork_step_still_diverges():
    parent = recorded_run(chat("first"), chat("second"), chat("third"))
    session = Session.fork(Run("child", mode=Mode.FORK, parent_id="rec"), parent, CONFIG, at=2)
    action = decide(session, post("/v1/chat/completions", chat("never asked")), CONFIG)
    assert isinstance(action, Fail)


def test_a_side_call_that_failed_after_the_parents_fork_step_goes_live_in_the_fork():
    """The fork's prefix ends at the parent's first unanswered step (an unreachable host):
    the same call made sooner by the fork belongs to the branch, not a divergence."""
    parent = recorded_run(chat("first"), chat("second"), chat("side call"), chat("third"))
    parent[2].status, parent[2].complete = None, False  # no answer from its host
    session = Session.fork(Run("child", mode=Mode.FORK, parent_id="rec"), parent, CONFIG, at=3)
    assert isinstance(decide(session, post("/v1/chat/completions", chat("first")), CONFIG), Serve)
    early = decide(session, post("/v1/chat/completions", chat("side call")), CONFIG)
    assert isinstance(early, Forward)


def test_json_too_deep_to_write_back_is_compared_as_its_text():
    """Found by the gateway fuzz test: a replay miss on JSON nested 255 levels or more raised
    in the similar tier (orjson reads 1,024 levels but writes 254), a 500 and a traceback."""
    headers = (("content-type", "application/json"),)

    def similar(depth: int) -> str:
        body = b"[" * depth + b"]" * depth
        value = matching.comparable("POST", "/v1/chat/completions", body, headers, MatchConfig())
        assert value == {matching.TEXT: body.decode()}
        return matching.similar_fingerprint("POST", "/v1/chat/completions", value)

    assert similar(300) == similar(300) != similar(301)
