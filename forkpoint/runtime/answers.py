"""Answering a parked run: the answer stored as its pending step's exchange, exactly once.

`deliver` is what `forkpoint answer`, `forkpoint.answer()` and serve's endpoint
(`POST /_forkpoint/runs/RUN/answer`, `answer_pages.AnswerPages`) all do; `deliver_deadline`
answers a park whose deadline passed as its upstream's own timeout would
(`engine.parking.timeout_answer`). The answer is masked as every recorded body is; the store's
conditional write lets exactly one answer win (`ParkStore.answer`), and a refused one stores
nothing. No aiohttp here: `forkpoint answer` imports this before the agent it wakes starts.
"""

from __future__ import annotations

import time

from forkpoint.cassettes.park_rows import already_answered
from forkpoint.cassettes.store import Store
from forkpoint.engine.derive import derive
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.parking import answered, check_status, timeout_answer
from forkpoint.errors import ConfigError, ForkpointError, NotParked
from forkpoint.models import Headers, Park, Run


def deliver(
    store: Store, run: str, body: bytes, *, status: int | str = 200, headers: Headers = (),
    by: str, match: MatchConfig = MatchConfig(), max_body: int | None = None,
) -> Park:  # fmt: skip
    """Answer parked run `run` (an id, a prefix or a name): `body` becomes its pending step's
    exchange, masked, stored exactly once. Raises RunNotFound, NotParked, AlreadyAnswered
    (naming who and when) or ConfigError (a bad status, a body over `max_body`); on any error
    nothing is stored."""
    code = check_status(status)
    if max_body is not None and len(body) > max_body:
        raise ConfigError(f"the answer is {len(body)} bytes, over --max-body ({max_body} bytes)")
    park = store.parked(run)  # `run` as an id, the run `find_run` would take first: one read
    if park is None:
        found = store.find_run(run)
        park = None if found.id == run else store.parked(found.id)
        if park is None:
            raise _nothing_waits(store, found)
    exchange = answered(park.request, code, headers, body, match.redaction, now=time.time())
    return store.answer(derive(exchange, match), by=by)


def _nothing_waits(store: Store, found: Run) -> ForkpointError:
    """Why run `found` takes no answer: answered and woken already (who, when), or not parked."""
    woken = store.last_park(found.id)  # none pending: any park of the run was woken
    if woken is not None:  # answered, and woken before this answer came
        return already_answered(found.id, woken.step, woken.answered_by, woken.answered_at)
    return NotParked(
        f"run {found.id} is {found.status}, not parked: nothing waits for an answer "
        "(see: forkpoint runs --status parked)",
        run_id=found.id,
    )


def deliver_deadline(store: Store, park: Park, *, match: MatchConfig = MatchConfig()) -> Park:
    """Answer a park whose deadline passed, as its upstream's own timeout would be."""
    request = park.request
    waited = (park.deadline or park.parked_at) - park.parked_at
    status, headers, body = timeout_answer(request.method, request.route, waited)
    exchange = answered(request, status, headers, body, match.redaction, now=time.time())
    return store.answer(derive(exchange, match), by="deadline")
