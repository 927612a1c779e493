"""`forkpoint runs`, `show` and `snapshots`: what a cassette holds, as tables or JSON."""

from __future__ import annotations

import sys
import time
from typing import Any

import click
import orjson

from forkpoint import api
from forkpoint.api.options import match_config
from forkpoint.cli.options import cassette_option, json_lines, prices, reports_errors
from forkpoint.cli.terminal import echo
from forkpoint.compare.cost import (
    exchange_cost,
    run_totals,
    unpriced_reason,
    usd,
    usd_total,
)
from forkpoint.compare.records import exchange_json, run_json
from forkpoint.engine.optional import is_optional
from forkpoint.errors import CassetteError, RunNotFound
from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus

# Runs `forkpoint runs` lists unless told otherwise: a cassette may hold thousands.
PAGE = 100


@click.command()
@cassette_option
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per run, one per line (JSON lines)."
)
@click.option("--last", default=PAGE, show_default=True, help="List the newest N runs.")
@click.option("--all", "every", is_flag=True, help="List every run.")
@click.option(
    "--status", type=click.Choice([s.value for s in RunStatus]), default=None,
    help="Only runs of this status; `parked` lists what each waits on and since when.",
)  # fmt: skip
@prices
@reports_errors
def runs(cassette: str | None, as_json: bool, last: int, every: bool, status: str | None) -> None:
    """List the runs in the cassette (the newest --last of them), oldest first.

    Example: forkpoint runs --json;  forkpoint runs --status parked
    """
    if status == RunStatus.PARKED:
        return _parked(api.Options(cassette=cassette), as_json, None if every else last)
    damaged: list[CassetteError] = []
    newest = None if every else last
    options = api.Options(cassette=cassette)
    records = api.runs(options, newest=newest, damaged=damaged)
    found = [(r.run, r.exchanges) for r in records]
    found = [(r, e) for r, e in found if status is None or r.status == status]
    journaled = {r.run.id: len(r.journaled) for r in records if r.journaled}
    if newest is not None and len(found) == newest:
        echo(f"forkpoint: the newest {newest} runs (older ones: --last N, --all)", err=True)
    if journaled:
        count = sum(journaled.values())
        echo(f"forkpoint: {count} exchanges shown are in a journal, not in the cassette yet: "
             "the next forkpoint to record into it merges them", err=True)  # fmt: skip
    if any(run.status is RunStatus.CRASHED and run.ended_at is None for run, _ in found):
        echo("forkpoint: a run shown crashed has no forkpoint process recording it any more "
             "(killed): `forkpoint resume RUN -- CMD` goes on with it", err=True)  # fmt: skip
    if as_json:
        json_lines({**run_json(r, e), "held": journaled.get(r.id, 0)} for r, e in found)
        return _exit_if(damaged)
    echo(
        f"{'id':30}  {'status':9}  {'steps':>5}  {'tokens':>7}  {'cost':>10}  {'mode':6}  "
        "name / change"
    )
    for indent, (run, exchanges) in tree_order(found):
        totals = run_totals(exchanges)
        cost = usd_total(totals, short=True)
        held = journaled.get(run.id)
        echo(
            f"{indent + run.id:30}  {run.status:9}  {len(exchanges):>5}  {totals.tokens:>7}  "
            f"{cost:>10}  {run.mode:6}  {run.name or ''}{describe_branch(run)}"
            + (f"  [{held} in the journal, not merged]" if held else "")
        )
    _exit_if(damaged)


def _parked(options: api.Options, as_json: bool, limit: int | None) -> None:
    """`runs --status parked`: each parked run, its step, state, what it waits on, since when
    and its deadline, read off the store's index of parks."""
    now = time.time()
    found = api.parks(options, limit=limit)
    if as_json:
        return json_lines(
            {"id": p.run_id, "step": p.step, "state": str(p.state), "waits_on": p.waits_on,
             "parked_at": p.parked_at, "deadline": p.deadline, "answered_by": p.answered_by,
             "answered_at": p.answered_at}
            for p in found
        )  # fmt: skip
    echo(f"{'id':30}  {'step':>4}  {'state':8}  {'since':>8}  {'deadline':>8}  waits on")
    for park in found:
        deadline = "-" if park.deadline is None else _ago(park.deadline - now, ahead=True)
        echo(
            f"{park.run_id:30}  {park.step:>4}  {park.state:8}  {_ago(now - park.parked_at):>8}  "
            f"{deadline:>8}  {park.waits_on}"
        )
    if limit is not None and len(found) == limit:
        echo(f"forkpoint: the first {limit} parked runs (more: --last N, --all)", err=True)
    return None


