"""The inbox: parked runs (park and wake) as data, for the inbox page and a parked run's page.

Each row says what the run waits on, since when, until when, and the pending request (its
method, route, headers and body as text, which the templates escape). Read through
`forkpoint.api.Reader`, off the parks' index: a page of the inbox reads `PAGE` parks, not the
cassette's runs.
"""

from __future__ import annotations

from typing import Any

from forkpoint.api import Reader
from forkpoint.errors import RunNotFound
from forkpoint.models import Launch, Park, ParkState, Waker
from forkpoint.ui.bodies import decoded
from forkpoint.ui.runs import moment

__all__ = ["PAGE", "WAITING", "inbox_page", "park_row"]

PAGE = 50
# What the inbox lists: the parks waiting on an answer, and those answered, not yet woken.
WAITING = (ParkState.PARKED.value, ParkState.ANSWERED.value, ParkState.WAKING.value)
PREVIEW = 2000  # characters of a pending body the inbox shows (the run's page shows it whole)

# Who wakes an answered run, by its launch's waker, for the page to say.
WAKERS = {
    Waker.LOCAL: "the `forkpoint serve --park …` on this store wakes it as a local process",
    Waker.HOOK: "the `forkpoint serve` on this store wakes it through its --on-wake hook",
    Waker.FOREGROUND: "it parked under `record -- CMD`: wake it with `forkpoint wake {run}`",
    Waker.WORKERS: "a `forkpoint worker` with agent {agent} wakes it (a wake job was queued)",
}


def inbox_page(reader: Reader, *, after: str = "") -> dict[str, Any]:
    """A page of waiting parks by run id (oldest ids first), and where the next begins."""
    parks = reader.parks(WAITING, limit=PAGE + 1, after=after or None)
    shown = parks[:PAGE]
    rows = [park_row(reader, park, preview=PREVIEW) for park in shown]
    return {
        "parks": rows,
        "after": after,
        "next": shown[-1].run_id if len(parks) > PAGE else None,
    }


def park_row(reader: Reader, park: Park, *, preview: int | None = None) -> dict[str, Any]:
    """A park as the inbox and a run's page show it (`preview`: cut the body's text there)."""
    request = park.request
    try:
        name = reader.run(park.run_id).name
    except RunNotFound:
        name = None
    launch = reader.launch(park.run_id)
    body = _text(request.request_body, request.request_headers)
    cut = preview is not None and len(body) > preview
    return {
        "run": park.run_id,
        "name": name,
        "step": park.step,
        "state": str(park.state),
        "waits_on": park.waits_on,
        "parked_at": park.parked_at,
        "since": moment(park.parked_at),
        "deadline_at": park.deadline,
        "deadline": moment(park.deadline),
        "answered_by": park.answered_by,
        "answered_at": park.answered_at,
        "answered": moment(park.answered_at),
        "method": request.method,
        "route": request.route,
        "request": {
            "headers": [list(pair) for pair in request.request_headers],
            "body": body[:preview] if cut else body,
            "cut": cut,
        },
        "waker": str(launch.waker) if launch else None,
        "wakes": wakes_how(park, launch),
    }


def wakes_how(park: Park, launch: Launch | None) -> str:
    """Who wakes this run once answered, in words."""
    if launch is None:
        return f"it keeps no launch: resume it by hand (forkpoint resume {park.run_id} -- CMD)"
    agent = str(launch.options.get("agent") or "?")
    return WAKERS[launch.waker].format(run=park.run_id, agent=agent)


def _text(body: bytes, headers: Any) -> str:
    plain, _ = decoded(body, headers)
    return plain.decode("utf-8", errors="backslashreplace")
