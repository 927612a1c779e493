"""The knobs where the built-in matching is not enough, and optional routes, with plain data:
`--ignore PATH`, `--normalize REGEX` (or a function), `--optional ROUTE`."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from forkpoint.engine import fields
from forkpoint.engine.config import EngineConfig, OnDivergence
from forkpoint.engine.decide import Fail, Forward, Request, Serve, decide
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.normalizers import Replace
from forkpoint.engine.session import Session
from forkpoint.errors import ConfigError
from forkpoint.models import Mode, Origin, Run
from tests.engine.test_decide import CONFIG, chat, post, recorded_run, replay_session


def with_match(**match: Any) -> EngineConfig:
    return EngineConfig(routes=CONFIG.routes, match=MatchConfig(**match))


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("metadata.user_id", ("metadata", "user_id")),
        ("$.metadata.user_id", ("metadata", "user_id")),
        ("$.input[*].id", ("input", "*", "id")),
        ("messages[0].content", ("messages", "0", "content")),
        ("$['odd key'].x", ("odd key", "x")),
    ],
)
def test_json_paths_in_either_spelling(path: str, steps: tuple[str, ...]):
    assert fields.parse(path) == steps


@pytest.mark.parametrize("path", ["", "$", "a..b", "$."])
def test_an_empty_json_path_is_a_config_error(path: str):
    with pytest.raises(ConfigError, match="not a JSON path"):
        fields.parse(path)


def test_a_path_goes_on_into_json_carried_in_a_string():
    value = {"metadata": {"user_id": json.dumps({"device": "d1", "session": "s1"})}}
    dropped = fields.drop(value, "metadata.user_id.session")
    assert json.loads(dropped["metadata"]["user_id"]) == {"device": "d1"}
    assert json.loads(value["metadata"]["user_id"]) == {"device": "d1", "session": "s1"}


def test_ignore_makes_a_field_match_exactly_with_no_note():
    def ask(request_id: str) -> bytes:
        return chat("hi", metadata={"request_id": request_id})

    config = with_match(volatile_fields=("$.metadata.request_id",))
    session = replay_session(recorded_run(ask("r-1")), config)
    action = decide(session, post("/v1/chat/completions", ask("r-2")), config)
    assert isinstance(action, Serve) and action.record.note is None
    plain = replay_session(recorded_run(ask("r-1")))
    assert isinstance(decide(plain, post("/v1/chat/completions", ask("r-2")), CONFIG), Fail)


def test_a_regex_normalizer_replaces_its_matches_in_every_string():
    def ask(trace: str) -> bytes:
        return chat(f"context: trace={trace}; refund order A1", tags=[f"trace={trace}"])

    config = with_match(normalizers=(Replace(r"trace=\w+"),))
    session = replay_session(recorded_run(ask("abc")), config)
    assert isinstance(decide(session, post("/v1/chat/completions", ask("xyz")), config), Serve)
    session = replay_session(recorded_run(ask("abc")), config)
    other = chat("context: trace=xyz; refund order B2", tags=["trace=xyz"])
    assert isinstance(decide(session, post("/v1/chat/completions", other), config), Fail)


def test_a_regex_normalizer_also_reads_text_bodies():
    config = with_match(normalizers=(Replace(r"nonce=\d+"),))
    recorded = recorded_run(b"q=refund&nonce=123", route="/tools/search")
    session = replay_session(recorded, config)
    assert isinstance(decide(session, post("/tools/search", b"q=refund&nonce=456"), config), Serve)


def test_a_bad_regex_is_a_config_error():
    with pytest.raises(ConfigError, match="not a regex"):
        Replace("a(b")


# optional routes

TELEMETRY = "/api.anthropic.com/api/event_logging/v2/batch"


def event(at: str) -> bytes:
    return orjson.dumps({"events": [{"event_name": "tengu_start", "client_timestamp": at}]})


def test_an_optional_route_is_served_when_it_matches_and_answered_empty_when_not():
    session = replay_session(recorded_run(event("2026-12-01T09:00:00Z"), route=TELEMETRY))
    matched = decide(session, post(TELEMETRY, event("2026-12-02T10:00:00Z")), CONFIG)
    assert isinstance(matched, Serve) and matched.record.origin is Origin.REPLAYED
    other = orjson.dumps({"events": [{"event_name": "tengu_exit", "count": 3}]})
    unmatched = decide(session, post(TELEMETRY, other), CONFIG)
    assert isinstance(unmatched, Serve) and unmatched.record.origin is Origin.MOCKED
    assert (unmatched.recorded.status, unmatched.recorded.response_body) == (200, b"{}")
    assert "optional route" in (unmatched.record.note or "")
    assert session.run.status.value == "running"  # never diverged


def test_an_optional_request_without_json_gets_an_empty_body():
    session = replay_session([])
    otlp = Request("POST", "/otel.example.com:4318/v1/metrics", (("content-type", "application/x-protobuf"),), b"\x0a\x02")
    action = decide(session, otlp, CONFIG)
    assert isinstance(action, Serve) and action.recorded.response_body == b""


def test_a_metrics_api_read_is_a_tool_call_not_telemetry():
    """OTLP is always a POST: a GET of /v1/metrics is a tool the agent calls."""
    session = replay_session([])
    action = decide(session, Request("GET", "/api.datadoghq.com/api/v1/metrics", (), b""), CONFIG)
    assert isinstance(action, Fail)


def test_optional_routes_can_be_added():
    route = "/telemetry.example.com/v2/events"
    session = replay_session([])
    assert isinstance(decide(session, post(route, b"{}"), CONFIG), Fail)
    config = with_match(optional_routes=("POST /telemetry.example.com/*",))
    session = replay_session([], config)
    assert isinstance(decide(session, post(route, b"{}"), config), Serve)


def test_an_optional_miss_never_makes_a_replay_go_live():
    session = Session.replay(
        Run("rep", mode=Mode.REPLAY, parent_id="rec"), recorded_run(chat("hi")), CONFIG,
        on_divergence=OnDivergence.LIVE,
    )  # fmt: skip
    assert isinstance(decide(session, post(TELEMETRY, event("x")), CONFIG), Serve)
    assert not session.live
    assert isinstance(decide(session, post("/v1/chat/completions", chat("hi")), CONFIG), Serve)


def test_a_resume_goes_live_though_recorded_telemetry_was_not_sent_again():
    recorded = recorded_run(chat("hi"))
    recorded += recorded_run(event("2026-12-01T09:00:00Z"), route=TELEMETRY)
    recorded[1].step = 1
    session = Session.resume(Run("rec"), recorded, CONFIG)
    assert isinstance(decide(session, post("/v1/chat/completions", chat("hi")), CONFIG), Serve)
    assert isinstance(decide(session, post("/v1/chat/completions", chat("next")), CONFIG), Forward)


def test_an_optional_exchange_is_never_named_nearest_in_a_report():
    recorded = recorded_run(chat("hi"))
    session = replay_session(recorded + _at(recorded_run(event("x"), route=TELEMETRY), 1))
    action = decide(session, post(TELEMETRY.replace("api/event_logging/v2/batch", "api/other"), event("x")), CONFIG)
    assert isinstance(action, Fail)
    assert "step 1" not in (action.record.error or "")


def _at(exchanges: list[Any], step: int) -> list[Any]:
    for offset, exchange in enumerate(exchanges):
        exchange.step = step + offset
    return exchanges
