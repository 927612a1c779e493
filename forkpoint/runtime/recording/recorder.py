"""Recorders take completed exchanges and snapshots from the event loop and commit them off it.

The event loop only hands items over; a `CassetteWriter` does the work elsewhere. Here is the
contract, the in-process recorder (a thread) and, for a store in memory, the one that writes
on the loop itself; `process` has the ones that write from a child process, which a proxy
recording into an SQLite file moves to under load, and `journaled` the recorder that journals
each item before handing it over.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from forkpoint.cassettes.store import Store
from forkpoint.engine.matching import MatchConfig
from forkpoint.runtime.recording.journal import Entry, Journal, read_items
from forkpoint.runtime.recording.writer import KEPT, CassetteWriter, Item, Unavailable

log = logging.getLogger(__name__)

_STOP = object()
# How long the writer waits for more work once it sees a backlog (seconds).
LINGER = 0.005
# While the store takes no writes, how soon the writer tries again, at first and at most (s).
RETRY_FIRST, RETRY_MAX = 0.5, 5.0
# An item the store refused is tried again less and less often, at most this far apart (s):
# such an error seldom passes, and each try reads its journal file again.
REFUSED_MAX = 60.0


class Recorder(Protocol):
    def submit(self, item: Item) -> None:
        """Hand over a completed item; called on the event loop, never blocks."""
        ...

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is committed (or held in the journal: the
        store takes no writes, or refused it); False on timeout."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Commit everything submitted, then release the writer."""
        ...


class Progress:
    """Items submitted and committed, so `flush` can wait for those submitted before it."""

    def __init__(self) -> None:
        self.submitted = 0  # only the event loop's thread adds, except through `add`
        self._written = 0
        self._changed = threading.Condition()

    def add(self) -> None:
        """One item submitted, from any thread."""
        with self._changed:
            self.submitted += 1

    def written(self, count: int) -> None:
        with self._changed:
            self._written += count
            self._changed.notify_all()

    def wait(self, timeout: float | None) -> bool:
        target = self.submitted
        with self._changed:
            return self._changed.wait_for(lambda: self._written >= target, timeout)


