"""The recorder a proxy on a cassette file or a database uses: each item is journaled (see
`journal`) before its writer gets it, and what a dead process left in its journal is merged
into the store as this one starts and stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from pathlib import Path
from typing import Protocol

from forkpoint.cassettes.store import Store
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange
from forkpoint.runtime.recording.journal import (
    Entry,
    Journal,
    all_segments,
    journal_dir,
    orphans,
    read_items,
)
from forkpoint.runtime.recording.writer import CassetteWriter, Item, Unavailable

log = logging.getLogger(__name__)


class Inner(Protocol):
    def put(self, entry: Entry) -> None: ...

    def flush(self, timeout: float | None = 30.0) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Journaled:
    """A recorder that journals each item, then hands it (and its pickle) to `inner`."""

    def __init__(self, inner: Inner, journal: Journal, store: Store, match: MatchConfig):
        self.inner = inner
        self.journal = journal
        self._store = store
        self._match = match

    def submit(self, item: Item) -> None:
        self.inner.put(self.journal.entry(item))

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self.inner.flush(timeout)

    async def start(self) -> None:
        await asyncio.to_thread(merge_orphans, self._store, self._match)
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()
        self.journal.close()
        own = self.journal.lock_path
        await asyncio.to_thread(merge_orphans, self._store, self._match, skip=own)


def merge_orphans(store: Store, match: MatchConfig, *, skip: Path | None = None) -> int:
    """Commit what the journals of dead processes on `store` hold that it lacks, then delete
    them; returns how many exchanges were added. A store that takes no writes keeps them; a
    journal holding records that do not read, or that the store refuses, is kept too (merged
    as far as it goes), for the next merge."""
    writer = CassetteWriter(store, match)
    added = 0
    for lock, segments in orphans(journal_dir(store)):
        if lock == skip:
            continue
        kept = False  # a segment holds records that do not read, or that the store refused
        try:
            for segment in segments:
                unread: list[str] = []
                merged = writer.merge(read_items(segment, unread))
                added += merged.added
                kept = kept or merged.refused > 0  # the writer said it
                if unread:
                    kept = True
                    log.error("forkpoint: %d records of the journal %s do not read (%s): it is "
                              "kept, not deleted; the forkpoint that wrote it can merge them",
                              len(unread), segment, unread[0])  # fmt: skip
        except Unavailable as error:
            log.error("forkpoint: the journal %s stays unmerged: the cassette takes no writes "
                      "(%s)", lock.parent, error)  # fmt: skip
            continue
        if kept:
            continue
        for segment in segments:
            segment.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)
    if added:
        log.warning("forkpoint: %d exchanges a stopped forkpoint left in its journal are now "
                    "in the cassette", added)  # fmt: skip
    return added


def held_exchanges(store: Store) -> tuple[Counter[str], Path | None]:
    """Per run, the exchanges journals hold that the store lacks (held while it took no
    writes, or left by a killed process), and where those journals are. Reads only."""
    directory = journal_dir(store)
    found: dict[str, set[int]] = {}
    for segment in all_segments(directory):
        for item in read_items(segment):
            if isinstance(item, Exchange):
                found.setdefault(item.run_id, set()).add(item.step)
    held: Counter[str] = Counter()
    for run_id, steps in found.items():
        try:
            stored = set(store.response_keys(run_id))
        except CassetteError:
            stored = set()
        if left := len(steps - stored):
            held[run_id] = left
    return held, directory
