"""An experiment as one self-contained HTML page: inline CSS, no scripts, no external assets.

It says what the terminal says (`experiment_render`'s wording), then per run what changed, with
both final answers side by side; every value from the cassette is escaped.
"""

from __future__ import annotations

from html import escape

from forkpoint.compare.cost import PRICES, usd
from forkpoint.compare.diff import run_label
from forkpoint.compare.experiment_render import check_text, headline, verdict_rows
from forkpoint.compare.experiment_results import Branch, Experiment
from forkpoint.compare.html import _CSS, _table

__all__ = ["experiment_html"]


def experiment_html(experiment: Experiment) -> str:
    """The whole page for `experiment`."""
    verdicts = "".join(
        f"<tr><th>{escape(topic)}</th><td>{escape(sentence)}</td></tr>"
        for topic, sentence in verdict_rows(experiment)
    )
    command = " ".join(experiment.spec.get("command") or [])
    body = "\n".join(
        [
            f"<h1>forkpoint experiment {escape(experiment.name)}</h1>",
            f"<p>{escape(headline(experiment))}.</p>",
            f"<p>Command: <code>{escape(command)}</code></p>",
            f"<table>{verdicts}</table>",
            "<h2>Runs</h2>",
            _runs(experiment),
            "<h2>Final answers</h2>",
            _answers(experiment),
            f"<p class=tag>Prices: {escape(PRICES)}; cost and tokens from the fork step on.</p>",
        ]
    )
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f"<title>forkpoint experiment {escape(experiment.name)}</title>\n"
        f"<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def _runs(experiment: Experiment) -> str:
    checked = experiment.spec.get("check") is not None
    rows = []
    for b in experiment.branches:
        flagged = not b.ok or (b.check is not None and b.check.passed is False)
        branch = f"<code>{escape(b.run.id)}</code><br>{escape(b.run.name or '')}" if b.run else "-"
        if b.error:
            branch += f"<br><span class=bad>{escape(b.error)}</span>"
        check = f"<td>{escape(check_text(b.parent_check))} → {escape(check_text(b.check))}</td>"
        rows.append(
            f"<tr{' class=differs' if flagged else ''}><td class=num>{b.seq + 1}</td>"
            f"<td>{escape(run_label(b.source))}</td><td class=num>{_or_dash(b.at)}</td>"
            f"<td>{branch}</td><td>{_mark(b.behaviour_changed)}</td>"
            f"<td>{_mark(b.answer_changed)}</td>{check if checked else ''}{_cost(b)}</tr>"
        )
    headers = ["#", "run", "at", "branch", "tools", "answer"]
    headers += ["check: parent → branch"] if checked else []
    return _table([*headers, "parent cost", "branch cost", "Δ cost", "Δ tokens"], rows)


def _cost(branch: Branch) -> str:
    parent, mine, diff = branch.parent_totals, branch.branch_totals, branch.diff
    if parent is None or mine is None or diff is None or diff.from_fork_delta is None:
        return "<td>-</td>" * 4
    delta = diff.from_fork_delta
    cells = (
        usd(parent.cost_usd),
        usd(mine.cost_usd),
        usd(delta.cost_usd, signed=True),
        f"{delta.tokens:+,}",
    )
    return "".join(f"<td class=num>{escape(cell)}</td>" for cell in cells)


def _answers(experiment: Experiment) -> str:
    parts = []
    for b in experiment.branches:
        if b.diff is None:
            continue
        parts.append(
            f"<h3>{b.seq + 1}. {escape(run_label(b.source))}</h3>"
            + _table(
                ["parent", "branch"],
                [
                    f"<tr><td><pre>{escape(b.diff.a.answer or '(none)')}</pre></td>"
                    f"<td><pre>{escape(b.diff.b.answer or '(none)')}</pre></td></tr>"
                ],
            )
        )
    return "\n".join(parts) or "<p>No branch finished.</p>"


def _mark(changed: bool | None) -> str:
    if changed is None:
        return "-"
    return "<b>changed</b>" if changed else "<span class=tag>same</span>"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
