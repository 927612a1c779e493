"""The runs page: the cassette's runs as a tree (each run, then the forks and replays made from
it), newest first, filtered and cut into pages.

A page is `PAGE` trees: its roots and everything under them. Only the runs a page shows have
their exchanges read (for steps, tokens and cost), so a cassette of 10,000 runs costs one
query for the runs and one per run shown (benchmarks/ui.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from forkpoint.api import Reader
from forkpoint.compare.cost import run_totals, usd
from forkpoint.compare.records import run_json
from forkpoint.compare.render import change_text
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Run, RunStatus

PAGE = 50
# The runs shown under one root at most: an experiment of thousands of forks stays a page.
BRANCHES = 200
STATUSES = tuple(status.value for status in RunStatus)
FIELDS = ("status", "name", "label", "since", "until", "select")
COUNTED = 100  # parked runs the runs page's badge counts, then "100+"


@dataclass(frozen=True, slots=True)
class Query:
    """What the runs page was asked for: its filters and page (from the query string)."""

    status: str = ""
    name: str = ""
    label: str = ""
    since: str = ""
    until: str = ""
    select: str = ""  # more filters, as `experiment --select` takes them
    page: int = 1

    @classmethod
    def of(cls, query: Any) -> Query:
        """From a request's query (a mapping of str); a bad page number is page 1."""
        page = query.get("page", "1")
        fields = {name: query.get(name, "").strip() for name in FIELDS}
        return cls(**fields, page=int(page) if page.isdigit() and int(page) > 0 else 1)

    def filters(self) -> list[str]:
        """The `KEY:VALUE` filters the fields stand for (a name without a glob is a part)."""
        found = [f"status:{self.status}"] if self.status else []
        if self.name:
            glob = any(c in self.name for c in "*?[")
            found.append(f"name:{self.name}" if glob else f"name:*{self.name}*")
        found += [f"label:{self.label}"] if self.label else []
        found += [f"since:{self.since}"] if self.since else []
        found += [f"until:{self.until}"] if self.until else []
        return found + self.select.split()

    def link(self, page: int) -> str:
        """The query string of page `page` with the same filters."""
        given = {name: getattr(self, name) for name in FIELDS if getattr(self, name)}
        return "?" + urlencode({**given, "page": page})


def runs_page(reader: Reader, query: Query) -> dict[str, Any]:
    """The page's data: rows in tree order (each with its depth), and where the page is."""
    damaged: list[CassetteError] = []  # shown as what could not be read, not as a failure
    chosen = reader.runs(query.filters(), damaged=damaged)
    trees = _trees(chosen)
    pages = max(1, -(-len(trees) // PAGE))
    page = min(query.page, pages)
    shown = trees[(page - 1) * PAGE : page * PAGE]
    rows = []
    for root, branches, hidden in shown:
        for depth, run in [(0, root), *branches]:
            rows.append(run_row(run, reader.exchanges(run.id, damaged=damaged), depth=depth))
        if hidden:
            rows.append({"hidden": hidden, "parent_id": root.id})
    return {
        "runs": rows,
        "total": len(chosen),
        "page": page,
        "pages": pages,
        "newer": query.link(page - 1) if page > 1 else None,
        "older": query.link(page + 1) if page < pages else None,
        "query": query,
        "statuses": STATUSES,
        "parked": parked_count(reader),
        "damaged": [str(error) for error in damaged],
    }


def run_row(run: Run, exchanges: Sequence[Exchange], *, depth: int = 0) -> dict[str, Any]:
    """A run as `forkpoint runs --json` has it, with what the runs page shows."""
    totals = run_totals(exchanges)
    return {
        **run_json(run, exchanges, totals),
        "change_text": change_text(run.change) if run.change else None,
        "started": moment(run.created_at),
        "cost": usd(totals.cost_usd),
        "depth": depth,
    }


def parked_count(reader: Reader) -> str:
    """How many runs wait on an answer (the inbox's badge), read off the parks' index."""
    found = len(reader.parks(("parked",), limit=COUNTED + 1))
    return f"{COUNTED}+" if found > COUNTED else str(found)


def moment(epoch: float | None) -> str:
    """Local time, to the second: `2026-11-03 14:30:05`."""
    if epoch is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _trees(runs: Sequence[Run]) -> list[tuple[Run, list[tuple[int, Run]], int]]:
    """Each root (a run whose parent is not among `runs`) newest first, with the runs under
    it depth-first, oldest first (at most BRANCHES), and how many more were left out."""
    ids = {run.id for run in runs}
    children: dict[str, list[Run]] = {}
    roots = []
    for run in runs:  # oldest first
        if run.parent_id in ids:
            children.setdefault(run.parent_id, []).append(run)  # type: ignore[arg-type]
        else:
            roots.append(run)
    trees = []
    for root in reversed(roots):
        under: list[tuple[int, Run]] = []
        stack = [(1, child) for child in reversed(children.get(root.id, []))]
        count = 0
        while stack:
            depth, run = stack.pop()
            count += 1
            if len(under) < BRANCHES:
                under.append((depth, run))
            stack.extend((depth + 1, child) for child in reversed(children.get(run.id, [])))
        trees.append((root, under, count - len(under)))
    return trees
