"""What each page shows, as data: the same dict is rendered by its template or returned as JSON
(`.json` on any page's path), as datasette's views do. Everything is read through
`forkpoint.api.Reader`; nothing here writes.
"""

from __future__ import annotations

import shlex
from typing import Any

from markupsafe import Markup

from forkpoint.api import Reader
from forkpoint.compare.cost import PRICES, RunTotals, exchange_cost, run_totals, usd
from forkpoint.compare.records import exchange_json
from forkpoint.compare.render import ms
from forkpoint.errors import CassetteError, RunNotFound
from forkpoint.models import Exchange, RunStatus
from forkpoint.ui.bodies import body_html, decoded, events, events_html
from forkpoint.ui.inbox import park_row
from forkpoint.ui.live import cursor
from forkpoint.ui.runs import moment, run_row
from forkpoint.ui.timeline import timeline


def run_page(reader: Reader, ref: str, *, store_flag: str) -> dict[str, Any]:
    """A run: what it is, where it came from, its totals, its waterfall and its steps."""
    damaged: list[CassetteError] = []
    record = reader.show(ref, damaged=damaged)
    run, exchanges = record.run, record.exchanges
    parent = _parent(reader, run.parent_id)
    children = reader.runs([f"parent:{run.id}"], damaged=[])  # others' damage is theirs
    totals = run_totals(exchanges)
    return {
        "run": run_row(run, exchanges),
        "parent": None if parent is None else {"id": parent.id, "name": parent.name},
        "children": [
            {
                "id": c.id,
                "name": c.name,
                "status": str(c.status),
                "mode": str(c.mode),
                "fork_step": c.fork_step,
            }
            for c in children
        ],
        "totals": {**totals.to_json(), "text": totals_text(totals, len(exchanges))},
        "steps": [step_row(e, record.journaled) for e in exchanges],
        "timeline": timeline(exchanges, reader.snapshots(run.id).snapshots),
        "live": run.status is RunStatus.RUNNING,
        "after": cursor(e.step for e in exchanges),
        "fork": fork_command(run.id, "N", store_flag),
        "prices": PRICES,
        "damaged": [str(error) for error in damaged],
        "park": _park(reader, run.id),
    }


def _park(reader: Reader, run_id: str) -> dict[str, Any] | None:
    """The run's park not yet woken (its answer form's, while it waits), else None."""
    park = reader.parked(run_id)
    return None if park is None else park_row(reader, park)


def step_row(exchange: Exchange, journaled: dict[int, bool] | None = None) -> dict[str, Any]:
    """One step as a line (as `forkpoint show --json` has it), with what the page shows;
    `journaled`: the run's steps read from a journal, not merged (`RunRecord.journaled`)."""
    step = exchange.step
    return {
        **exchange_json(exchange),
        "journaled": journaled is not None and step in journaled,
        "provisional": journaled is not None and journaled.get(step, False),
        "chunks": len(exchange.chunks) if exchange.chunks is not None else None,
        "started_at": exchange.started_at,
        "ms": ms(exchange.duration_ms or 0.0),
        "cost": usd(exchange_cost(exchange)),
    }


def step_page(
    reader: Reader, ref: str, step: int, *, store_flag: str
) -> tuple[dict[str, Any], dict[str, Markup]]:
    """One step whole: its line, its request and response, the command that forks there.
    Returns the data and, apart, the bodies as markup (the JSON carries them as text)."""
    run = reader.run(ref)
    found = next((e for e in reader.exchanges(run.id, bodies=True) if e.step == step), None)
    if found is None:
        raise RunNotFound(f"run {run.id} has no step {step}", run_id=run.id)
    summary = found.summary
    data = {
        "run": {"id": run.id, "name": run.name, "status": str(run.status)},
        **step_row(found),
        "model_sent": found.model_sent,
        "upstream": found.upstream,
        "started": moment(found.started_at),
        "text": summary.text if summary else None,
        "request": {
            "headers": [list(pair) for pair in found.request_headers],
            "body": _text(found.request_body, found.request_headers),
        },
        "response": {
            "headers": [list(pair) for pair in found.response_headers],
            "body": _text(found.response_body, found.response_headers),
            "events": None
            if found.chunks is None
            else [
                {"offset_ms": e.offset_ms, "event": e.name, "data": e.data}
                for e in events(found.chunks)[0]
            ],
        },
        "fork": fork_command(run.id, str(step), store_flag),
    }
    shown = {
        "request": body_html(found.request_body, found.request_headers),
        "response": events_html(found.chunks)
        if found.chunks
        else body_html(found.response_body, found.response_headers),
    }
    return data, shown


def fork_command(run_id: str, step: str, store_flag: str) -> str:
    """The command that forks the run at `step`: steps before it replay, it goes live."""
    return f"forkpoint fork {shlex.quote(run_id)} --at {step}{store_flag} -- YOUR_AGENT_COMMAND"


def experiments_page(reader: Reader) -> dict[str, Any]:
    return {
        "experiments": [
            {
                "name": stored.name,
                "created_at": stored.created_at,
                "started": moment(stored.created_at),
                "ended_at": stored.ended_at,
                "runs": forked,
                "failed": failed,
            }
            for stored, forked, failed in reversed(reader.experiment_list())
        ]
    }


def _parent(reader: Reader, parent_id: str | None) -> Any:
    if parent_id is None:
        return None
    try:
        return reader.run(parent_id)
    except RunNotFound:
        return None


def totals_text(totals: RunTotals, steps: int) -> str:
    """`7 steps · 1,234 tokens, $0.0042, LLM 2.10 s, tools 40 ms, wall 2.30 s`."""
    replayed = f", {totals.replayed_steps} replayed at $0" if totals.replayed_steps else ""
    return (
        f"{steps} steps · {totals.tokens:,} tokens, {usd(totals.cost_usd)}, "
        f"LLM {ms(totals.llm_ms)}, tools {ms(totals.tool_ms)}, wall {ms(totals.wall_ms)}{replayed}"
    )


def _text(body: bytes, headers: Any) -> str:
    """A body for the JSON: its text as decoded (a body not text keeps its bytes' escapes)."""
    plain, _ = decoded(body, headers)
    return plain.decode("utf-8", errors="backslashreplace")