def _ago(seconds: float, *, ahead: bool = False) -> str:
    """`4m ago`, `in 2h`: a span for people."""
    span = abs(seconds)
    text = (
        f"{span:.0f}s" if span < 120 else f"{span / 60:.0f}m" if span < 7200
        else f"{span / 3600:.0f}h" if span < 172800 else f"{span / 86400:.0f}d"
    )  # fmt: skip
    if ahead:
        return f"in {text}" if seconds >= 0 else f"{text} ago"
    return f"{text} ago"


def _exit_if(damaged: list[CassetteError]) -> None:
    """After showing what could be read: what could not, on stderr, and exit 1."""
    for error in damaged:
        echo(f"forkpoint: {error} (left out)", err=True)
    if damaged:
        sys.exit(1)


def tree_order(
    found: list[tuple[Run, list[Exchange]]],
) -> list[tuple[str, tuple[Run, list[Exchange]]]]:
    """Runs depth-first, each parent followed by its children (forks, replays), oldest first,
    with the branches to draw before each: `├─ ` for a child with a later sibling, `└─ ` for
    the last, under `│  ` where an ancestor's siblings go on, so a grandchild and a later
    sibling never look alike."""
    children: dict[str | None, list[tuple[Run, list[Exchange]]]] = {}
    ids = {run.id for run, _ in found}
    for item in found:
        parent = item[0].parent_id if item[0].parent_id in ids else None
        children.setdefault(parent, []).append(item)
    ordered: list[tuple[str, tuple[Run, list[Exchange]]]] = []

    def visit(parent: str | None, above: str) -> None:
        siblings = children.get(parent, [])
        for index, item in enumerate(siblings):
            last = index == len(siblings) - 1
            branch = "" if parent is None else ("└─ " if last else "├─ ")
            ordered.append((above + branch, item))
            below = "" if parent is None else ("   " if last else "│  ")
            visit(item[0].id, above + below)

    visit(None, "")
    return ordered


def describe_branch(run: Run) -> str:
    if run.parent_id is None:
        return ""
    at = f" @ step {run.fork_step}" if run.fork_step is not None else ""
    change = ", ".join(f"{k}={v}" for k, v in (run.change or {}).items())
    return f"  [{run.mode}{at}{': ' + change if change else ''}]"


