"""Diffs of runs recorded and forked through the real proxy (see conftest for the shop agent)."""

from __future__ import annotations

from decimal import Decimal

from forkpoint.compare.cost import run_totals
from forkpoint.compare.diff import diff_runs, diff_stored, fork_point, tool_call_pairs
from forkpoint.models import Exchange, Kind, Origin, Run, Summary, ToolCall, Usage
from tests.builders import llm, tool
from tests.compare.conftest import FORK_STEP


def calls(side) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(c.name, c.arguments) for c in side.tool_calls]


def test_a_replay_is_identical_and_cost_nothing(shop, store):
    parent = shop.record("parent")
    replay = shop.replay(parent, "replay")
    diff = diff_stored(store, "parent", "replay")
    assert diff.identical and diff.first_difference is None
    assert all(step.matches for step in diff.steps) and len(diff.steps) == 5
    assert diff.relation == "a_is_parent" and diff.fork_step is None
    assert diff.tool_calls_match and diff.answers_match and diff.answer_diff == ""
    assert diff.b.run.id == replay.id and diff.b.totals.cost_usd == 0
    assert diff.b.totals.replayed_steps == 5 and diff.b.totals.tokens == 0
    assert diff.delta.cost_usd == -(diff.a.totals.cost_usd or 0)


def test_two_recordings_of_the_same_behaviour_are_identical(shop, store):
    shop.record("first")
    shop.record("second")
    diff = diff_stored(store, "first", "second")
    assert diff.identical and diff.relation == "unrelated" and diff.from_fork_delta is None
    assert diff.delta.tokens == 0 and diff.delta.cost_usd == 0 and diff.delta.steps == 0


def test_a_fork_that_changed_one_tool_call(shop, store):
    parent = shop.record("parent")
    shop.fork(parent, "child", model="gpt-4o-mini")
    diff = diff_stored(store, "parent", "child")

    assert diff.relation == "a_is_parent" and diff.fork_step == FORK_STEP
    assert diff.first_difference == FORK_STEP and not diff.identical
    by_step = {s.step: s for s in diff.steps}
    assert by_step[0].matches and by_step[1].matches
    assert by_step[0].b and by_step[0].b.origin == Origin.REPLAYED
    assert by_step[2].differences == ("model", "tool_calls")
    assert by_step[2].a and by_step[2].a.label == "gpt-4o → refund_policy"
    assert by_step[2].b and by_step[2].b.label == "gpt-4o-mini → refund_policy"
    assert set(by_step[3].differences) == {"route", "request", "response"}
    assert by_step[4].differences == ("model",)

    assert calls(diff.a) == [
        ("lookup_order", '{"order_id":"A1001"}'),
        ("refund_policy", '{"region":"us"}'),
    ]
    assert calls(diff.b)[1] == ("refund_policy", '{"region":"eu"}')
    assert not diff.tool_calls_match
    assert [same for _, _, same in tool_call_pairs(diff)] == [True, False]

    assert diff.a.answer and diff.a.answer.startswith("[gpt-4o] ")
    assert diff.b.answer and diff.b.answer.startswith("[gpt-4o-mini] ")
    assert "-[gpt-4o] " in diff.answer_diff and "+[gpt-4o-mini] " in diff.answer_diff


def test_the_replayed_prefix_is_not_counted_twice(shop, store):
    parent = shop.record("parent")
    child = shop.fork(parent, "child", model="gpt-4o-mini")
    diff = diff_stored(store, "parent", "child")
    a, b = diff.a, diff.b
    assert b.totals.replayed_steps == FORK_STEP and b.totals.cost_usd is not None
    assert b.from_fork and b.from_fork.cost_usd == b.totals.cost_usd  # the prefix cost nothing
    assert b.from_fork.replayed_steps == 0
    parent_later = run_totals(store.exchanges(parent.id), from_step=FORK_STEP)
    assert a.from_fork and a.from_fork.cost_usd == parent_later.cost_usd
    assert a.totals.cost_usd and a.from_fork.cost_usd and a.from_fork.cost_usd < a.totals.cost_usd
    assert diff.delta.cost_usd == b.totals.cost_usd - a.totals.cost_usd
    assert diff.from_fork_delta and diff.from_fork_delta.cost_usd == (
        b.from_fork.cost_usd - a.from_fork.cost_usd
    )
    assert diff.delta.tokens == b.totals.tokens - a.totals.tokens
    assert run_totals(store.exchanges(child.id)).tokens == b.totals.tokens


