"""An experiment read back from the cassette: each branch against its parent, and the tally.

Behaviour, answers and cost are recomputed from the stored runs with `diff_runs` (the same rules
as `forkpoint diff`), so a report never disagrees with a diff of one of its pairs; only what
the runs cannot tell (fork step, exit code, error, check results) comes from the experiment's
own rows. Cost and tokens compare the forked part: the parent's steps from the fork step on
against the branch's (whose replayed prefix cost nothing). The tallies count the branches that
finished; failed ones are listed apart, and nothing compares them with their parent: a branch
that crashed or diverged stopped short, so its tool calls, answer, cost and tokens would read
as changes it never made (`behaviour_changed`, `answer_changed` and `delta` are None for it).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from forkpoint.cassettes.store import Store
from forkpoint.compare.cost import RunTotals
from forkpoint.compare.diff import Delta, RunDiff, diff_stored
from forkpoint.compare.experiment_check import CheckResult
from forkpoint.models import Run

__all__ = ["Branch", "CheckTally", "Experiment", "Summary", "load_experiment", "summarize"]


@dataclass(frozen=True, slots=True)
class Branch:
    """One selected run and what forking it gave."""

    seq: int
    source: Run
    at: int | None
    run: Run | None
    exit_code: int | None
    error: str | None
    diff: RunDiff | None  # source (A) against branch (B), when there is a branch
    check: CheckResult | None
    parent_check: CheckResult | None

    @property
    def ok(self) -> bool:
        return self.run is not None and self.error is None

    @property
    def outcome(self) -> str | None:
        """Why there is nothing to compare: `not forked`, or how the branch ended (`crashed`,
        `diverged`); None for a branch that finished."""
        if self.ok:
            return None
        return str(self.run.status) if self.run is not None else "not forked"

    @property
    def behaviour_changed(self) -> bool | None:
        """Whether the model asked for other tool calls (names, arguments) than the parent's;
        None unless the branch finished."""
        return None if self.diff is None or not self.ok else not self.diff.tool_calls_match

    @property
    def answer_changed(self) -> bool | None:
        return None if self.diff is None or not self.ok else not self.diff.answers_match

    @property
    def delta(self) -> Delta | None:
        """Branch minus parent from the fork step on; None unless the branch finished."""
        return None if self.diff is None or not self.ok else self.diff.from_fork_delta

    @property
    def parent_totals(self) -> RunTotals | None:
        return None if self.diff is None else self.diff.a.from_fork

    @property
    def branch_totals(self) -> RunTotals | None:
        return None if self.diff is None else self.diff.b.from_fork


@dataclass(frozen=True, slots=True)
class CheckTally:
    """What a check said over a set of runs."""

    passed: int
    failed: int
    errors: int
    scores: tuple[float, ...]

    @property
    def median_score(self) -> float | None:
        return statistics.median(self.scores) if self.scores else None

    @property
    def mean_score(self) -> float | None:
        return statistics.fmean(self.scores) if self.scores else None


@dataclass(frozen=True, slots=True)
class Summary:
    """The tallies over the finished branches (`forked` of them; `failed` did not finish).

    Cost sums and deltas cover the pairs where both sides could be priced (`unpriced` others).
    """

    runs: int
    forked: int
    failed: int
    behaviour_changed: int
    answer_changed: int
    branch_check: CheckTally | None
    parent_check: CheckTally | None
    regressed: int  # the check passed on the parent and not on the branch
    fixed: int  # and the other way round
    parent_cost: Decimal
    branch_cost: Decimal
    cost_delta_median: Decimal | None
    unpriced: int
    parent_tokens: int
    branch_tokens: int
    token_delta_median: float | None

    @property
    def cost_delta(self) -> Decimal:
        return self.branch_cost - self.parent_cost

    @property
    def token_delta(self) -> int:
        return self.branch_tokens - self.parent_tokens


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    created_at: float
    ended_at: float | None  # None: still running, or interrupted
    spec: dict[str, Any]
    branches: tuple[Branch, ...]

    @property
    def summary(self) -> Summary:
        return summarize(self.branches, checked=self.spec.get("check") is not None)


def load_experiment(store: Store, name: str) -> Experiment:
    """The experiment `name` with each branch diffed against its parent."""
    stored, rows = store.get_experiment(name)
    branches = []
    for row in rows:
        run = store.get_run(row.branch_id) if row.branch_id else None
        branches.append(
            Branch(
                seq=row.seq,
                source=store.get_run(row.source_id),
                at=row.result.get("at"),
                run=run,
                exit_code=row.result.get("exit_code"),
                error=row.error,
                diff=diff_stored(store, row.source_id, run.id) if run else None,
                check=CheckResult.from_json(row.result.get("check")),
                parent_check=CheckResult.from_json(row.result.get("parent_check")),
            )
        )
    return Experiment(stored.name, stored.created_at, stored.ended_at, stored.spec, tuple(branches))


def summarize(branches: Sequence[Branch], *, checked: bool) -> Summary:
    """The tallies over `branches`; `checked`: the experiment had a check."""
    ok = [b for b in branches if b.ok]
    pairs = [(b.parent_totals, b.branch_totals) for b in ok if b.parent_totals and b.branch_totals]
    priced = [
        (parent.cost_usd, branch.cost_usd)
        for parent, branch in pairs
        if parent.cost_usd is not None and branch.cost_usd is not None
    ]
    tokens = [(parent.tokens, branch.tokens) for parent, branch in pairs]
    return Summary(
        runs=len(branches),
        forked=len(ok),
        failed=len(branches) - len(ok),
        behaviour_changed=sum(1 for b in ok if b.behaviour_changed),
        answer_changed=sum(1 for b in ok if b.answer_changed),
        branch_check=_tally([b.check for b in ok]) if checked else None,
        parent_check=_tally([b.parent_check for b in ok]) if checked else None,
        regressed=_count(ok, lambda p, b: p is True and b is not True),
        fixed=_count(ok, lambda p, b: p is not True and b is True),
        parent_cost=sum((p for p, _ in priced), Decimal(0)),
        branch_cost=sum((b for _, b in priced), Decimal(0)),
        cost_delta_median=statistics.median(b - p for p, b in priced) if priced else None,
        unpriced=len(ok) - len(priced),
        parent_tokens=sum(p for p, _ in tokens),
        branch_tokens=sum(b for _, b in tokens),
        token_delta_median=statistics.median(b - p for p, b in tokens) if tokens else None,
    )


def _tally(results: Sequence[CheckResult | None]) -> CheckTally:
    found = [r for r in results if r is not None]
    return CheckTally(
        passed=sum(1 for r in found if r.passed is True),
        failed=sum(1 for r in found if r.passed is False),
        errors=sum(1 for r in found if r.error is not None),
        scores=tuple(r.score for r in found if r.score is not None),
    )


def _count(branches: Sequence[Branch], test: Callable[[bool | None, bool | None], bool]) -> int:
    return sum(
        1
        for b in branches
        if b.check and b.parent_check and b.check.score is None
        and test(b.parent_check.passed, b.check.passed)
    )  # fmt: skip
