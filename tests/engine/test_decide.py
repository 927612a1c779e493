"""The engine with plain data: no sockets, no store."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Fail, Forward, Request, Serve, decide
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.session import Session
from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus

CONFIG = EngineConfig(
    routes=Routes("https://api.openai.com", {"anthropic": "https://api.anthropic.com"})
)


def chat(content: str, **extra: object) -> bytes:
    return orjson.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], **extra}
    )


def post(route: str, body: bytes, *headers: tuple[str, str]) -> Request:
    return Request("POST", route, (("content-type", "application/json"), *headers), body)


def recorded_run(*bodies: bytes, route: str = "/v1/chat/completions") -> list[Exchange]:
    """A recorded run whose step i answered bodies[i] with `answer i`."""
    session = Session(Run("rec"))
    exchanges = []
    for body in bodies:
        action = decide(session, post(route, body), CONFIG)
        assert isinstance(action, Forward)
        record = action.record
        record.status, record.response_body = 200, f"answer {record.step}".encode()
        exchanges.append(record)
    return exchanges


def replay_session(source: list[Exchange], config: EngineConfig = CONFIG) -> Session:
    return Session.replay(Run("rep", mode=Mode.REPLAY, parent_id="rec"), source, config)


def test_record_forwards_to_the_upstream_of_the_route_and_numbers_steps():
    session = Session(Run("r1"))
    first = decide(session, post("/v1/chat/completions", chat("hi")), CONFIG)
    second = decide(session, post("/anthropic/v1/messages", b"{}"), CONFIG)
    assert isinstance(first, Forward) and isinstance(second, Forward)
    assert first.url == "https://api.openai.com/v1/chat/completions"
    assert second.url == "https://api.anthropic.com/v1/messages"
    assert [first.record.step, second.record.step] == [0, 1]
    assert first.record.run_id == "r1"


def test_a_step_the_store_allocated_is_the_records_step():
    session = Session(Run("r1"))
    shared = decide(session, post("/v1/chat/completions", chat("hi")), CONFIG, step=7)
    assert isinstance(shared, Forward) and shared.record.step == 7
    assert session.next_step == 8  # the session knows steps were taken


def test_upstream_with_a_path_keeps_it():
    routes = Routes("http://127.0.0.1:9000/openai/")
    assert routes.resolve("/v1/models?x=1") == "http://127.0.0.1:9000/openai/v1/models?x=1"


def test_forward_drops_hop_by_hop_and_gateway_headers_but_keeps_credentials():
    request = post(
        "/v1/chat/completions",
        chat("hi"),
        ("Authorization", "Bearer sk-live"),
        ("Connection", "keep-alive, x-trace"),
        ("x-trace", "1"),
        ("Host", "127.0.0.1:8765"),
        ("X-Forkpoint-Run", "r1"),
        ("Content-Length", "10"),
        ("x-stainless-retry-count", "0"),
    )
    action = decide(Session(Run("r1")), request, CONFIG)
    assert isinstance(action, Forward)
    names = [k.lower() for k, _ in action.headers]
    assert "authorization" in names and "x-stainless-retry-count" in names
    for gone in ("connection", "x-trace", "host", "x-forkpoint-run", "content-length"):
        assert gone not in names


def test_credentials_are_redacted_in_what_is_recorded():
    request = Request(
        "GET",
        "/v1/models?key=sk-query&limit=2",
        (("Authorization", "Bearer sk-live"), ("x-api-key", "sk-ant"), ("Cookie", "session=abc")),
        b"",
    )
    action = decide(Session(Run("r1")), request, CONFIG)
    assert isinstance(action, Forward)
    assert "sk-query" in action.url  # the upstream still gets the real key
    stored = str(action.record.request_headers) + action.record.route + str(action.record.upstream)
    for secret in ("sk-live", "sk-ant", "abc", "sk-query"):
        assert secret not in stored


def test_no_upstream_for_a_route_is_a_clear_error():
    action = decide(Session(Run("r1")), post("/v1/chat/completions", chat("hi")), EngineConfig())
    assert isinstance(action, Fail)
    assert action.status == 502
    assert b"--upstream" in action.body


def test_replay_serves_the_recorded_exchange_whatever_the_key_order():
    source = recorded_run(chat("hi"), chat("bye"))
    session = replay_session(source)
    reordered = orjson.dumps({"messages": [{"content": "bye", "role": "user"}], "model": "gpt-4o"})
    action = decide(session, post("/v1/chat/completions", reordered), CONFIG)
    assert isinstance(action, Serve)
    assert action.recorded.response_body == b"answer 1"
    assert action.record.origin is Origin.REPLAYED
    assert action.record.step == 0  # numbered in the replay run's own order


def test_identical_requests_replay_in_recorded_order():
    session = replay_session(recorded_run(chat("same"), chat("same"), chat("same")))
    served = [decide(session, post("/v1/chat/completions", chat("same")), CONFIG) for _ in range(3)]
    assert [a.recorded.response_body for a in served if isinstance(a, Serve)] == [
        b"answer 0",
        b"answer 1",
        b"answer 2",
    ]


def test_parallel_requests_arriving_out_of_order_get_their_own_answers():
    session = replay_session(recorded_run(chat("a"), chat("b"), chat("c")))
    for content, expected in (("c", b"answer 2"), ("a", b"answer 0"), ("b", b"answer 1")):
        action = decide(session, post("/v1/chat/completions", chat(content)), CONFIG)
        assert isinstance(action, Serve) and action.recorded.response_body == expected


def test_a_miss_is_a_divergence_naming_the_nearest_exchange_with_a_diff():
    session = replay_session(recorded_run(chat("hello"), chat("refund order A1001")))
    decide(session, post("/v1/chat/completions", chat("hello")), CONFIG)
    action = decide(session, post("/v1/chat/completions", chat("refund order A1002")), CONFIG)
    assert isinstance(action, Fail) and action.divergence is not None
    assert action.status == 400
    assert action.divergence.nearest_step == 1
    message = orjson.loads(action.body)["error"]["message"]
    assert "run rep replaying rec, step 1" in message
    assert '$.messages[0].content: "refund order A1001" → "refund order A1002"' in message
    assert ("x-should-retry", "false") in action.headers
    assert session.run.status is RunStatus.DIVERGED
    assert action.record.origin is Origin.DIVERGED


def test_divergence_on_an_anthropic_route_uses_anthropics_error_shape():
    session = replay_session([])
    action = decide(session, post("/anthropic/v1/messages", b'{"model": "claude"}'), CONFIG)
    assert isinstance(action, Fail)
    body = orjson.loads(action.body)
    assert body["type"] == "error" and "forkpoint divergence" in body["error"]["message"]


def test_an_exhausted_recording_diverges_rather_than_repeating():
    session = replay_session(recorded_run(chat("once")))
    assert isinstance(decide(session, post("/v1/chat/completions", chat("once")), CONFIG), Serve)
    again = decide(session, post("/v1/chat/completions", chat("once")), CONFIG)
    assert isinstance(again, Fail)
    message = orjson.loads(again.body)["error"]["message"]
    assert "were all served already: step 0 (to step 0)" in message


def test_volatile_fields_and_normalizers_are_ignored_by_matching():
    def drop_user(method: str, route: str, body: object) -> object:
        return {k: v for k, v in body.items() if k != "user"} if isinstance(body, dict) else body

    config = EngineConfig(
        routes=CONFIG.routes,
        match=MatchConfig(
            volatile_fields=("metadata.request_id", "messages.*.id"), normalizers=(drop_user,)
        ),
    )
    recorded = orjson.dumps(
        {
            "messages": [{"id": 1, "role": "user", "content": "x"}],
            "metadata": {"request_id": "a", "team": "t"},
            "user": "u1",
        }
    )
    replayed = orjson.dumps(
        {
            "messages": [{"id": 2, "role": "user", "content": "x"}],
            "metadata": {"request_id": "b", "team": "t"},
            "user": "u2",
        }
    )
    source = recorded_run(recorded)
    assert isinstance(
        decide(replay_session(source, config), post("/v1/chat/completions", replayed), config),
        Serve,
    )
    # …but only those: a different team is a different request.
    other_team = replayed.replace(b'"team":"t"', b'"team":"u"')
    assert isinstance(
        decide(replay_session(source, config), post("/v1/chat/completions", other_team), config),
        Fail,
    )


def test_query_order_does_not_matter_but_the_route_does():
    source = recorded_run(b"", route="/tools/search?q=x&page=2")
    session = replay_session(source)
    assert isinstance(decide(session, post("/tools/search?page=2&q=x", b""), CONFIG), Serve)
    assert isinstance(
        decide(replay_session(source), post("/tools/find?page=2&q=x", b""), CONFIG), Fail
    )


def test_non_json_bodies_match_byte_for_byte():
    source = recorded_run(b"\x00\x01binary", route="/tools/upload")
    assert isinstance(
        decide(replay_session(source), post("/tools/upload", b"\x00\x01binary"), CONFIG), Serve
    )
    assert isinstance(
        decide(replay_session(source), post("/tools/upload", b"\x00\x02binary"), CONFIG), Fail
    )


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_compressed_request_bodies_match_their_plain_twin(encoding: str):
    import gzip
    import sys

    zstd = __import__(
        "compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd",
        fromlist=["compress"],
    )
    body = chat("hello")
    packed = gzip.compress(body) if encoding == "gzip" else zstd.compress(body)
    session = replay_session(recorded_run(body))
    request = post("/v1/chat/completions", packed, ("Content-Encoding", encoding))
    assert isinstance(decide(session, request, CONFIG), Serve)


def test_a_per_run_prompt_cache_key_does_not_break_replay():
    """The Agents SDK sends a random prompt_cache_key per run to api.openai.com."""
    source = recorded_run(chat("hi", prompt_cache_key="agents-sdk:run:1111"))
    again = chat("hi", prompt_cache_key="agents-sdk:run:2222")
    assert isinstance(
        decide(replay_session(source), post("/v1/chat/completions", again), CONFIG), Serve
    )