def test_two_forks_of_one_run_are_siblings_and_order_matters(shop, store):
    parent = shop.record("parent")
    shop.fork(parent, "mini", model="gpt-4o-mini")
    shop.fork(parent, "same", model="gpt-4o")
    siblings = diff_stored(store, "mini", "same")
    assert siblings.relation == "siblings" and siblings.fork_step == FORK_STEP
    assert siblings.first_difference == FORK_STEP
    backwards = diff_stored(store, "mini", "parent")
    assert backwards.relation == "b_is_parent" and backwards.fork_step == FORK_STEP


def test_runs_of_different_lengths(shop, store):
    parent = shop.record("parent")
    shop.fork(parent, "short", model="o4-mini")
    diff = diff_stored(store, "parent", "short")
    assert len(diff.steps) == 5 and diff.b.totals.steps == 3
    missing = [s for s in diff.steps if s.differences == ("missing",)]
    assert [s.step for s in missing] == [3, 4] and all(s.b is None and s.a for s in missing)
    assert diff.delta.steps == -2
    assert [same for _, _, same in tool_call_pairs(diff)] == [True, False]
    assert tool_call_pairs(diff)[1][1] is None


def test_streaming_runs(shop, store):
    parent = shop.record("streamed", stream=True)
    shop.fork(parent, "streamed-mini", model="gpt-4o-mini", stream=True)
    diff = diff_stored(store, "streamed", "streamed-mini")
    assert diff.first_difference == FORK_STEP
    assert calls(diff.b)[1] == ("refund_policy", '{"region":"eu"}')
    assert diff.b.answer and diff.b.answer.startswith("[gpt-4o-mini] ")
    step = diff.steps[FORK_STEP]
    assert step.b and step.b.usage and step.b.usage.output > 0 and step.b.cost_usd
    assert diff.b.totals.cost_usd and diff.a.totals.cost_usd


def http(run_id: str, step: int, body: bytes, *, request: bytes = b"") -> Exchange:
    return tool(step, route="/orders/A1", run_id=run_id, request_body=request,
                fingerprint=f"GET /orders/A1 {request!r}", response_body=body)  # fmt: skip


def model_call(run_id: str, arguments: str) -> Exchange:
    return llm(run_id=run_id, calls=(ToolCall("lookup_order", arguments),), fingerprint="x")


def test_tool_responses_and_arguments_are_compared_as_json_values():
    a, b = Run("a"), Run("b")
    same = diff_runs(
        a, [model_call("a", '{"id": 1, "x": [1, 2]}'), http("a", 1, b'{"s": 1, "t": 2}')],
        b, [model_call("b", '{"x":[1,2],"id":1}'), http("b", 1, b'{"t": 2, "s": 1}')],
    )  # fmt: skip
    assert same.identical and same.tool_calls_match
    changed = diff_runs(a, [http("a", 0, b'{"s": 1}')], b, [http("b", 0, b'{"s": 2}')])
    assert changed.steps[0].differences == ("response",)
    asked = diff_runs(a, [http("a", 0, b"{}", request=b"1")], b, [http("b", 0, b"{}")])
    assert asked.steps[0].differences == ("request",)


def test_an_unpriced_side_makes_the_cost_delta_unknown():
    priced, unknown = model_call("a", "{}"), model_call("b", "{}")
    priced.summary = Summary(Kind.LLM, "openai_chat", model="gpt-4o", usage=Usage(100, 10))
    unknown.summary = Summary(
        Kind.LLM, "openai_chat", model="house-model-diff", usage=Usage(100, 10)
    )
    diff = diff_runs(Run("a"), [priced], Run("b"), [unknown])
    assert diff.a.totals.cost_usd == Decimal(100 * 2.5 + 10 * 10) / 1_000_000
    assert diff.b.totals.cost_usd is None and diff.b.totals.unpriced_steps == (0,)
    assert diff.delta.cost_usd is None and diff.steps[0].differences == ("model",)


def test_fork_point_of_unrelated_and_replayed_runs():
    assert fork_point(Run("a"), Run("b")) == ("unrelated", None)
    assert fork_point(Run("a"), Run("b", parent_id="a")) == ("a_is_parent", None)
    left, right = Run("l", parent_id="p", fork_step=4), Run("r", parent_id="p", fork_step=2)
    assert fork_point(left, right) == ("siblings", 2)


def test_an_mcp_tool_call_is_named_as_a_tool_with_its_arguments():
    from forkpoint.compare.diff import _action
    from forkpoint.engine.dialects import summarize_exchange
    from tests.engine.test_mcp import call, exchange, result

    step = exchange(call(1, "refund_policy", order_id="A1"), result(1, "ok"))
    step.summary = summarize_exchange(step)
    assert _action(step).label == 'tool refund_policy {"order_id":"A1"}'
