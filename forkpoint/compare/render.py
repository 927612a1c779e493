"""A run diff as JSON (stable, see docs/diff-json.md) and as compact terminal tables (rich).

The terminal form folds runs of matching steps into one row and stops after MAX_ROWS rows, so a
500-step diff reads as the steps where the runs part; `--all-steps`, the JSON and the HTML page
list every step.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from forkpoint.compare.cost import PRICES, RunTotals, usage_json, usd, usd_total
from forkpoint.compare.diff import (
    Action,
    Delta,
    RunDiff,
    RunSide,
    SequencedCall,
    run_label,
    tool_call_pairs,
)

__all__ = [
    "SCHEMA",
    "change_text",
    "diff_json",
    "diff_renderable",
    "ms",
    "print_diff",
    "relation_text",
    "signed",
    "totals_rows",
]

SCHEMA = "forkpoint.diff/1"
MAX_ROWS = 40  # rows of a terminal table before the rest is left to --all-steps
_Row = tuple[str, Text, Text, Text]


def diff_json(diff: RunDiff) -> dict[str, Any]:
    """The documented JSON form of a diff (docs/diff-json.md); keys are never renamed."""
    return {
        "schema": SCHEMA,
        "prices": PRICES,
        "relation": diff.relation,
        "fork_step": diff.fork_step,
        "identical": diff.identical,
        "first_difference": diff.first_difference,
        "tool_calls_match": diff.tool_calls_match,
        "answers_match": diff.answers_match,
        "answer_diff": diff.answer_diff,
        "a": _side_json(diff.a),
        "b": _side_json(diff.b),
        "delta": {
            "whole": _delta_json(diff.delta),
            "from_fork": None
            if diff.from_fork_delta is None
            else _delta_json(diff.from_fork_delta),
        },
        "steps": [
            {
                "step": s.step,
                "matches": s.matches,
                "differences": list(s.differences),
                "a": _action_json(s.a),
                "b": _action_json(s.b),
            }
            for s in diff.steps
        ],
    }


def _side_json(side: RunSide) -> dict[str, Any]:
    run = side.run
    return {
        "id": run.id,
        "name": run.name,
        "status": run.status,
        "mode": run.mode,
        "parent_id": run.parent_id,
        "fork_step": run.fork_step,
        "change": run.change,
        "answer": side.answer,
        "tool_calls": [
            {"step": c.step, "name": c.name, "arguments": c.arguments} for c in side.tool_calls
        ],
        "totals": side.totals.to_json(),
        "from_fork": None if side.from_fork is None else side.from_fork.to_json(),
    }


def _action_json(action: Action | None) -> dict[str, Any] | None:
    if action is None:
        return None
    return {
        "kind": action.kind,
        "origin": action.origin,
        "method": action.method,
        "route": action.route,
        "status": action.status,
        "model": action.model,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in action.tool_calls],
        "usage": usage_json(action.usage),
        "cost_usd": _float(action.cost_usd),
        "duration_ms": action.duration_ms,
    }


def _delta_json(delta: Delta) -> dict[str, Any]:
    return {
        "steps": delta.steps,
        "tokens": delta.tokens,
        "cost_usd": _float(delta.cost_usd),
        "llm_ms": round(delta.llm_ms, 3),
        "tool_ms": round(delta.tool_ms, 3),
        "wall_ms": round(delta.wall_ms, 3),
    }


def _float(amount: Decimal | None) -> float | None:
    return None if amount is None else float(amount)


# formatting shared with the HTML page


def ms(value: float, *, sign: bool = False) -> str:
    """`850 ms`, `1.25 s`; with `sign`, `+120 ms`."""
    magnitude = abs(value)
    text = f"{magnitude / 1000:.2f} s" if magnitude >= 999.5 else f"{magnitude:.0f} ms"
    if not sign:
        return text
    return ("±" if text == "0 ms" else "+" if value > 0 else "-") + text


def signed(value: int) -> str:
    return f"{value:+d}" if value else "±0"


def change_text(change: dict[str, object]) -> str:
    """A fork's change as `model=gpt-4o-mini, mocks=[...]`."""
    return ", ".join(f"{key}={value}" for key, value in change.items())


def relation_text(diff: RunDiff) -> str:
    at = f" at step {diff.fork_step}" if diff.fork_step is not None else ""
    return {
        "a_is_parent": f"B is a fork of A{at}",
        "b_is_parent": f"A is a fork of B{at}",
        "siblings": f"A and B are forks of one run{at}",
        "unrelated": "A and B are unrelated runs",
    }[diff.relation]


def totals_rows(diff: RunDiff) -> Iterator[tuple[str, str, str, str]]:
    """(metric, A, B, B - A) rows for the whole runs, then from the fork point on."""
    yield from _totals_rows(diff.a.totals, diff.b.totals, diff.delta)
    a, b = diff.a.totals, diff.b.totals
    yield ("replayed prefix", _replayed(a), _replayed(b), "")
    if diff.a.from_fork and diff.b.from_fork and diff.from_fork_delta:
        yield (f"from step {diff.fork_step}", "", "", "")
        for metric, left, right, delta in _totals_rows(
            diff.a.from_fork, diff.b.from_fork, diff.from_fork_delta
        ):
            yield (f"  {metric}", left, right, delta)


def _totals_rows(a: RunTotals, b: RunTotals, delta: Delta) -> Iterator[tuple[str, str, str, str]]:
    yield ("steps", str(a.steps), str(b.steps), signed(delta.steps))
    yield ("tokens", f"{a.tokens:,}", f"{b.tokens:,}", signed(delta.tokens))
    yield ("cost", _cost(a), _cost(b), usd(delta.cost_usd, signed=True))
    yield ("LLM time", ms(a.llm_ms), ms(b.llm_ms), ms(delta.llm_ms, sign=True))
    yield ("tool time", ms(a.tool_ms), ms(b.tool_ms), ms(delta.tool_ms, sign=True))
    yield ("wall time", ms(a.wall_ms), ms(b.wall_ms), ms(delta.wall_ms, sign=True))


