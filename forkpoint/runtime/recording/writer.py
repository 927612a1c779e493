"""Commits new runs, completed exchanges and snapshots to a store, in whichever thread or
process runs it.

Everything the live path leaves for later happens here: creating runs, summarizing bodies
(decompression, SSE parsing), fingerprinting, hashing and compressing blobs, one transaction
per batch. It imports no asyncio or aiohttp, so the writer process starts quickly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from forkpoint.cassettes.store import Store
from forkpoint.engine.derive import derive
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import CassetteError, RunNotFound
from forkpoint.models import Exchange, Run, Snapshot

log = logging.getLogger(__name__)

RETRIES = 10

Item = Exchange | Snapshot | Run


class CassetteWriter:
    def __init__(self, store: Store, match: MatchConfig = MatchConfig()):
        self.store = store
        self.match = match

    def write(self, batch: Sequence[Item]) -> None:
        """Commit `batch`: its new runs, its exchanges in one transaction, then each snapshot."""
        for run in (item for item in batch if isinstance(item, Run)):
            self._create_run(run)
        exchanges = [item for item in batch if isinstance(item, Exchange)]
        if exchanges:
            self._write_exchanges(exchanges)
        for snapshot in (item for item in batch if isinstance(item, Snapshot)):
            self._write_snapshot(snapshot)

    def _write_exchanges(self, exchanges: list[Exchange]) -> None:
        for exchange in exchanges:
            derive(exchange, self.match)
        try:
            self.store.add_exchanges(exchanges)
            return
        except Exception:
            log.warning("forkpoint: cassette write failed, retrying one by one", exc_info=True)
        # One bad exchange must not take the rest of its batch down with it.
        for exchange in exchanges:
            self._write_one(exchange)

    def _create_run(self, run: Run) -> None:
        try:
            self.store.create_run(run)
        except Exception:
            try:  # another proxy on the same cassette made it first
                self.store.get_run(run.id)
            except RunNotFound:
                log.exception("forkpoint: could not create run %s", run.id)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        try:
            self.store.add_snapshot(snapshot)
        except Exception:
            log.exception("forkpoint: could not write the snapshot of run %s step %d (%s)",
                          snapshot.run_id, snapshot.step, snapshot.adapter)  # fmt: skip

    def _write_one(self, exchange: Exchange) -> None:
        for attempt in range(1, RETRIES + 1):
            try:
                self.store.add_exchanges([exchange])
                return
            except Exception as error:
                # A lock or a full disk may clear; a broken exchange never will.
                if attempt == RETRIES or not isinstance(error, CassetteError):
                    log.exception(
                        "forkpoint: could not write run %s step %d", exchange.run_id, exchange.step
                    )
                    return
                time.sleep(min(0.05 * 2**attempt, 2.0))
