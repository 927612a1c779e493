"""What a check sees (CheckRun) and how what it returns becomes a verdict."""

from __future__ import annotations

import gzip

import orjson
import pytest

from forkpoint.compare.experiment_check import CheckResult, CheckRun, load_check
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Kind, Run, Summary, ToolCall
from tests.builders import exchange as build


def exchange(step: int, route: str, *, method: str = "GET", body: bytes = b"", gzipped: bool = False,
             summary: Summary | None = None) -> Exchange:  # fmt: skip
    headers = (("content-encoding", "gzip"),) if gzipped else ()
    return build(step=step, method=method, route=route, request_headers=(), request_body=b"",
                 response_headers=headers, response_body=gzip.compress(body) if gzipped else body,
                 summary=summary)  # fmt: skip


def llm(step: int, *, calls: tuple[ToolCall, ...] = (), text: str | None = None) -> Exchange:
    summary = Summary(Kind.LLM, "openai_chat", "gpt-4o", tool_calls=calls, text=text)
    return exchange(step, "/v1/chat/completions", method="POST", summary=summary)


RUN = CheckRun(
    Run("b", parent_id="p"),
    [
        llm(0, calls=(ToolCall("lookup_order", '{"order_id": "A1"}'),)),
        exchange(1, "/tools/orders/A1", body=orjson.dumps({"status": "delivered"}), gzipped=True),
        llm(2, calls=(ToolCall("refund_policy", "{}"),)),
        exchange(3, "/tools/refund-policy", body=b"30 days"),
        exchange(4, "/tools/refunds", method="POST", body=b"{}"),
        llm(5, text="Refunded."),
    ],
    CheckRun(Run("p"), []),
)


def test_a_check_run_gives_the_answer_tool_calls_and_decoded_responses():
    assert RUN.answer == "Refunded."
    assert [c.name for c in RUN.tool_calls] == ["lookup_order", "refund_policy"]
    assert RUN.responses("*/orders/*") == [{"status": "delivered"}]  # gunzipped, JSON decoded
    assert RUN.responses("*/refund-policy") == ["30 days"]  # not JSON: text
    assert RUN.responses("/tools/*", "POST") == [{}]
    assert RUN.parent is not None and RUN.parent.answer is None


def passes(run: CheckRun) -> bool:
    return run.answer == "Refunded."


def scores(run: CheckRun) -> int:
    return 7


def says_maybe(run: CheckRun) -> str:
    return "maybe"


NOT_CALLABLE = 3


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("passes", CheckResult(passed=True)),
        ("scores", CheckResult(score=7.0)),
        (
            "says_maybe",
            CheckResult(error=f"{__name__}:says_maybe returned 'maybe': return a bool or a number"),
        ),
    ],
)
def test_what_a_check_returns_becomes_its_verdict(name, verdict):
    check = load_check(f"{__name__}:{name}")
    assert check(RUN) == verdict
    assert CheckResult.from_json(verdict.to_json()) == verdict


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("no_colon", "expected package.module:function"),
        ("tests.compare.nowhere:check", "cannot load it: No module named"),
        (f"{__name__}:missing", "cannot load it"),
        (f"{__name__}:NOT_CALLABLE", "is not callable"),
    ],
)
def test_a_bad_check_name_is_a_config_error(ref, message):
    with pytest.raises(ConfigError, match=message):
        load_check(ref)


def test_the_support_agents_refund_check_reads_the_policy_its_agent_was_shown():
    from examples.support_agent.checks import refund_follows_policy

    def run(status: str, days: int | None, window: int, refund: float | None) -> CheckRun:
        order = {"order_id": "A1", "status": status, "days_since_delivery": days, "amount": 50.0}
        steps = [exchange(1, "/tools/orders/A1", body=orjson.dumps(order)),
                 exchange(3, "/tools/refund-policy", body=orjson.dumps({"window_days": window}))]  # fmt: skip
        if refund is not None:
            call = ToolCall(
                "issue_refund", orjson.dumps({"order_id": "A1", "amount": refund}).decode()
            )
            steps.append(llm(4, calls=(call,)))
        return CheckRun(Run("r"), steps)

    assert refund_follows_policy(run("delivered", 12, 30, 50.0))
    assert not refund_follows_policy(run("delivered", 12, 30, None))  # owed a refund, got none
    assert not refund_follows_policy(run("delivered", 12, 30, 80.0))  # more than the order
    assert not refund_follows_policy(run("delivered", 12, 7, 50.0))  # outside a 7-day policy
    assert refund_follows_policy(run("shipped", None, 30, None))
    assert refund_follows_policy(run("refunded", 3, 30, None))
    assert not refund_follows_policy(CheckRun(Run("r"), []))  # never looked the order up
