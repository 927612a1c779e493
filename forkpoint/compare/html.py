"""A run diff as one self-contained HTML page: inline CSS, no scripts, no external assets.

Every value from the cassette is escaped; the page can be mailed or attached to a ticket and
opened anywhere. The web view (`forkpoint ui`) shows the same body (`diff_body`) in its own
page, with the runs linked.
"""

from __future__ import annotations

from html import escape
from typing import Protocol

from forkpoint.compare.cost import PRICES, usd
from forkpoint.compare.diff import Action, RunDiff, StepDiff, run_label, tool_call_pairs
from forkpoint.compare.render import change_text, ms, relation_text, signed, totals_rows
from forkpoint.models import Run

__all__ = ["CSS", "Links", "diff_body", "diff_html"]


class Links(Protocol):
    """Where the web view shows a run and a diff of two, for a body shown inside it."""

    def run(self, run: Run) -> str: ...

    def diff(self, a: Run, b: Run) -> str: ...


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.05rem; margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #e4e4e4;
  vertical-align: top; }
th { background: #f6f6f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.differs td { background: #fff4f2; } .tag { color: #777; font-size: .85em; }
.ok { color: #19692c; } .bad { color: #b3261e; font-weight: 600; }
code, pre { font: 12.5px ui-monospace, monospace; } pre { background: #f8f8f8; padding: .6rem;
  white-space: pre-wrap; } .add { color: #19692c; } .del { color: #b3261e; }
"""


def diff_html(diff: RunDiff) -> str:
    """The whole page for `diff`."""
    a, b = run_label(diff.a.run), run_label(diff.b.run)
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f"<title>forkpoint diff {escape(a)} vs {escape(b)}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n{diff_body(diff)}\n</body>\n</html>\n"
    )


def diff_body(diff: RunDiff, *, links: Links | None = None) -> str:
    """The page's content, escaped HTML; with `links`, each run's name links to its page."""
    a, b = run_html(diff.a.run, links), run_html(diff.b.run, links)
    return "\n".join(
        [
            f"<h1>forkpoint diff: {a} → {b}</h1>",
            _summary(diff, links),
            "<h2>Steps</h2>",
            _steps(diff),
            "<h2>Tool calls</h2>",
            _tool_calls(diff),
            f"<h2>Totals <span class=tag>prices: {escape(PRICES)}</span></h2>",
            _totals(diff),
            "<h2>Final answers</h2>",
            _answers(diff),
        ]
    )


def run_html(run: Run, links: Links | None, label: str | None = None) -> str:
    """A run's label (`label`, else its name and short id), linked to its page if `links`."""
    text = escape(label or run_label(run))
    return text if links is None else f'<a href="{escape(links.run(run))}">{text}</a>'


def _summary(diff: RunDiff, links: Links | None) -> str:
    rows = []
    for letter, side in (("A", diff.a), ("B", diff.b)):
        run = side.run
        change = f", change <code>{escape(change_text(run.change))}</code>" if run.change else ""
        rows.append(
            f"<li><b>{letter}</b> {run_html(run, links)}, {escape(run.status)}, "
            f"{escape(run.mode)}, {side.totals.steps} steps{change}</li>"
        )
    if diff.identical:
        verdict = "<p class=ok>No difference: same steps, tool calls and final answer.</p>"
    elif diff.first_difference is None:
        verdict = "<p class=bad>Same steps and tool calls; the final answers differ.</p>"
    else:
        verdict = f"<p class=bad>First difference: step {diff.first_difference}.</p>"
    return f"<ul>{''.join(rows)}</ul>\n<p>{escape(relation_text(diff))}.</p>\n{verdict}"


def _steps(diff: RunDiff) -> str:
    rows = [
        f"<tr{'' if s.matches else ' class=differs'}><td class=num>{s.step}</td>"
        f"<td>{_action(s.a)}</td><td>{_action(s.b)}</td>"
        f"<td>{'=' if s.matches else escape(', '.join(s.differences))}</td>"
        f"<td class=num>{escape(_step_delta(s))}</td></tr>"
        for s in diff.steps
    ]
    return _table(["step", "A", "B", "differs in", "B - A"], rows)


def _step_delta(step: StepDiff) -> str:
    """What B's step took more than A's: time, tokens, cost (`+120 ms, -340 tok, -$0.0012`)."""
    a, b = step.a, step.b
    if a is None or b is None:
        return ""
    parts = []
    if a.duration_ms is not None and b.duration_ms is not None:
        parts.append(ms(b.duration_ms - a.duration_ms, sign=True))
    if a.usage is not None or b.usage is not None:
        tokens = (b.usage.total if b.usage else 0) - (a.usage.total if a.usage else 0)
        parts.append(f"{signed(tokens)} tok")
    if a.cost_usd is not None and b.cost_usd is not None:
        parts.append(usd(b.cost_usd - a.cost_usd, signed=True))
    return ", ".join(parts)


def _action(action: Action | None) -> str:
    if action is None:
        return "<span class=tag>—</span>"
    if action.kind != "llm":
        html = escape(action.label)
    else:
        calls = "".join(
            f"<br>→ {escape(c.name)} <code>{escape(c.arguments)}</code>" for c in action.tool_calls
        )
        html = escape(action.model or "?") + calls
        if action.usage is not None:
            tokens = f"{action.usage.input:,} in, {action.usage.output:,} out"
            html += f"<br><span class=tag>{tokens}, {escape(usd(action.cost_usd))}</span>"
    if action.status is not None and action.status >= 400:
        html += f" <span class=bad>{action.status}</span>"
    if action.origin != "live":
        html += f" <span class=tag>{escape(action.origin)}</span>"
    return html


def _tool_calls(diff: RunDiff) -> str:
    rows = []
    for index, (left, right, same) in enumerate(tool_call_pairs(diff), start=1):
        cells = [
            f"{escape(c.name)} <code>{escape(c.arguments)}</code>" if c else "—"
            for c in (left, right)
        ]
        rows.append(
            f"<tr{'' if same else ' class=differs'}><td class=num>{index}</td>"
            f"<td>{cells[0]}</td><td>{cells[1]}</td><td>{'=' if same else '≠'}</td></tr>"
        )
    return _table(["#", "A", "B", ""], rows) if rows else "<p>None on either side.</p>"


def _totals(diff: RunDiff) -> str:
    rows = [
        f"<tr><td>{escape(metric)}</td>"
        + "".join(f"<td class=num>{escape(value)}</td>" for value in values)
        + "</tr>"
        for metric, *values in totals_rows(diff)
    ]
    return _table(["", "A", "B", "B - A"], rows)


def _answers(diff: RunDiff) -> str:
    parts = [
        f"<p><b>{letter}</b></p><pre>{escape(side.answer or '(none)')}</pre>"
        for letter, side in (("A", diff.a), ("B", diff.b))
    ]
    if diff.answer_diff:
        lines = []
        for line in diff.answer_diff.splitlines():
            css = "add" if line.startswith("+") else "del" if line.startswith("-") else "tag"
            lines.append(f"<span class={css}>{escape(line)}</span>")
        parts.append("<p><b>diff</b></p><pre>" + "\n".join(lines) + "</pre>")
    return "\n".join(parts)


def _table(headers: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return (
        f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n"
        + "\n".join(rows)
        + "\n</tbody>\n</table>"
    )
