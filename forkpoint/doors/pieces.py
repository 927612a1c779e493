"""The front door's side of bodies in pieces: handing them to the recorder no faster than it
writes them (a response's, and a request's as it arrives: `doors.uploads`), and reading them
back from the store as a replay serves them.

Both keep a large body out of the proxy's memory. A body arriving faster than the store takes
it waits in the upstream's socket: every SPILL_AHEAD bytes of pieces, the door waits (on a
thread) for the writer to catch up. A replay reads one piece at a time, on a thread, as its
turn in the plan comes, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from forkpoint.doors.ports import Pieces, Recorder
from forkpoint.engine.lifecycle import Body, Cut, Event, Load, serve_plan
from forkpoint.engine.pace import Pace
from forkpoint.errors import CassetteError
from forkpoint.models import Blob, Exchange

log = logging.getLogger(__name__)

# The bytes of pieces handed to the recorder after which the door waits for the writer to
# catch up (`Recorder.flush`). A piece in flight is held three or four times over (the item,
# its pickle, the pipe to a writer process), so two pieces; waiting that often cost no
# throughput where measured (1 GiB in ~6 s either way). How long one wait may take (s).
SPILL_AHEAD = 8 * 1024 * 1024
SPILL_WAIT = 60.0


class Spilling:
    """Hands pieces to the recorder, each journaled as it is submitted, and waits for the
    writer every SPILL_AHEAD bytes (across every response of the door)."""

    def __init__(self, recorder: Recorder):
        self._recorder = recorder
        self._ahead = 0  # bytes of pieces submitted since the writer last caught up

    async def spill(self, blob: Blob) -> None:
        await self.spill_all([blob])

    async def spill_all(self, blobs: list[Blob]) -> None:
        """Submit `blobs` (all of them, before any wait: a wait cut short by a hang-up leaves
        none unsubmitted), then wait if the writer is behind."""
        for blob in blobs:
            self._recorder.submit(blob)
            self._ahead += len(blob.data)
        if self._ahead >= SPILL_AHEAD:
            self._ahead = 0
            if not await asyncio.to_thread(self._recorder.flush, SPILL_WAIT):
                log.warning("forkpoint: the recorder is %g s behind a large body", SPILL_WAIT)


async def served(
    recorded: Exchange, pace: Pace, started: float, pieces: Pieces
) -> AsyncIterator[Event]:
    """The events that serve `recorded` under `pace`, from `started` (perf_counter); a piece
    of its body is read from `pieces` as its turn comes. A piece that does not read cuts the
    answer there, as a recording cut there would."""
    for delay, event in serve_plan(recorded, pace):
        wait = started + delay - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        if not isinstance(event, Load):
            yield event
            continue
        try:
            data = await asyncio.to_thread(pieces.piece, event.piece)
        except CassetteError as error:
            log.warning("forkpoint: run %s step %d: %s", recorded.run_id, recorded.step, error)
            yield Cut(f"forkpoint: {error}")
            return
        yield Body(data, event.piece)
