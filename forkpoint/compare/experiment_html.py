"""An experiment as one self-contained HTML page: inline CSS, no scripts, no external assets.

It says what the terminal says (`experiment_render`'s wording), then per run what changed, with
both final answers side by side; every value from the cassette is escaped. The web view shows
the same body (`experiment_body`), with the runs and their diffs linked.
"""

from __future__ import annotations

from html import escape

from forkpoint.compare.cost import PRICES
from forkpoint.compare.diff import run_label
from forkpoint.compare.experiment_render import check_text, cost_cells, headline, verdict_rows
from forkpoint.compare.experiment_results import Branch, Experiment
from forkpoint.compare.html import CSS, Links, _table, run_html

__all__ = ["experiment_body", "experiment_html"]


def experiment_html(experiment: Experiment) -> str:
    """The whole page for `experiment`."""
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f"<title>forkpoint experiment {escape(experiment.name)}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n{experiment_body(experiment)}\n</body>\n"
        "</html>\n"
    )


def experiment_body(experiment: Experiment, *, links: Links | None = None) -> str:
    """The page's content, escaped HTML; with `links`, runs and diffs link to their pages."""
    verdicts = "".join(
        f"<tr><th>{escape(topic)}</th><td>{escape(sentence)}</td></tr>"
        for topic, sentence in verdict_rows(experiment)
    )
    command = " ".join(experiment.spec.get("command") or [])
    return "\n".join(
        [
            f"<h1>forkpoint experiment {escape(experiment.name)}</h1>",
            f"<p>{escape(headline(experiment))}.</p>",
            f"<p>Command: <code>{escape(command)}</code></p>",
            f"<table>{verdicts}</table>",
            "<h2>Runs</h2>",
            _runs(experiment, links),
            "<h2>Final answers</h2>",
            _answers(experiment),
            f"<p class=tag>Prices: {escape(PRICES)}; cost and tokens from the fork step on.</p>",
        ]
    )


def _runs(experiment: Experiment, links: Links | None) -> str:
    checked = experiment.spec.get("check") is not None
    rows = []
    for b in experiment.branches:
        flagged = not b.ok or (b.check is not None and b.check.passed is False)
        branch = "-"
        if b.run is not None:
            name = escape(b.run.name or "")
            branch = f"<code>{run_html(b.run, links, b.run.id)}</code><br>{name}"
            if links is not None:
                branch += f' <a href="{escape(links.diff(b.source, b.run))}">diff</a>'
        if b.error:  # its lines as they are: a traceback's are never joined or cut
            branch += f"<pre class=bad>{escape(b.error)}</pre>"
        if b.outcome is not None:  # nothing to compare: how it ended, in place of the changes
            compared = f"<td colspan={3 if checked else 2} class=bad>{escape(b.outcome)}</td>"
        else:
            check = f"<td>{escape(check_text(b.parent_check))} → {escape(check_text(b.check))}</td>"
            compared = (
                f"<td>{_mark(b.behaviour_changed)}</td><td>{_mark(b.answer_changed)}</td>"
                + (check if checked else "")
            )
        rows.append(
            f"<tr{' class=differs' if flagged else ''}><td class=num>{b.seq + 1}</td>"
            f"<td>{run_html(b.source, links)}</td><td class=num>{_or_dash(b.at)}</td>"
            f"<td>{branch}</td>{compared}{_cost(b)}</tr>"
        )
    headers = ["#", "run", "at", "branch", "tools", "answer"]
    headers += ["check: parent → branch"] if checked else []
    return _table([*headers, "parent cost", "branch cost", "Δ cost", "Δ tokens"], rows)


def _cost(branch: Branch) -> str:
    return "".join(f"<td class=num>{escape(cell)}</td>" for cell in cost_cells(branch))


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
