"""Park rules, the Await decision, a deadline's answer and the answered exchange, with plain data."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Await, Forward, Request, Serve, decide
from forkpoint.engine.launches import kept_env, resume_line, wake_env
from forkpoint.engine.parking import (
    Parking,
    answered,
    check_status,
    parse_duration,
    timeout_answer,
)
from forkpoint.engine.redaction import Redaction
from forkpoint.engine.session import Session
from forkpoint.errors import ConfigError
from forkpoint.models import Launch, Origin, Run, Waker

ROUTES = Routes("https://api.openai.com", {"anthropic": "https://api.anthropic.com"})
PARKING = Parking.of(["POST /approvals*", "tools.example.com/v1/ask*"], timeout="10m")
CONFIG = EngineConfig(routes=ROUTES, parking=PARKING)


def post(route: str, body: bytes = b'{"amount": 250}') -> Request:
    return Request("POST", route, (("content-type", "application/json"),), body)


def test_a_request_matching_a_park_rule_is_awaited_never_forwarded():
    session = Session(Run("r"))
    first = decide(session, post("/v1/chat/completions", b'{"model": "gpt-4o"}'), CONFIG)
    parked = decide(session, post("/approvals/refund"), CONFIG)
    assert isinstance(first, Forward)
    assert isinstance(parked, Await)
    assert parked.record.step == 1 and parked.record.status is None
    assert parked.waits_on == "rule 'POST /approvals*'"
    assert parked.record.fingerprint  # a wake serves its answer by it
    assert parked.record.upstream == "https://api.openai.com/approvals/refund"


def test_a_rule_takes_its_method_only_and_matches_the_upstream_host_too():
    session = Session(Run("r"))
    assert isinstance(decide(session, Request("GET", "/approvals/x", (), b""), CONFIG), Forward)
    routes = Routes("https://tools.example.com")
    config = dataclasses.replace(CONFIG, routes=routes)
    assert isinstance(decide(session, post("/v1/ask/human"), config), Await)
    assert isinstance(decide(session, post("/v1/search"), config), Forward)


def test_no_rule_no_park_and_a_replayed_step_is_served_not_parked():
    session = Session(Run("r"))
    assert isinstance(decide(session, post("/approvals/refund"), EngineConfig(routes=ROUTES)),
                      Forward)  # fmt: skip
    # a run woken after its answer: the answered step is in its recording, served
    parked = decide(Session(Run("src")), post("/approvals/refund"), CONFIG)
    assert isinstance(parked, Await)
    answer = answered(parked.record, 200, (), b'{"ok": true}', Redaction(), now=1.0)
    resumed = Session.resume(Run("src"), [answer], CONFIG)
    served = decide(resumed, post("/approvals/refund"), CONFIG)
    assert isinstance(served, Serve) and served.recorded.response_body == b'{"ok": true}'


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("500ms", 0.5), ("5m", 300.0), ("2h", 7200.0), ("1d", 86400.0), ("1.5", 1.5)],
)
def test_durations(text: str, seconds: float):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "-3s", "0", "5 weeks"])
def test_a_bad_duration_is_a_clear_error(text: str):
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration(text)


def test_parking_round_trips_as_a_launch_keeps_it():
    assert Parking.from_json(PARKING.to_json()) == PARKING
    assert PARKING.deadline(100.0) == 700.0 and Parking().deadline(100.0) is None
    with pytest.raises(ConfigError, match="--park"):
        Parking.of(["  "])


@pytest.mark.parametrize(
    ("route", "shape"),
    [
        ("/v1/chat/completions", lambda b: b["error"]["type"] == "timeout"),
        ("/anthropic/v1/messages", lambda b: b["type"] == "error" and b["error"]["type"]),
        ("/approvals/refund", lambda b: b["error"]["type"] == "timeout"),
    ],
)
def test_a_deadline_answers_as_the_upstreams_own_timeout(route, shape):
    status, headers, body = timeout_answer("POST", route, 600.0)
    assert status == 504
    assert shape(orjson.loads(body))
    assert "600 s" in body.decode()
    assert dict(headers)["content-type"].startswith("application/json")


def test_the_answer_is_masked_framed_and_marked_answered():
    parked = decide(Session(Run("r")), post("/approvals/refund"), CONFIG)
    assert isinstance(parked, Await)
    secret = b'{"approved": true, "api_key": "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"}'
    answer = answered(
        parked.record, 201, (("Content-Length", "999"), ("X-Api-Key", "hunter2hunter2")),
        secret, Redaction(), now=parked.record.started_at + 2,
    )  # fmt: skip
    assert answer.origin is Origin.ANSWERED and answer.status == 201 and answer.complete
    assert b"sk-proj" not in answer.response_body and b'"approved": true' in answer.response_body
    headers = dict(answer.response_headers)
    assert headers["content-length"] == str(len(answer.response_body))
    assert "hunter2" not in headers["X-Api-Key"]
    assert answer.ttfb_ms == pytest.approx(2000.0)


@pytest.mark.parametrize("text", ["abc", "99", "600", "", "2OO"])
def test_a_malformed_status_is_refused(text: str):
    with pytest.raises(ConfigError, match="not an HTTP status"):
        check_status(text)


def test_a_launch_keeps_no_secret_and_names_the_ones_it_needs():
    env = {
        "PATH": "/usr/bin", "HOME": "/home/a", "OPENAI_API_KEY": "sk-x", "GITHUB_TOKEN": "t",
        "DATABASE_URL": "postgresql://app:s3cretpw@db/app", "FORKPOINT_RUN": "old",
        "OPENAI_BASE_URL": "http://127.0.0.1:8765/v1",
    }  # fmt: skip
    kept, needs = kept_env(env, drop_clients=["OPENAI_BASE_URL"])
    assert dict(kept) == {"PATH": "/usr/bin", "HOME": "/home/a"}
    assert needs == ("DATABASE_URL", "GITHUB_TOKEN", "OPENAI_API_KEY")


def test_a_wake_takes_the_secrets_from_its_own_environment_or_names_the_missing():
    launch = Launch("r", ("python", "a.py"), "/w", env=(("PATH", "/bin"),), needs=("KEY",))
    assert wake_env(launch, {"KEY": "v", "OTHER": "x"}, store="s.db") == {
        "PATH": "/bin",
        "KEY": "v",
        "FORKPOINT_STORE": "s.db",
    }
    with pytest.raises(ConfigError, match="needs KEY"):
        wake_env(launch, {})


def test_the_resume_line_carries_the_launchs_options():
    launch = Launch(
        "R", ("python", "a.py"), "/w", waker=Waker.HOOK, on_wake=("hook.sh",),
        options={"upstream": "http://u", "park": ["POST /approvals*"], "park_timeout": 60.0,
                 "routes": {"x": "http://x"}},
    )  # fmt: skip
    assert resume_line(launch) == [
        "forkpoint", "resume", "R", "--upstream", "http://u", "--route", "x=http://x",
        "--park", "POST /approvals*", "--park-timeout", "60.0", "--on-wake", "hook.sh",
        "--", "python", "a.py",
    ]  # fmt: skip
