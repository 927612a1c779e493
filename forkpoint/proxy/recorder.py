"""Writes completed exchanges to the store on a thread of its own.

The event loop only enqueues: summarizing bodies (decompression, SSE parsing), hashing,
compressing and committing happen here, off the live path. Whatever is queued when a write
fails is retried, and each exchange is committed as soon as the writer reaches it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from forkpoint.cassettes.models import Exchange, Snapshot
from forkpoint.cassettes.store import Store
from forkpoint.errors import CassetteError
from forkpoint.proxy.dialects import summarize_exchange
from forkpoint.proxy.engine import fingerprint_of
from forkpoint.proxy.matching import MatchConfig

log = logging.getLogger(__name__)

_STOP = object()
RETRIES = 10
# How long the writer waits for more work once it sees a backlog (seconds).
LINGER = 0.005


class Recorder:
    def __init__(self, store: Store, *, match: MatchConfig = MatchConfig(), linger: float = LINGER):
        self._store = store
        self._match = match
        self._linger = linger
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._submitted = 0  # only the event loop's thread adds
        self._written = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="forkpoint-recorder", daemon=True)
        self._thread.start()

    def submit(self, item: Exchange | Snapshot) -> None:
        self._submitted += 1
        self._queue.put(item)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is committed; False on timeout."""
        target = self._submitted
        with self._idle:
            return self._idle.wait_for(lambda: self._written >= target, timeout)

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._linger and not self._queue.empty():
                # Under load more are on their way: one transaction for all of them costs
                # far less than one each, and takes the GIL from the proxy far less often.
                time.sleep(self._linger)
            batch = [item]
            while True:  # whatever else is already queued goes into the same transaction
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)
                    break
                batch.append(more)
            exchanges = [e for e in batch if isinstance(e, Exchange)]
            if exchanges:
                self._write(exchanges)
            for snapshot in (s for s in batch if isinstance(s, Snapshot)):
                self._write_snapshot(snapshot)
            with self._idle:
                self._written += len(batch)
                self._idle.notify_all()

    def _write(self, exchanges: list[Exchange]) -> None:
        for exchange in exchanges:
            if exchange.summary is None:
                exchange.summary = summarize_exchange(exchange)
            if not exchange.fingerprint:
                exchange.fingerprint = fingerprint_of(
                    exchange.method,
                    exchange.route,
                    exchange.request_body,
                    exchange.request_headers,
                    self._match,
                )
        try:
            self._store.add_exchanges(exchanges)
            return
        except Exception:
            log.warning("forkpoint: cassette write failed, retrying one by one", exc_info=True)
        # One bad exchange must not take the rest of its batch down with it.
        for exchange in exchanges:
            self._write_one(exchange)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        try:
            self._store.add_snapshot(snapshot)
        except Exception:
            log.exception("forkpoint: could not write the snapshot of run %s step %d (%s)",
                          snapshot.run_id, snapshot.step, snapshot.adapter)  # fmt: skip

    def _write_one(self, exchange: Exchange) -> None:
        for attempt in range(1, RETRIES + 1):
            try:
                self._store.add_exchanges([exchange])
                return
            except Exception as error:
                # A lock or a full disk may clear; a broken exchange never will.
                if attempt == RETRIES or not isinstance(error, CassetteError):
                    log.exception(
                        "forkpoint: could not write run %s step %d", exchange.run_id, exchange.step
                    )
                    return
                time.sleep(min(0.05 * 2**attempt, 2.0))
