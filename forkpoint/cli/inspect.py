"""`forkpoint runs`, `show` and `snapshots`: what a cassette holds, as tables or JSON."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from forkpoint import api
from forkpoint.cli.options import cassette_option, prices, reports_errors
from forkpoint.cli.terminal import echo
from forkpoint.compare.cost import exchange_cost, run_totals, usd
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Run

# Runs `forkpoint runs` lists unless told otherwise: a cassette may hold thousands.
PAGE = 100


@click.command()
@cassette_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run.")
@click.option("--last", default=PAGE, show_default=True, help="List the newest N runs.")
@click.option("--all", "every", is_flag=True, help="List every run.")
@prices
@reports_errors
def runs(cassette: str | None, as_json: bool, last: int, every: bool) -> None:
    """List the runs in the cassette (the newest --last of them), oldest first.

    Example: forkpoint runs --json
    """
    damaged: list[CassetteError] = []
    newest = None if every else last
    options = api.Options(cassette=cassette)
    found = [(r.run, r.exchanges) for r in api.runs(options, newest=newest, damaged=damaged)]
    held, journals = api.held(options)
    if newest is not None and len(found) == newest:
        echo(f"forkpoint: the newest {newest} runs (older ones: --last N, --all)", err=True)
    for run_id in held.keys() - {run.id for run, _ in found}:
        echo(f"forkpoint: run {run_id} has {held[run_id]} exchanges held in the journal "
             f"{journals}, not in the cassette yet", err=True)  # fmt: skip
    if as_json:
        documents = [{**_run_json(r, e), "held": held.get(r.id, 0)} for r, e in found]
        click.echo(orjson.dumps(documents, option=orjson.OPT_INDENT_2))
        return _exit_if(damaged)
    echo(
        f"{'id':30}  {'status':9}  {'steps':>5}  {'tokens':>7}  {'cost':>10}  {'mode':6}  "
        "name / change"
    )
    for depth, (run, exchanges) in tree_order(found):
        totals = run_totals(exchanges)
        indent = "  " * (depth - 1) + "└─ " if depth else ""
        echo(
            f"{indent + run.id:30}  {run.status:9}  {len(exchanges):>5}  {totals.tokens:>7}  "
            f"{usd(totals.cost_usd):>10}  {run.mode:6}  {run.name or ''}{describe_branch(run)}"
            + (f"  [{held[run.id]} held in journal {journals}]" if run.id in held else "")
        )
    _exit_if(damaged)


def _exit_if(damaged: list[CassetteError]) -> None:
    """After showing what could be read: what could not, on stderr, and exit 1."""
    for error in damaged:
        echo(f"forkpoint: {error} (left out)", err=True)
    if damaged:
        sys.exit(1)


def tree_order(
    found: list[tuple[Run, list[Exchange]]],
) -> list[tuple[int, tuple[Run, list[Exchange]]]]:
    """Runs depth-first: each parent followed by its children (forks, replays), oldest first."""
    children: dict[str | None, list[tuple[Run, list[Exchange]]]] = {}
    ids = {run.id for run, _ in found}
    for item in found:
        parent = item[0].parent_id if item[0].parent_id in ids else None
        children.setdefault(parent, []).append(item)
    ordered: list[tuple[int, tuple[Run, list[Exchange]]]] = []

    def visit(parent: str | None, depth: int) -> None:
        for item in children.get(parent, []):
            ordered.append((depth, item))
            visit(item[0].id, depth + 1)

    visit(None, 0)
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
    shown = api.show(run, api.Options(cassette=cassette), damaged=damaged)
    found, exchanges = shown.run, shown.exchanges
    if as_json:
        document = {
            **_run_json(found, exchanges),
            "exchanges": [_exchange_json(e) for e in exchanges],
        }
        click.echo(orjson.dumps(document, option=orjson.OPT_INDENT_2))
        return _exit_if(damaged)
    echo(f"run {found.id}  {found.status}  {found.name or ''}")
    echo(
        f"{'step':>4}  {'kind':5}  {'origin':8}  {'status':>6}  {'model':22}  "
        f"{'in':>6}  {'out':>6}  {'cost':>10}  {'ms':>8}  route / tool calls"
    )
    for e in exchanges:
        s = e.summary
        usage = s.usage if s else None
        calls = ", ".join(c.name for c in s.tool_calls) if s and s.tool_calls else ""
        flag = "" if e.complete else "  [incomplete]"
        if e.note:  # served though not an exact match: say what was set aside
            flag += f"  [{e.note}]"
        if e.pieces:  # named by the store, never loaded: their size is all show reads of them
            flag += f"  [{sum(p.size for p in e.pieces)} bytes in pieces]"
        echo(
            f"{e.step:>4}  {s.kind if s else '':5}  {e.origin:8}  {e.status or '-':>6}  "
            f"{(s.model if s else None) or '-':22}  {usage.input if usage else '-':>6}  "
            f"{usage.output if usage else '-':>6}  {usd(exchange_cost(e)):>10}  "
            f"{e.duration_ms or 0:>8.1f}  {e.method} {e.route}{'  → ' + calls if calls else ''}"
            f"{flag}"
        )
    totals = run_totals(exchanges)
    replayed = f", {totals.replayed_steps} replayed at $0" if totals.replayed_steps else ""
    echo(
        f"total: {totals.tokens} tokens, {usd(totals.cost_usd)} ({totals.prices}), "
        f"LLM {totals.llm_ms:.0f} ms, tools {totals.tool_ms:.0f} ms, "
        f"wall {totals.wall_ms:.0f} ms{replayed}"
    )
    _exit_if(damaged)


def _run_json(run: Run, exchanges: list[Exchange]) -> dict[str, Any]:
    return {
        "id": run.id,
        "name": run.name,
        "labels": run.labels,
        "status": run.status,
        "mode": run.mode,
        "parent_id": run.parent_id,
        "fork_step": run.fork_step,
        "created_at": run.created_at,
        "ended_at": run.ended_at,
        "error": run.error,
        "steps": len(exchanges),
        "totals": run_totals(exchanges).to_json(),
    }


def _exchange_json(e: Exchange) -> dict[str, Any]:
    s = e.summary
    usage = s.usage if s else None
    return {
        "step": e.step,
        "kind": s.kind if s else None,
        "dialect": s.dialect if s else None,
        "model": s.model if s else None,
        "method": e.method,
        "route": e.route,
        "status": e.status,
        "origin": e.origin,
        "streamed": e.streamed,
        "complete": e.complete,
        "error": e.error,
        "note": e.note,
        "pieces": len(e.pieces),
        "bytes_in_pieces": sum(p.size for p in e.pieces),
        "usage": None
        if usage is None
        else {
            "input": usage.input,
            "output": usage.output,
            "cached": usage.cached,
            "reasoning": usage.reasoning,
        },
        "tool_calls": [
            {"name": c.name, "arguments": c.arguments, "id": c.id}
            for c in (s.tool_calls if s else ())
        ],
        "finish_reason": s.finish_reason if s else None,
        "ttfb_ms": e.ttfb_ms,
        "duration_ms": e.duration_ms,
        "cost_usd": None if (cost := exchange_cost(e)) is None else float(cost),
    }


@click.command()
@cassette_option
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per snapshot.")
@reports_errors
def snapshots(cassette: str | None, run: str, as_json: bool) -> None:
    """List the state snapshots of RUN: step, adapter, size, and failed pulls.

    Example: forkpoint snapshots ticket-1
    """
    shown = api.snapshots(run, api.Options(cassette=cassette))
    found, taken = shown.run, shown.snapshots
    if as_json:
        rows = [
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
        ]
        click.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
        return
    echo(f"run {found.id}  {found.status}  {len(taken)} snapshots")
    echo(f"{'step':>4}  {'adapter':12}  {'size':>10}  {'ms':>7}  content type / error")
    for s in taken:
        detail = s.content_type if s.ok else f"FAILED: {s.error}"
        echo(
            f"{s.step:>4}  {s.adapter:12}  {s.size:>10}  {s.duration_ms or 0:>7.1f}  {detail}"
        )