@click.command()
@cassette_option
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="The run and its exchanges as JSON.")
@prices
@reports_errors
def show(cassette: str | None, run: str, as_json: bool) -> None:
    """Show RUN (id, id prefix or name) one line per step.

    Example: forkpoint show ticket-1
    """
    damaged: list[CassetteError] = []
    options = api.Options(cassette=cassette)
    shown = api.show(run, options, damaged=damaged)
    found, exchanges, journaled = shown.run, shown.exchanges, shown.journaled
    served = _served(found, exchanges, options)
    if as_json:
        document = {
            **run_json(found, exchanges),
            **({"served": {"served": served[0], "recorded": served[1]}} if served else {}),
            "exchanges": [_journaled_json(exchange_json(e), journaled, e.step) for e in exchanges],
        }
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2))
        return _exit_if(damaged)
    why = f"({found.error})" if found.error else ""
    echo("  ".join(part for part in (f"run {found.id}", found.status, found.name, why) if part))
    if served is not None:
        echo(f"served {served[0]} of the {served[1]} exchanges recorded in {found.parent_id}")
    echo(
        f"{'step':>4}  {'kind':5}  {'origin':8}  {'status':>6}  {'model':22}  "
        f"{'in':>6}  {'out':>6}  {'cost':>10}  {'ms':>8}  route / tool calls"
    )
    for e in exchanges:
        s = e.summary
        usage = s.usage if s else None
        calls = ", ".join(c.name for c in s.tool_calls) if s and s.tool_calls else ""
        flag = "" if e.complete else "  [incomplete]"
        if e.step in journaled:  # read from a journal: not in the cassette yet
            flag += "  [journal, step provisional]" if journaled[e.step] else "  [journal]"
        if e.note:  # served though not an exact match: say what was set aside
            flag += f"  [{e.note}]"
        if e.pieces:  # named by the store, never loaded: their size is all show reads of them
            flag += f"  [{sum(p.size for p in e.pieces)} bytes in pieces]"
        if (unpriced := unpriced_reason(e)) is not None:
            flag += f"  [unpriced: {unpriced}]"
        if e.error:  # why it got no answer, was cut, or was refused: its first line
            what = "no answer" if e.status is None else "error"
            flag += f"  [{what}: {e.error.splitlines()[0].removeprefix('forkpoint: ')}]"
        echo(
            f"{e.step:>4}  {s.kind if s else '':5}  {e.origin:8}  {e.status or '-':>6}  "
            f"{(s.model if s else None) or '-':22}  {usage.input if usage else '-':>6}  "
            f"{usage.output if usage else '-':>6}  {usd(exchange_cost(e)):>10}  "
            f"{e.duration_ms or 0:>8.1f}  {e.method} {e.route}{'  → ' + calls if calls else ''}"
            f"{flag}"
        )
    totals = run_totals(exchanges)
    replayed = f", {totals.replayed_steps} replayed at $0" if totals.replayed_steps else ""
    unpriced = ", ".join(map(str, totals.unpriced_steps))
    cost = usd_total(totals, short=True) + (f" (steps {unpriced} unpriced)" if unpriced else "")
    echo(
        f"total: {totals.tokens} tokens, {cost} ({totals.prices}), "
        f"LLM {totals.llm_ms:.0f} ms, tools {totals.tool_ms:.0f} ms, "
        f"wall {totals.wall_ms:.0f} ms{replayed}"
    )
    _exit_if(damaged)


def _journaled_json(line: dict[str, Any], journaled: dict[int, bool], step: int) -> dict[str, Any]:
    """An exchange's JSON, saying whether it was read from a journal (not merged yet) and
    whether its step is provisional."""
    if step in journaled:
        line["journaled"], line["provisional"] = True, journaled[step]
    return line


def _served(run: Run, exchanges: list[Exchange], options: api.Options) -> tuple[int, int] | None:
    """For a replay: how many of its recording's exchanges it served, of how many (side calls,
    which an agent need not make again, aside)."""
    if run.mode is not Mode.REPLAY or run.parent_id is None:
        return None
    routes = match_config(options).optional_routes
    try:
        recorded = api.show(run.parent_id, options).exchanges
    except RunNotFound:
        return None

    def counted(e: Exchange) -> bool:
        return not is_optional(e.method, e.route, routes)

    served = sum(1 for e in exchanges if e.origin is Origin.REPLAYED and counted(e))
    return served, sum(1 for e in recorded if counted(e))


@click.command()
@cassette_option
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per snapshot, one per line.")
@reports_errors
def snapshots(cassette: str | None, run: str, as_json: bool) -> None:
    """List the state snapshots of RUN: step, adapter, size, and failed pulls.

    Example: forkpoint snapshots ticket-1
    """
    shown = api.snapshots(run, api.Options(cassette=cassette))
    found, taken = shown.run, shown.snapshots
    if as_json:
        json_lines(
            {
                "step": s.step,
                "adapter": s.adapter,
                "content_type": s.content_type,
                "size": s.size,
                "ok": s.ok,
                "error": s.error,
                "taken_at": s.taken_at,
                "duration_ms": s.duration_ms,
            }
            for s in taken
        )
        return
    echo(f"run {found.id}  {found.status}  {len(taken)} snapshots")
    echo(f"{'step':>4}  {'adapter':12}  {'size':>10}  {'ms':>7}  content type / error")
    for s in taken:
        detail = s.content_type if s.ok else f"FAILED: {s.error}"
        echo(f"{s.step:>4}  {s.adapter:12}  {s.size:>10}  {s.duration_ms or 0:>7.1f}  {detail}")
