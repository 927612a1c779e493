"""Recorders take completed exchanges and snapshots from the event loop and commit them off it.

The event loop only hands items over; a `CassetteWriter` does the work elsewhere. Here is the
contract and the in-process recorder (a thread); `recorder_process` has the ones that write
from a child process, which a proxy recording into an SQLite file moves to under load.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from forkpoint.cassettes.store import Store
from forkpoint.engine.matching import MatchConfig
from forkpoint.runtime.recording.writer import CassetteWriter, Item

_STOP = object()
# How long the writer waits for more work once it sees a backlog (seconds).
LINGER = 0.005


class Recorder(Protocol):
    def submit(self, item: Item) -> None:
        """Hand over a completed item; called on the event loop, never blocks."""
        ...

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is committed; False on timeout."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Commit everything submitted, then release the writer."""
        ...


class Progress:
    """Items submitted and committed, so `flush` can wait for those submitted before it."""

    def __init__(self) -> None:
        self.submitted = 0  # only the event loop's thread adds
        self._written = 0
        self._changed = threading.Condition()

    def written(self, count: int) -> None:
        with self._changed:
            self._written += count
            self._changed.notify_all()

    def wait(self, timeout: float | None) -> bool:
        target = self.submitted
        with self._changed:
            return self._changed.wait_for(lambda: self._written >= target, timeout)


class ThreadRecorder:
    """Writes on a thread of this process: for stores that live in memory, and as the fallback
    when a writer process cannot run. Each exchange is committed as soon as the thread reaches
    it."""

    def __init__(
        self,
        store: Store,
        *,
        match: MatchConfig = MatchConfig(),
        linger: float = LINGER,
        progress: Progress | None = None,
    ):
        self._writer = CassetteWriter(store, match)
        self._linger = linger
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._progress = progress or Progress()
        self._thread = threading.Thread(target=self._run, name="forkpoint-recorder", daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> None:
        self._progress.submitted += 1
        self._queue.put(item)

    def take_over(self, items: Iterable[Item]) -> None:
        """Write items another recorder sharing this one's `Progress` took and did not commit."""
        for item in items:
            self._queue.put(item)

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self._progress.wait(timeout)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        await asyncio.to_thread(self.flush, None)
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
            self._writer.write(batch)  # type: ignore[arg-type]  # _STOP never gets here
            self._progress.written(len(batch))
