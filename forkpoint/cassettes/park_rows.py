"""Parks and launches as every store keeps them: the SQL stores' columns and queries, the
conversions of their rows, and the errors a transition that lost raises (the memory store's too).

A park's pending request is kept as an exchange is (the exchange's own columns, `rows`), in the
`parks` row beside its state; its body is a plain list of blobs, never a reference to an
earlier step's request, so it reads whole whatever happens to the run's other steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from forkpoint.cassettes import headers, manifests
from forkpoint.cassettes.rows import (
    EXCHANGE_COLUMNS,
    Fetch,
    damaged,
    dump_json,
    exchange_from_row,
    exchange_values,
    read,
)
from forkpoint.errors import AlreadyAnswered, ConfigError, NotParked
from forkpoint.models import Exchange, Launch, Park, ParkState, Waker

# The park's own columns, then the pending request's (an exchange's, less its run and step).
PARK_OWN = (
    "run_id", "step", "state", "waits_on", "parked_at", "deadline", "answered_at",
    "answered_by", "woken_at",
)  # fmt: skip
PARK_REQUEST = EXCHANGE_COLUMNS[2:]
PARK_COLUMNS = PARK_OWN + PARK_REQUEST
LAUNCH_COLUMNS = ("run_id", "command", "cwd", "env", "needs", "options", "waker", "on_wake")
_REQUEST_BODY = PARK_COLUMNS.index("request_body")

# The states a run is still waiting in, in the order `parked` looks for them: a park in one of
# them holds its run (`woken` ones are history, read only by their key).
PENDING = (ParkState.PARKED, ParkState.ANSWERED, ParkState.WAKING)

# How each state is found off a partial index (the migrations make them: the waiting parks by
# run id, the answered and waking ones, the deadlines to come). The SQL stores' planners use a
# partial index only when the query's WHERE contains its predicate as written (SQLite's rule;
# PostgreSQL proves more), so each query repeats it literally, constants and all.
STATE_WHERE = {
    ParkState.PARKED: "state = 'parked'",
    ParkState.ANSWERED: "state IN ('answered', 'waking') AND state = 'answered'",
    ParkState.WAKING: "state IN ('answered', 'waking') AND state = 'waking'",
    ParkState.WOKEN: "state = 'woken'",
}
DUE_WHERE = "state = 'parked' AND deadline IS NOT NULL"


def states_of(states: Sequence[str]) -> list[ParkState]:
    """The states asked for, each once; a word that is no state is a clear error."""
    try:
        return list(dict.fromkeys(ParkState(state) for state in states))
    except ValueError:
        known = ", ".join(ParkState)
        raise ConfigError(f"no park state in {list(states)!r}: the states are {known}") from None


def park_values(
    park: Park, request_body: manifests.Manifest, *, compact: bool = False
) -> tuple[Any, ...]:
    """The park's columns in PARK_COLUMNS order; `request_body` is its manifest, for the store
    to name (`rows.named`). Its headers are written whole (a packer of its own refers to no
    other step), as its body is; `compact` as the store's packer is."""
    packer = manifests.Packer(compact=compact)
    request = exchange_values(park.request, packer, request_body, manifests.Manifest([]))[2:]
    return (
        park.run_id, park.step, park.state, park.waits_on, park.parked_at, park.deadline,
        park.answered_at, park.answered_by, park.woken_at, *request,
    )  # fmt: skip


def park_manifest(row: Sequence[Any]) -> str | None:
    value = row[_REQUEST_BODY]
    return value if isinstance(value, str) or value is None else str(value)


def parks_from_rows(rows: Sequence[Sequence[Any]], fetch: Fetch) -> list[Park]:
    """Parks from their rows (PARK_COLUMNS order), their requests' bodies fetched at once."""
    planned = []
    for row in rows:
        where = f"run {row[0]} step {row[1]} (its park)"
        try:
            planned.append((row, manifests.Bodies.other(park_manifest(row)), where))
        except ValueError as error:
            raise damaged(where, "its request's list of blobs", error) from None
    found = manifests.fetch_in_chunks(manifests.wanted(h for _, h, _ in planned), fetch)
    parks = []
    for row, hashes, where in planned:
        try:
            body = found.join(hashes)
        except (KeyError, ValueError) as error:
            raise damaged(where, "its request's body", error) from None
        parks.append(park_from_row(row, body))
    return parks


