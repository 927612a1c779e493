"""Commits completed exchanges and snapshots to a store, in whichever thread or process runs it.

Everything the live path leaves for later happens here: summarizing bodies (decompression, SSE
parsing), fingerprinting, hashing and compressing blobs, one transaction per batch. It imports
no asyncio or aiohttp, so the writer process starts quickly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from forkpoint.cassettes.store import Store
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.matching import MatchConfig, fingerprint_of
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Snapshot

log = logging.getLogger(__name__)

RETRIES = 10

Item = Exchange | Snapshot


class CassetteWriter:
    def __init__(self, store: Store, match: MatchConfig = MatchConfig()):
        self.store = store
        self.match = match

    def write(self, batch: Sequence[Item]) -> None:
        """Commit `batch`: its exchanges in one transaction, then each snapshot."""
        exchanges = [item for item in batch if isinstance(item, Exchange)]
        if exchanges:
            self._write_exchanges(exchanges)
        for snapshot in (item for item in batch if isinstance(item, Snapshot)):
            self._write_snapshot(snapshot)

    def _write_exchanges(self, exchanges: list[Exchange]) -> None:
        for exchange in exchanges:
            if exchange.summary is None:
                exchange.summary = summarize_exchange(exchange)
            if not exchange.fingerprint:
                exchange.fingerprint = fingerprint_of(
                    exchange.method,
                    exchange.route,
                    exchange.request_body,
                    exchange.request_headers,
                    self.match,
                )
        try:
            self.store.add_exchanges(exchanges)
            return
        except Exception:
            log.warning("forkpoint: cassette write failed, retrying one by one", exc_info=True)
        # One bad exchange must not take the rest of its batch down with it.
        for exchange in exchanges:
            self._write_one(exchange)

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