def _cost(totals: RunTotals) -> str:
    return usd_total(totals)


def _replayed(totals: RunTotals) -> str:
    if not totals.replayed_steps:
        return "-"
    return f"{totals.replayed_steps} steps, {totals.replayed_usage.total:,} tokens, $0"


# terminal


def diff_renderable(diff: RunDiff, *, all_steps: bool = False) -> RenderableType:
    """The diff as rich renderables: header, steps, tool calls, totals, answers."""
    parts: list[RenderableType] = [_header(diff), _steps_table(diff, all_steps)]
    if diff.a.tool_calls or diff.b.tool_calls:
        parts.append(_tool_calls_table(diff, all_steps))
    parts.append(_totals_table(diff))
    parts.append(_answers(diff))
    return Group(*parts)


def _header(diff: RunDiff) -> Text:
    text = Text()
    for letter, side in (("A", diff.a), ("B", diff.b)):
        run = side.run
        text.append(f"{letter}  ", style="bold")
        text.append(f"{run_label(run)}  {run.status}  {run.mode}  {side.totals.steps} steps")
        if run.change:
            text.append(f"  change: {change_text(run.change)}", style="cyan")
        text.append("\n")
    text.append(relation_text(diff) + "\n")
    if diff.identical:
        text.append("no difference: same steps, tool calls and final answer\n", style="green")
    elif diff.first_difference is None:
        text.append("same steps and tool calls; the final answers differ\n", style="yellow")
    else:
        step = next(s for s in diff.steps if s.step == diff.first_difference)
        reason = ", ".join(step.differences)
        text.append(f"first difference: step {step.step} ({reason})\n", style="bold red")
    return text


def _steps_table(diff: RunDiff, all_steps: bool) -> Table:
    table = Table(
        title="steps", title_justify="left", expand=False, box=box.SIMPLE_HEAD, show_edge=False
    )
    for name in ("step", "A", "B", ""):
        table.add_column(name, justify="right" if name == "step" else "left")
    rows = [
        (str(s.step), _action_text(s.a), _action_text(s.b), _mark(s.matches, s.differences))
        for s in diff.steps
    ]
    _add_folded(table, rows, [s.matches for s in diff.steps], "steps", all_steps)
    return table


def _tool_calls_table(diff: RunDiff, all_steps: bool) -> Table:
    table = Table(title="tool calls", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("#", "A", "B", ""):
        table.add_column(name, justify="right" if name == "#" else "left")
    pairs = tool_call_pairs(diff)
    rows = [
        (str(index), _call_text(left), _call_text(right), _mark(same, ()))
        for index, (left, right, same) in enumerate(pairs, start=1)
    ]
    _add_folded(table, rows, [same for _, _, same in pairs], "tool calls", all_steps)
    return table


def _add_folded(
    table: Table, rows: list[_Row], matches: list[bool], what: str, all_rows: bool
) -> None:
    """Add `rows`, each run of three or more matching ones folded into one row, up to MAX_ROWS.

    With `all_rows`, every row as it is. A long diff stays readable in a terminal this way.
    """
    if all_rows:
        for row in rows:
            table.add_row(*row)
        return
    shown = 0
    index = 0
    while index < len(rows):
        end = index
        while end < len(rows) and matches[end]:
            end += 1
        if end - index >= 3:
            first, last = rows[index][0], rows[end - 1][0]
            table.add_row(
                f"{first}-{last}", Text(f"{end - index} matching {what}", style="dim"), "", ""
            )
        else:
            end = index + 1
            table.add_row(*rows[index])
        shown += 1
        index = end
        if shown >= MAX_ROWS and index < len(rows):
            more = Text(f"{len(rows) - index} more {what}: --all-steps, --json or --html")
            table.add_row("…", more, "", "")
            return


def _mark(matches: bool, differences: tuple[str, ...]) -> Text:
    if matches:
        return Text("=", style="green")
    return Text(f"≠ {', '.join(differences)}".rstrip(), style="red")


def _call_text(call: SequencedCall | None) -> Text:
    return Text(f"{call.name} {call.arguments}") if call else Text("—", style="dim")


def _action_text(action: Action | None) -> Text:
    if action is None:
        return Text("—", style="dim")
    text = Text(action.label)
    if action.status is not None and action.status >= 400:
        text.append(f" [{action.status}]", style="red")
    if action.origin != "live":
        text.append(f" ({action.origin})", style="dim")
    return text


def _totals_table(diff: RunDiff) -> Table:
    table = Table(
        title=f"totals (prices: {PRICES})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    table.add_column("")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("B - A", justify="right")
    for row in totals_rows(diff):
        table.add_row(*row)
    return table


def _answers(diff: RunDiff) -> Group:
    parts: list[RenderableType] = [Text("final answers", style="italic")]
    for letter, side in (("A", diff.a), ("B", diff.b)):
        parts.append(Text.assemble((f"{letter}: ", "bold"), side.answer or "(none)"))
    if diff.answer_diff:
        diff_text = Text()
        for line in diff.answer_diff.splitlines(keepends=True):
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            diff_text.append(line, style=style)
        parts.append(diff_text)
    return Group(*parts)


def print_diff(diff: RunDiff, console: Console | None = None, *, all_steps: bool = False) -> None:
    (console or Console()).print(diff_renderable(diff, all_steps=all_steps))
