"""The diff of two runs: where they part, what each did per step, and what each cost.

Steps are aligned by number. A fork of run P at step N replays P's steps < N and goes on
numbering from N, so step k is the same point of the task on both sides until the runs part;
from there on, each side's step k is simply its k-th exchange. Two steps match when they are of
the same kind and status and, for model calls, the same model asked for the same tool calls
(name and arguments, JSON compared as values); for tool and other HTTP calls, the same method,
route and request, and the same response body (see `diff_stored` for how it is compared). A
model's wording is not compared step by step: the final answers are, shown as a unified diff.

Cost and time are compared for the whole run and from the fork point on (the child's
`fork_step`, when one run is the other's parent or both are forks of one run). A child's
replayed prefix cost nothing and is counted apart, so the saving of a fork is not counted twice.
The JSON form (`render.diff_json`) is documented in docs/diff-json.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import zip_longest

import orjson

from forkpoint.cassettes.store import Store
from forkpoint.compare.cost import RunTotals, exchange_cost, run_totals
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.models import Exchange, Kind, Run, ToolCall, Usage

__all__ = [
    "Action",
    "Delta",
    "RunDiff",
    "RunSide",
    "SequencedCall",
    "StepDiff",
    "diff_runs",
    "diff_stored",
    "fork_point",
    "run_label",
    "tool_call_pairs",
]


@dataclass(frozen=True, slots=True)
class Action:
    """What one run did at one step."""

    step: int
    kind: str
    origin: str
    method: str
    route: str
    status: int | None
    model: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    cost_usd: Decimal | None
    duration_ms: float | None

    @property
    def label(self) -> str:
        """`gpt-4o → lookup_order` for a model call, `GET /orders/A1` for an HTTP call,
        `tool lookup_order {"id":"A1"}` for a tool call an API names (MCP's `tools/call`)."""
        if self.kind == Kind.LLM:
            calls = ", ".join(call.name for call in self.tool_calls)
            return (self.model or "?") + (f" → {calls}" if calls else "")
        if self.kind == Kind.TOOL and self.tool_calls:
            return ", ".join(f"tool {call.name} {call.arguments}" for call in self.tool_calls)
        return f"{self.method} {self.route}"


@dataclass(frozen=True, slots=True)
class StepDiff:
    """One step on both sides; `differences` names what differs (empty when they match)."""

    step: int
    a: Action | None
    b: Action | None
    differences: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return not self.differences


@dataclass(frozen=True, slots=True)
class SequencedCall:
    """A tool call a model asked for, at the step whose response asked for it."""

    step: int
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class RunSide:
    """One run as a whole: its tool calls, final answer and totals."""

    run: Run
    tool_calls: tuple[SequencedCall, ...]
    answer: str | None
    totals: RunTotals
    from_fork: RunTotals | None


@dataclass(frozen=True, slots=True)
class Delta:
    """B minus A; `cost_usd` is None when either side's cost is unknown."""

    steps: int
    tokens: int
    cost_usd: Decimal | None
    llm_ms: float
    tool_ms: float
    wall_ms: float


@dataclass(frozen=True, slots=True)
class RunDiff:
    """Two runs aligned step by step. `relation` says how B stands to A."""

    a: RunSide
    b: RunSide
    relation: str  # "a_is_parent", "b_is_parent", "siblings" or "unrelated"
    fork_step: int | None
    steps: tuple[StepDiff, ...]
    first_difference: int | None
    tool_calls_match: bool
    answers_match: bool
    answer_diff: str
    delta: Delta
    from_fork_delta: Delta | None

    @property
    def identical(self) -> bool:
        return self.first_difference is None and self.answers_match


def diff_stored(store: Store, a_ref: str, b_ref: str) -> RunDiff:
    """Diff two runs of a cassette, each given by id, id prefix or name.

    Bodies are not loaded, since each model request of a long run resends its whole history:
    tool responses are compared by the hashes the cassette keeps their bytes under (the same
    bytes, the same hashes), which holds for a tool service that answers the same data the same
    way. `diff_runs` on loaded bodies compares JSON responses as values instead.
    """
    a_run, b_run = store.find_run(a_ref), store.find_run(b_ref)
    stored = {
        (run_id, step): key
        for run_id in (a_run.id, b_run.id)
        for step, key in store.response_keys(run_id).items()
    }
    return diff_runs(
        a_run,
        store.exchanges(a_run.id, bodies=False),
        b_run,
        store.exchanges(b_run.id, bodies=False),
        response_key=lambda exchange: stored.get((exchange.run_id, exchange.step)),
    )


def diff_runs(
    a_run: Run,
    a_exchanges: Sequence[Exchange],
    b_run: Run,
    b_exchanges: Sequence[Exchange],
    *,
    response_key: Callable[[Exchange], object] | None = None,
) -> RunDiff:
    """Align two runs step by step.

    Tool and other HTTP responses match when `response_key` gives the same value for both;
    by default, the bodies themselves (JSON compared as values).
    """
    relation, fork_step = fork_point(a_run, b_run)
    a_by_step = {e.step: e for e in a_exchanges}
    b_by_step = {e.step: e for e in b_exchanges}
    key = response_key or _body
    steps = tuple(
        _step_diff(step, a_by_step.get(step), b_by_step.get(step), key)
        for step in sorted(a_by_step.keys() | b_by_step.keys())
    )
    a = _side(a_run, a_exchanges, fork_step)
    b = _side(b_run, b_exchanges, fork_step)
    answers_match = a.answer == b.answer
    return RunDiff(
        a=a,
        b=b,
        relation=relation,
        fork_step=fork_step,
        steps=steps,
        first_difference=next((s.step for s in steps if not s.matches), None),
        tool_calls_match=_call_keys(a.tool_calls) == _call_keys(b.tool_calls),
        answers_match=answers_match,
        answer_diff="" if answers_match else _answer_diff(a, b),
        delta=_delta(a.totals, b.totals),
        from_fork_delta=_delta(a.from_fork, b.from_fork) if a.from_fork and b.from_fork else None,
    )


def fork_point(a: Run, b: Run) -> tuple[str, int | None]:
    """How B stands to A, and the step from which the two went their own ways, if known."""
    if b.parent_id == a.id:
        return "a_is_parent", b.fork_step
    if a.parent_id == b.id:
        return "b_is_parent", a.fork_step
    if a.parent_id is not None and a.parent_id == b.parent_id:
        known = [s for s in (a.fork_step, b.fork_step) if s is not None]
        return "siblings", min(known) if known else None
    return "unrelated", None


def tool_call_pairs(
    diff: RunDiff,
) -> list[tuple[SequencedCall | None, SequencedCall | None, bool]]:
    """A's and B's tool calls side by side, in order, each pair with whether it is the same."""
    return [
        (left, right, bool(left and right) and _call_keys([left]) == _call_keys([right]))
        for left, right in zip_longest(diff.a.tool_calls, diff.b.tool_calls)
    ]


def run_label(run: Run) -> str:
    """A run's name and short id, or its id."""
    return f"{run.name} ({run.id[:10]})" if run.name else run.id


def _action(exchange: Exchange) -> Action:
    summary = exchange.summary
    return Action(
        step=exchange.step,
        kind=summary.kind if summary else Kind.OTHER,
        origin=exchange.origin,
        method=exchange.method,
        route=exchange.route,
        status=exchange.status,
        model=summary.model if summary else None,
        tool_calls=summary.tool_calls if summary else (),
        usage=summary.usage if summary else None,
        cost_usd=exchange_cost(exchange),
        duration_ms=exchange.duration_ms,
    )


def _step_diff(
    step: int, a: Exchange | None, b: Exchange | None, response_key: Callable[[Exchange], object]
) -> StepDiff:
    if a is None or b is None:
        left = None if a is None else _action(a)
        return StepDiff(step, left, None if b is None else _action(b), ("missing",))
    left, right = _action(a), _action(b)
    checks = {
        "kind": left.kind == right.kind,
        "status": left.status == right.status,
    }
    if left.kind == Kind.LLM and right.kind == Kind.LLM:
        checks["model"] = left.model == right.model
        checks["tool_calls"] = _call_keys(left.tool_calls) == _call_keys(right.tool_calls)
    else:
        checks["route"] = (left.method, left.route) == (right.method, right.route)
        checks["request"] = a.fingerprint == b.fingerprint
        checks["response"] = response_key(a) == response_key(b)
    return StepDiff(step, left, right, tuple(name for name, same in checks.items() if not same))


def _side(run: Run, exchanges: Sequence[Exchange], fork_step: int | None) -> RunSide:
    llm = [e for e in exchanges if e.summary and e.summary.kind == Kind.LLM]
    calls = tuple(
        SequencedCall(e.step, call.name, call.arguments)
        for e in llm
        for call in (e.summary.tool_calls if e.summary else ())
    )
    last = max(llm, key=lambda e: e.step, default=None)
    return RunSide(
        run=run,
        tool_calls=calls,
        answer=last.summary.text if last and last.summary else None,
        totals=run_totals(exchanges),
        from_fork=None if fork_step is None else run_totals(exchanges, from_step=fork_step),
    )


def _delta(a: RunTotals, b: RunTotals) -> Delta:
    cost = None if a.cost_usd is None or b.cost_usd is None else b.cost_usd - a.cost_usd
    return Delta(
        steps=b.steps - a.steps,
        tokens=b.tokens - a.tokens,
        cost_usd=cost,
        llm_ms=b.llm_ms - a.llm_ms,
        tool_ms=b.tool_ms - a.tool_ms,
        wall_ms=b.wall_ms - a.wall_ms,
    )


def _answer_diff(a: RunSide, b: RunSide) -> str:
    lines = difflib.unified_diff(
        _lines(a.answer),
        _lines(b.answer),
        fromfile=f"A {run_label(a.run)}",
        tofile=f"B {run_label(b.run)}",
    )
    return "".join(lines)


def _lines(text: str | None) -> list[str]:
    return [line + "\n" for line in (text or "").splitlines()]


def _call_keys(calls: Sequence[ToolCall] | Sequence[SequencedCall]) -> list[tuple[str, object]]:
    """Name and arguments of each call, the arguments compared as JSON values."""
    return [(call.name, _json_value(call.arguments.encode())) for call in calls]


def _body(exchange: Exchange) -> object:
    """The response body as a value: JSON compared as data, anything else as bytes; a body
    in pieces as its held bytes and its pieces' hashes (it is never loaded whole)."""
    if exchange.pieces:
        return exchange.response_body, tuple(piece.digest for piece in exchange.pieces)
    encoding = header(exchange.response_headers, "content-encoding")
    try:
        raw = decode_body(exchange.response_body, encoding)
    except UndecodableBody:
        raw = exchange.response_body
    return _json_value(raw)


def _json_value(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