def park_from_row(row: Sequence[Any], request_body: bytes) -> Park:
    """A park from its columns (PARK_COLUMNS order) and its request's loaded body."""
    run_id, step, state, waits_on, parked_at, deadline, answered_at, by, woken_at = row[:9]
    exchange_row = (run_id, step, *row[9:])
    where = f"run {run_id} step {step} (its park)"
    column = PARK_COLUMNS.index
    sets = headers.HeaderSets()
    heads = (
        read(where, "its request headers", lambda: sets.read(
            headers.REQUEST, step, row[column("request_headers")])),
        read(where, "its response headers", lambda: sets.read(
            headers.RESPONSE, step, row[column("response_headers")])),
    )  # fmt: skip
    request = exchange_from_row(exchange_row, request_body, b"", heads)
    return Park(
        request=request,
        waits_on=waits_on,
        parked_at=parked_at,
        deadline=deadline,
        state=read(where, "its state", lambda: ParkState(state)),
        answered_at=answered_at,
        answered_by=by,
        woken_at=woken_at,
    )


def launch_values(launch: Launch) -> tuple[Any, ...]:
    return (
        launch.run_id, dump_json(list(launch.command)), launch.cwd, headers.dump(launch.env),
        dump_json(list(launch.needs)), dump_json(launch.options), launch.waker,
        dump_json(list(launch.on_wake)),
    )  # fmt: skip


def launch_from_row(row: Sequence[Any]) -> Launch:
    run_id, command, cwd, env, needs, options, waker, on_wake = row
    where = f"run {run_id} (how it was started)"
    return Launch(
        run_id=run_id,
        command=read(where, "its command", lambda: _strings(command)),
        cwd=cwd,
        env=read(where, "its environment", lambda: _pairs(env)),
        needs=read(where, "its secrets' names", lambda: _strings(needs)),
        options=read(where, "its options", lambda: dict(orjson.loads(options or "{}"))),
        waker=read(where, "its waker", lambda: Waker(waker)),
        on_wake=read(where, "its wake hook", lambda: _strings(on_wake)),
    )


def _strings(text: str | None) -> tuple[str, ...]:
    values = orjson.loads(text or "[]")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError("not a list of strings")
    return tuple(values)


def already_answered(run_id: str, step: int, by: str | None, at: float | None) -> AlreadyAnswered:
    """The error of the second answer: who answered first, and when."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)) if at is not None else "?"
    who = by or "its upstream's answer, recorded as any other"
    return AlreadyAnswered(
        f"run {run_id} step {step} was answered already, by {who} at {when}: "
        "a parked step takes one answer",
        run_id=run_id, step=step, by=by, at=at if at is not None else 0.0,
    )  # fmt: skip


def not_parked(run_id: str, step: int | None, status: str, waiting: Sequence[int]) -> NotParked:
    """The error of an answer or a wake for a run that waits on nothing (at that step)."""
    if waiting:
        steps = ", ".join(str(s) for s in waiting)
        return NotParked(
            f"run {run_id} waits at step {steps}, not step {step}: answer that step",
            run_id=run_id, step=step,
        )  # fmt: skip
    return NotParked(
        f"run {run_id} is {status}, not parked: nothing waits for an answer "
        "(see: forkpoint runs --status parked)",
        run_id=run_id, step=step,
    )  # fmt: skip


def answered_at(exchange: Exchange) -> float:
    """When an exchange's answer came: its start and its duration."""
    return exchange.started_at + (exchange.duration_ms or 0.0) / 1000


def _pairs(text: str | None) -> tuple[tuple[str, str], ...]:
    """A launch's environment, kept as a list of [name, value] pairs."""
    return tuple((str(name), str(value)) for name, value in orjson.loads(text or "[]"))
