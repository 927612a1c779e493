"""Fork arithmetic, divergence policy, changes and mocks in the engine, with plain data."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.api.mocks import parse_mock
from forkpoint.engine.changes import Change, apply, load_patch
from forkpoint.engine.config import OnDivergence
from forkpoint.engine.decide import Fail, Forward, Mock, Request, Serve, decide
from forkpoint.engine.matching import MatchConfig, fingerprint_exchange
from forkpoint.engine.mocks import MockKind
from forkpoint.engine.session import Session
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Mode, Origin, Run
from tests.builders import exchange
from tests.engine.test_decide import CONFIG, chat, post, recorded_run


def fork_session(
    source: list[Exchange],
    at: int,
    change: Change = Change(),
    policy: OnDivergence = OnDivergence.FAIL,
) -> Session:
    run = Run("child", mode=Mode.FORK, parent_id="rec", fork_step=at)
    return Session.fork(run, source, CONFIG, at=at, change=change, on_divergence=policy)


def ask(session: Session, content: str, route: str = "/v1/chat/completions"):  # type: ignore[no-untyped-def]
    return decide(session, post(route, chat(content)), CONFIG)


def test_steps_before_the_fork_are_served_then_everything_goes_live():
    session = fork_session(recorded_run(chat("a"), chat("b"), chat("c")), at=2)
    served = [ask(session, "a"), ask(session, "b")]
    assert [a.recorded.response_body for a in served if isinstance(a, Serve)] == [
        b"answer 0",
        b"answer 1",
    ]
    live = ask(session, "c")  # recorded, but at the fork step: live
    assert isinstance(live, Forward) and live.record.step == 2
    assert isinstance(ask(session, "anything new"), Forward)


def test_fork_at_zero_is_all_live_and_at_the_end_is_a_full_replay_then_live():
    source = recorded_run(chat("a"), chat("b"))
    assert isinstance(ask(fork_session(source, at=0), "a"), Forward)
    at_end = fork_session(source, at=2)
    assert [type(ask(at_end, c)) for c in ("a", "b", "c")] == [Serve, Serve, Forward]


def test_a_divergence_before_the_fork_fails_or_forks_there_by_policy():
    source = recorded_run(chat("a"), chat("b"), chat("c"))
    failing = fork_session(source, at=3)
    ask(failing, "a")
    fail = ask(failing, "other")
    assert isinstance(fail, Fail) and fail.divergence and fail.divergence.nearest_step == 1
    going_live = fork_session(source, at=3, policy=OnDivergence.LIVE)
    ask(going_live, "a")
    assert isinstance(ask(going_live, "other"), Forward)
    assert going_live.run.fork_step == 1  # the real fork step is recorded
    assert isinstance(ask(going_live, "c"), Forward)  # once live, always live


def test_replay_with_live_policy_forks_at_the_first_new_request():
    session = Session.replay(
        Run("rep", mode=Mode.REPLAY, parent_id="rec"),
        recorded_run(chat("a"), chat("b")),
        CONFIG,
        on_divergence=OnDivergence.LIVE,
    )
    assert isinstance(ask(session, "a"), Serve)
    assert isinstance(ask(session, "changed"), Forward)
    assert session.run.fork_step == 1


def test_the_model_and_system_prompt_are_rewritten_only_from_the_fork_on():
    change = Change(model="gpt-5-nano", system_prompt="Be brief.")
    session = fork_session(recorded_run(chat("a")), at=1, change=change)
    assert isinstance(ask(session, "a"), Serve)
    live = ask(session, "b")
    assert isinstance(live, Forward)
    body = orjson.loads(live.body)
    assert body["model"] == "gpt-5-nano"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    # the child records what went upstream, and keeps what the agent sent, which a replay or
    # a fork of the child is asked again and matches
    assert live.record.request_body == live.body and live.record.asked_body == chat("b")
    assert live.record.asked == chat("b")
    assert fingerprint_exchange(live.record, MatchConfig()) == fingerprint_exchange(
        exchange(request_body=chat("b"), route=live.record.route), MatchConfig()
    )
    # …and its summary names the model sent, even when the answer names none (an error)
    from forkpoint.engine.dialects import summarize_exchange

    live.record.status, live.record.response_body = 400, b'{"error": {"message": "no"}}'
    assert live.record.model_sent == "gpt-5-nano"
    assert summarize_exchange(live.record).model == "gpt-5-nano"


@pytest.mark.parametrize(
    "dialect, body, check",
    [
        (
            "openai_chat",
            {
                "model": "m",
                "messages": [
                    {"role": "developer", "content": "old"},
                    {"role": "user", "content": "q"},
                ],
            },
            lambda b: (
                b["messages"]
                == [{"role": "developer", "content": "new"}, {"role": "user", "content": "q"}]
            ),
        ),
        (
            "openai_responses",
            {
                "model": "m",
                "instructions": "old",
                "input": [{"role": "system", "content": "x"}, {"role": "user", "content": "q"}],
            },
            lambda b: (
                b["instructions"] == "new" and b["input"] == [{"role": "user", "content": "q"}]
            ),
        ),
        (
            "anthropic_messages",
            {"model": "m", "system": [{"type": "text", "text": "old"}], "messages": []},
            lambda b: b["system"] == "new",
        ),
    ],
)
def test_the_system_prompt_lives_where_each_dialect_keeps_it(dialect, body, check):
    rewritten = orjson.loads(
        apply(Change(model="n", system_prompt="new"), dialect, orjson.dumps(body))
    )
    assert rewritten["model"] == "n" and check(rewritten)


def test_a_json_patch_applies_to_llm_requests_and_a_bad_one_is_a_clear_error():
    patch = load_patch('[{"op": "add", "path": "/temperature", "value": 0}]')
    assert orjson.loads(apply(Change(patch=patch), "openai_chat", chat("x")))["temperature"] == 0
    assert apply(Change(patch=patch), "generic", b'{"a": 1}') == b'{"a": 1}'
    with pytest.raises(ConfigError, match="not a JSON patch"):
        load_patch('{"value": 1}')
    remove_missing = load_patch('{"op": "remove", "path": "/nope"}')
    with pytest.raises(ConfigError, match="does not apply"):
        apply(Change(patch=remove_missing), "openai_chat", chat("x"))


def test_tool_mocks_static_callable_recorded_and_live(tmp_path):
    (tmp_path / "policy.json").write_text('{"status": 200, "body": {"policy": "60 days"}}')
    rules = (
        parse_mock("GET /tools/refund-policy=@policy.json", base_dir=tmp_path),
        parse_mock("POST /tools/refunds=tests.engine.test_decide_fork:refund_handler"),
        parse_mock("/tools/orders/*=recorded"),
        parse_mock("/tools/*=live"),
    )
    assert [r.kind for r in rules] == [
        MockKind.STATIC,
        MockKind.CALLABLE,
        MockKind.RECORDED,
        MockKind.LIVE,
    ]
    source = recorded_run(b"", route="/tools/orders/A1")
    session = fork_session(source, at=0, change=Change(mocks=rules))
    assert isinstance(
        decide(session, post("/tools/refund-policy", b""), CONFIG), Forward
    )  # not GET
    static = decide(session, Request("GET", "/tools/refund-policy", (), b""), CONFIG)
    assert isinstance(static, Serve) and orjson.loads(static.recorded.response_body) == {
        "policy": "60 days"
    }
    assert static.record.origin is Origin.MOCKED
    assert isinstance(decide(session, post("/tools/refunds", b"{}"), CONFIG), Mock)
    recorded = decide(session, post("/tools/orders/A1", b""), CONFIG)
    assert isinstance(recorded, Serve) and recorded.recorded.response_body == b"answer 0"
    assert isinstance(decide(session, post("/tools/orders/A1", b""), CONFIG), Fail)  # used up
    assert isinstance(decide(session, post("/tools/other", b""), CONFIG), Forward)


def test_a_method_in_the_route_narrows_the_mock():
    rule = parse_mock("POST /tools/*=live")
    assert rule.matches("POST", "/tools/x?y=1", None) and not rule.matches("GET", "/tools/x", None)
    host_rule = parse_mock("api.example.com/v1/*=live")
    assert host_rule.matches("GET", "/search", "https://api.example.com/v1/search?q=1")


@pytest.mark.parametrize(
    "text, message",
    [
        ("no-equals", "expected ROUTE=SPEC"),
        ("/x=@/no/such/file.json", "cannot read"),
        ("/x=no_such_module_xyz:handler", "cannot load"),
    ],
)
def test_bad_mock_specs_are_clear_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_mock(text)


def refund_handler(request):  # type: ignore[no-untyped-def]
    return {"refund": "R-1", "asked": request.json()}
