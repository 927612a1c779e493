"""An experiment as JSON (stable, see docs/experiment-json.md) and as terminal tables (rich).

The wording of the verdicts (`verdict_rows`) is shared with the HTML page, so the terminal, the
page and the demo say the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from forkpoint.compare.cost import PRICES, usd, usd_total
from forkpoint.compare.diff import SequencedCall, run_label
from forkpoint.compare.experiment_check import CheckResult
from forkpoint.compare.experiment_results import Branch, CheckTally, Experiment, Summary
from forkpoint.compare.render import change_text, ms
from forkpoint.models import Run

__all__ = [
    "SCHEMA",
    "check_text",
    "cost_cells",
    "experiment_json",
    "experiment_renderable",
    "fit_labels",
    "headline",
    "print_experiment",
    "short_label",
    "verdict_rows",
]

SCHEMA = "forkpoint.experiment/1"


def experiment_json(experiment: Experiment) -> dict[str, Any]:
    """The documented JSON form of an experiment (docs/experiment-json.md)."""
    summary = experiment.summary
    return {
        "schema": SCHEMA,
        "prices": PRICES,
        "name": experiment.name,
        "created_at": experiment.created_at,
        "ended_at": experiment.ended_at,
        "complete": experiment.ended_at is not None,
        "spec": experiment.spec,
        "summary": {
            "runs": summary.runs,
            "forked": summary.forked,
            "failed": summary.failed,
            "behaviour_changed": summary.behaviour_changed,
            "answer_changed": summary.answer_changed,
            "check": None
            if summary.branch_check is None or summary.parent_check is None
            else {
                "function": experiment.spec.get("check"),
                "branches": _tally_json(summary.branch_check),
                "parents": _tally_json(summary.parent_check),
                "regressed": summary.regressed,
                "fixed": summary.fixed,
            },
            "cost_usd": {
                "parents": float(summary.parent_cost),
                "branches": float(summary.branch_cost),
                "delta": float(summary.cost_delta),
                "delta_median": _float(summary.cost_delta_median),
                "unpriced": summary.unpriced,
            },
            "tokens": {
                "parents": summary.parent_tokens,
                "branches": summary.branch_tokens,
                "delta": summary.token_delta,
                "delta_median": summary.token_delta_median,
            },
        },
        "runs": [_branch_json(b) for b in experiment.branches],
    }


def _branch_json(branch: Branch) -> dict[str, Any]:
    source, run, diff, delta = branch.source, branch.run, branch.diff, branch.delta
    from_fork = None
    if diff is not None and diff.a.from_fork and diff.b.from_fork:
        from_fork = {
            "parent": diff.a.from_fork.to_json(),
            "branch": diff.b.from_fork.to_json(),
            "delta": None
            if delta is None
            else {"tokens": delta.tokens, "cost_usd": _float(delta.cost_usd)},
        }
    return {
        "seq": branch.seq,
        "source": {
            "id": source.id,
            "name": source.name,
            "labels": source.labels,
            "status": source.status,
        },
        "at": branch.at,
        "branch": None
        if run is None
        else {"id": run.id, "name": run.name, "status": run.status, "exit_code": branch.exit_code},
        "ok": branch.ok,
        "error": branch.error,
        "behaviour_changed": branch.behaviour_changed,
        "answer_changed": branch.answer_changed,
        "tool_calls": None
        if diff is None
        else {"parent": _calls(diff.a.tool_calls), "branch": _calls(diff.b.tool_calls)},
        "answers": None if diff is None else {"parent": diff.a.answer, "branch": diff.b.answer},
        "check": None if branch.check is None else branch.check.to_json(),
        "parent_check": None if branch.parent_check is None else branch.parent_check.to_json(),
        "from_fork": from_fork,
    }


def _calls(calls: tuple[SequencedCall, ...]) -> list[dict[str, Any]]:
    return [{"step": c.step, "name": c.name, "arguments": c.arguments} for c in calls]


def _tally_json(tally: CheckTally) -> dict[str, Any]:
    return {
        "passed": tally.passed,
        "failed": tally.failed,
        "errors": tally.errors,
        "scored": len(tally.scores),
        "median_score": tally.median_score,
        "mean_score": tally.mean_score,
    }


def _float(amount: Decimal | None) -> float | None:
    return None if amount is None else float(amount)


# wording shared with the HTML page


def headline(experiment: Experiment) -> str:
    """`mini: 5 runs forked at first-llm with model=gpt-4o-mini, in 4.20 s`."""
    spec = experiment.spec
    change = change_text(spec.get("change") or {}) or "no change"
    if experiment.ended_at is None:
        took = "interrupted (or still running)"
    else:
        took = "in " + ms((experiment.ended_at - experiment.created_at) * 1000)
    return (
        f"{experiment.name}: {len(experiment.branches)} runs forked at {spec.get('at')} "
        f"with {change}, {took}"
    )


def verdict_rows(experiment: Experiment) -> Iterator[tuple[str, str]]:
    """(topic, sentence) rows: the answer a person acts on."""
    s = experiment.summary
    failed = f" ({s.failed} failed: listed below)" if s.failed else ""
    yield "forked", f"{s.forked} of {s.runs} runs{failed}"
    if not s.forked:
        return
    yield "behaviour", f"{s.behaviour_changed} of {s.forked} changed their tool calls"
    yield "answers", f"{s.answer_changed} of {s.forked} changed their final answer"
    if s.branch_check is not None and s.parent_check is not None:
        ref = experiment.spec.get("check") or "check"
        yield "check", _check_sentence(ref.rpartition(":")[2], s)
    yield "cost", _cost_sentence(s)
    median = (
        "" if s.token_delta_median is None else f", median {s.token_delta_median:+,.0f} per run"
    )
    yield (
        "tokens",
        f"{s.parent_tokens:,} → {s.branch_tokens:,} ({s.token_delta:+,}{median})",
    )


def _check_sentence(ref: str, s: Summary) -> str:
    assert s.branch_check is not None and s.parent_check is not None
    branch, parent = s.branch_check, s.parent_check
    if branch.scores:
        return (
            f"{ref}: median score {branch.median_score:.3g} "
            f"(parents {_or_dash(parent.median_score)})" + _errors(branch)
        )
    moved = f"; {s.regressed} regressed, {s.fixed} fixed" if s.regressed or s.fixed else ""
    return (
        f"{ref}: passed {branch.passed} of {s.forked} (parents {parent.passed} of {s.forked})"
        + moved
        + _errors(branch)
    )


def _errors(tally: CheckTally) -> str:
    return f", {tally.errors} raised or returned no verdict" if tally.errors else ""


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _cost_sentence(s: Summary) -> str:
    if s.unpriced == s.forked:
        return "unknown: no pair could be priced"
    share = f", {s.cost_delta / s.parent_cost:+.1%}" if s.parent_cost else ""
    median = (
        ""
        if s.cost_delta_median is None
        else f", median {usd(s.cost_delta_median, signed=True)} per run"
    )
    unpriced = f"; {s.unpriced} unpriced left out" if s.unpriced else ""
    return (
        f"{usd(s.parent_cost)} → {usd(s.branch_cost)} from the fork step on "
        f"({usd(s.cost_delta, signed=True)}{share}{median}){unpriced}"
    )


def short_label(run: Run) -> str:
    """A run's name, else its id: the table has no room for both."""
    return run.name or run.id


