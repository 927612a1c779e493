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

from forkpoint.cassettes.models import Exchange
from forkpoint.cassettes.store import Store
from forkpoint.errors import CassetteError
from forkpoint.proxy.dialects import summarize_exchange

log = logging.getLogger(__name__)

_STOP = object()
RETRIES = 10


class Recorder:
    def __init__(self, store: Store):
        self._store = store
        self._queue: queue.Queue[object] = queue.Queue()
        self._pending = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="forkpoint-recorder", daemon=True)
        self._thread.start()

    def submit(self, exchange: Exchange) -> None:
        with self._idle:
            self._pending += 1
        self._queue.put(exchange)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is committed; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
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
            self._write(exchanges)
            with self._idle:
                self._pending -= len(exchanges)
                self._idle.notify_all()

    def _write(self, exchanges: list[Exchange]) -> None:
        for exchange in exchanges:
            if exchange.summary is None:
                exchange.summary = summarize_exchange(exchange)
        try:
            self._store.add_exchanges(exchanges)
            return
        except Exception:
            log.warning("forkpoint: cassette write failed, retrying one by one", exc_info=True)
        # One bad exchange must not take the rest of its batch down with it.
        for exchange in exchanges:
            self._write_one(exchange)

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