class LoopRecorder:
    """Writes on the event loop, once the agent's last bytes are out: for a store in memory (the
    pytest plugin's), whose write is a few inserts and a summary's parse. A thread would cost
    more than it saves there: its start and stop each test, and a hand-off per exchange that
    takes the GIL from the agent's next request."""

    def __init__(self, store: Store, *, match: MatchConfig = MatchConfig()):
        self._writer = CassetteWriter(store, match, kept="it is not recorded")
        self._progress = Progress()

    def submit(self, item: Item) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on a loop: nothing to wait for
            self.write_here(item)
            return
        self._progress.add()
        loop.call_soon(self._write, item)

    def write_here(self, item: Item) -> None:
        """Write `item` now, on the calling thread: a client's, answered there
        (`doors.local`), whose answer then waits on no loop."""
        self._progress.add()
        self._write(item)

    def _write(self, item: Item) -> None:
        try:
            self._writer.write([item])
        except Exception as error:  # on the loop: one line, never a traceback in a callback
            log.error("forkpoint: could not record a %s: %s", type(item).__name__.lower(), error)
        finally:
            self._progress.written(1)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Called off the loop (a flush on it could not see the writes it waits for)."""
        return self._progress.wait(timeout)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        await asyncio.sleep(0)  # the writes already called for run first


class ThreadRecorder:
    """Writes on a thread of this process: for stores that live in memory, and as the fallback
    when a writer process cannot run. Each exchange is committed as soon as the thread reaches
    it.

    While the store takes no writes (`Unavailable`), what arrives is held: left in the
    journal, dropped from memory, and written from the journal's files once a retry succeeds.
    An item the store refuses is held the same way while the rest goes on being written, and
    tried again less and less often, up to every REFUSED_MAX.
    """

    def __init__(
        self,
        store: Store,
        *,
        match: MatchConfig = MatchConfig(),
        linger: float = LINGER,
        progress: Progress | None = None,
        journal: Journal | None = None,
    ):
        kept = KEPT if journal is not None else "it is held in memory and tried again"
        self._writer = CassetteWriter(store, match, kept=kept)
        self._linger = linger
        self._journal = journal
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._progress = progress or Progress()
        self._held = False
        self._kept: list[Entry] = []  # held with no journal to hold them
        self._retry_in = RETRY_FIRST
        self._retry_at: float | None = None  # when what is held is tried again
        self._thread = threading.Thread(target=self._run, name="forkpoint-recorder", daemon=True)
        self._thread.start()

    def submit(self, item: Item) -> None:
        self.put(Entry(item))

    def put(self, entry: Entry) -> None:
        self._progress.submitted += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._queue.put(entry)
            return
        # Once the agent's last bytes are out: woken now, the writer would take the GIL from
        # the send (the entry is in the journal already).
        loop.call_soon(self._queue.put, entry)

    def take_over(self, entries: Iterable[Entry]) -> None:
        """Write entries another recorder sharing this one's `Progress` took and did not
        commit."""
        for entry in entries:
            self._queue.put(entry)

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self._progress.wait(timeout)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        # Everything is committed, or held in the journal; waiting longer for a store that
        # takes no writes, or for an item it refuses, would only keep Ctrl-C waiting.
        while not await asyncio.to_thread(self.flush, 0.5):
            if (self._held or self._kept) and self._queue.empty():
                break
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    def _run(self) -> None:
        while True:
            batch = self._next()
            if batch is None:
                # one last try for what the store refused; not for a store that takes no
                # writes, which would keep Ctrl-C waiting on it: the journal holds all of it
                if self._retry_at is not None and not self._held:
                    self._retry()
                if self._kept:
                    log.error("forkpoint: %d exchanges could not be written nor journaled: "
                              "they are lost", len(self._kept))  # fmt: skip
                return
            if self._retry_at is not None and time.monotonic() >= self._retry_at:
                self._retry()
            if not self._held:
                try:
                    refused = self._writer.write([entry.item for entry in batch])
                except Unavailable as error:
                    self._hold_from_now(error)
                else:
                    self._written(batch, refused)
                    continue
            self._hold(batch)

    def _written(self, batch: list[Entry], refused: list[Item]) -> None:
        """`batch` is committed but for what the store `refused`, which is held."""
        held: list[Entry] = []
        if refused:
            kept = {id(item) for item in refused}
            held = [entry for entry in batch if id(entry.item) in kept]
            batch = [entry for entry in batch if id(entry.item) not in kept]
        if self._journal is not None:
            for entry in batch:
                self._journal.done(entry.segment)
        self._progress.written(len(batch))
        if held:
            self._hold(held)
            if self._retry_at is None:
                self._retry_in = RETRY_FIRST
                self._retry_at = time.monotonic() + self._retry_in

    def _hold(self, entries: list[Entry]) -> None:
        """Keep `entries` the store did not take: in the journal, else in memory."""
        journaled = 0
        for entry in entries:
            if entry.segment is None or self._journal is None:
                self._kept.append(entry)  # in memory only: written when a retry succeeds
            else:
                self._journal.hold(entry.segment)
                journaled += 1
        self._progress.written(journaled)  # durable in the journal: a flush may end

    def _next(self) -> list[Entry] | None:
        """The next batch (empty when a retry is due first); None once stopped."""
        wait = None if self._retry_at is None else max(self._retry_at - time.monotonic(), 0.0)
        try:
            first = self._queue.get(timeout=wait)
        except queue.Empty:
            return []
        if first is _STOP:
            return None
        if self._linger and not self._queue.empty():
            # Under load more are on their way: one transaction for all of them costs far
            # less than one each, and takes the GIL from the proxy far less often.
            time.sleep(self._linger)
        batch = [first]
        while True:  # whatever else is already queued goes into the same transaction
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is _STOP:
                self._queue.put(_STOP)
                break
            batch.append(more)
        return batch  # type: ignore[return-value]  # _STOP never gets here

    def _hold_from_now(self, error: Unavailable) -> None:
        self._held = True
        self._retry_in = RETRY_FIRST
        self._retry_at = time.monotonic() + self._retry_in
        where = self._journal.directory if self._journal is not None else "memory"
        log.error("forkpoint: the cassette takes no writes (%s): clients are still served, "
                  "their exchanges held in %s and retried", error, where)  # fmt: skip

    def _retry(self) -> None:
        """Write what is held again: what only memory holds, then the journal's held files."""
        try:
            refused = self._rewrite_kept()
            if self._journal is not None:
                refused += self._journal.rewrite_held(self._merge)
        except Unavailable:
            self._back_off(RETRY_MAX)
            return
        if self._held:
            self._held = False
            log.warning("forkpoint: the cassette takes writes again%s",
                        "" if refused else ": every held exchange is in it")  # fmt: skip
        if refused:
            self._back_off(REFUSED_MAX)
        else:
            self._retry_at = None

    def _rewrite_kept(self) -> int:
        """Write what only memory holds; returns how much the store refused again."""
        if not self._kept:
            return 0
        refused = {id(item) for item in self._writer.write([e.item for e in self._kept])}
        written = [entry for entry in self._kept if id(entry.item) not in refused]
        self._kept = [entry for entry in self._kept if id(entry.item) in refused]
        self._progress.written(len(written))
        return len(self._kept)

    def _merge(self, path: Path) -> int:
        """Write a held journal file's items again; returns how many the store refused."""
        return self._writer.merge(read_items(path)).refused

    def _back_off(self, most: float) -> None:
        self._retry_in = min(self._retry_in * 2, most)
        self._retry_at = time.monotonic() + self._retry_in