def fit_labels(labels: list[str], width: int) -> list[str]:
    """Labels cut to `width` characters keeping what tells them apart: a label too long loses
    the start it shares with the others first (`…`), then its end (found by a user: at 80
    columns the demo's `ticket-A1001` … `ticket-A1005` were all cut to `ticket-A1…`)."""
    if width < 2 or all(len(label) <= width for label in labels):
        return labels
    distinct = len(set(labels)) > 1
    common = os.path.commonprefix(labels) if distinct else ""  # noqa: RUF071 (by character)
    return [_fit(label, width, len(common)) for label in labels]


def _fit(label: str, width: int, shared: int) -> str:
    if len(label) <= width:
        return label
    if shared == 0:  # nothing shared to drop: the start, then `…`
        return label[: width - 1] + "…"
    start = max(1, min(len(label) - (width - 1), shared))
    if len(label) - start <= width - 1:  # all that differs, and the shared part nearest it
        return "…" + label[start:]
    return "…" + label[start : start + width - 2] + "…"


def check_text(result: CheckResult | None) -> str:
    if result is None:
        return "-"
    if result.error is not None:
        return "error"
    if result.score is not None:
        return f"{result.score:.3g}"
    return "pass" if result.passed else "FAIL"


def _changed(value: bool | None) -> str:
    return "-" if value is None else "≠" if value else "="


