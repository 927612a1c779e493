"""Runs and exchanges as JSON data, without bodies: what `forkpoint runs --json` and `show
--json` print, and what the web view's pages carry (`.json`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.compare.cost import (
    RunTotals,
    exchange_cost,
    run_totals,
    unpriced_reason,
    usage_json,
)
from forkpoint.models import Exchange, Run

__all__ = ["exchange_json", "run_json"]


def run_json(
    run: Run, exchanges: Sequence[Exchange], totals: RunTotals | None = None
) -> dict[str, Any]:
    """A run with its step count and totals (`totals`, when its caller has them already)."""
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
        "totals": (totals or run_totals(exchanges)).to_json(),
    }


def exchange_json(e: Exchange) -> dict[str, Any]:
    """An exchange's line: what was asked, what came back, its usage, timing and cost."""
    s = e.summary
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
        "usage": usage_json(s.usage if s else None),
        "tool_calls": [
            {"name": c.name, "arguments": c.arguments, "id": c.id}
            for c in (s.tool_calls if s else ())
        ],
        "finish_reason": s.finish_reason if s else None,
        "ttfb_ms": e.ttfb_ms,
        "duration_ms": e.duration_ms,
        "cost_usd": None if (cost := exchange_cost(e)) is None else float(cost),
        "unpriced": unpriced_reason(e),
    }