# terminal


def experiment_renderable(experiment: Experiment) -> RenderableType:
    """Headline, one row per run, the verdicts (`print_experiment` adds why forks failed)."""
    verdicts = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
    for topic, sentence in verdict_rows(experiment):
        verdicts.add_row(Text(topic, style="bold"), sentence)
    return Group(Text(headline(experiment), style="bold"), _RunsTable(experiment), verdicts)


def print_experiment(experiment: Experiment, console: Console | None = None) -> None:
    """The report, then why each failed fork failed: each line whole, never wrapped by us (a
    traceback's paths and names stay whole; a terminal folds what is wider than itself)."""
    console = console or Console()
    console.print(experiment_renderable(experiment))
    failed = [b for b in experiment.branches if not b.ok]
    if failed:
        console.print(Text("failed forks", style="italic"))
    for branch in failed:
        why = f"{branch.seq + 1}  {run_label(branch.source)}: {branch.error}"
        console.print(Text(why, style="red"), soft_wrap=True)
    checks = " check: parent → branch;" if experiment.spec.get("check") else ""
    notes = [
        f"tools, answer: = same as the parent, ≠ changed;{checks} prices: {PRICES}",
        f"each branch is named {experiment.name}/RUN; to compare one pair: "
        f"forkpoint diff RUN {experiment.name}/RUN",
    ]
    console.print(Text("\n".join(notes), style="dim"))


class _RunsTable:
    """One line per run, whatever the terminal's width: every column keeps its width but the
    run's, which takes what is left, its labels cut to keep what tells them apart
    (`fit_labels`). A fork that did not finish says how it ended where the comparison would
    be, and compares nothing: its tool calls, answer and deltas would be changes it never
    made."""

    def __init__(self, experiment: Experiment):
        checked = experiment.spec.get("check") is not None
        self.headers = ["#", "run", "at", "tools", "answer", *(["check"] if checked else [])]
        self.headers += ["parent $", "branch $", "Δ $", "Δ tokens"]
        self.labels = [short_label(b.source) for b in experiment.branches]
        self.rows: list[list[str | Text]] = []
        for b in experiment.branches:
            row: list[str | Text] = [str(b.seq + 1), "", "-" if b.at is None else str(b.at)]
            if b.outcome is not None:
                row += [Text(b.outcome, style="red"), "", *([""] if checked else [])]
            else:
                row += [_changed(b.behaviour_changed), _changed(b.answer_changed)]
                if checked:
                    row.append(f"{check_text(b.parent_check)} → {check_text(b.check)}")
            row.extend(cost_cells(b))
            self.rows.append(row)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = [
            max([len(name), *(len(str(row[i])) for row in self.rows)])
            for i, name in enumerate(self.headers)
        ]
        others = sum(w for name, w in zip(self.headers, widths, strict=True) if name != "run")
        run_width = max(8, options.max_width - others - (len(self.headers) - 1))
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0)
        for name, width in zip(self.headers, widths, strict=True):
            if name == "run":
                table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=run_width)
            else:
                justify: Literal["left", "right"] = (
                    "left" if name in ("tools", "answer", "check") else "right"
                )
                table.add_column(name, justify=justify, no_wrap=True, min_width=width)
        for row, label in zip(self.rows, fit_labels(self.labels, run_width), strict=True):
            table.add_row(row[0], label, *row[2:])
        yield table


def cost_cells(branch: Branch) -> list[str]:
    """Parent and branch cost from the fork step on, and the deltas for a branch that finished
    (what a failed one spent is shown, not set against its parent's)."""
    parent, mine, delta = branch.parent_totals, branch.branch_totals, branch.delta
    if parent is None or mine is None:
        return ["-", "-", "", ""]
    costs = [usd_total(parent, short=True), usd_total(mine, short=True)]
    if delta is None:
        return [*costs, "", ""]
    return [*costs, usd(delta.cost_usd, signed=True), f"{delta.tokens:+,}"]
