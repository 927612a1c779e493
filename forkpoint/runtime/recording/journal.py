"""The recorder's journal: every item handed to the recorder is appended to a file first, so an
exchange whose answer reached the agent survives a kill -9 of any forkpoint process.

The event loop pickles an item once, appends it (one `os.write`: durable to the operating
system, no fsync) and hands the same bytes to the writer; the writer marks it done once it is
committed, and a file whose items are all done is deleted; an item the store could not take (it
takes no writes, or refuses that item) is held, and written again from its file. Files live
where a later process finds them for the same store (`journal_dir`): beside a SQLite file, or
for PostgreSQL in the user's state directory keyed by the database's location. Each process
writes its own `BASE-N.journal` segments under a lock file `BASE.lock` it holds (flock) while
it lives (its writer process inherits it); a lock nobody holds is an orphan's, and
`merge_orphans` (run by every proxy as it starts and stops) commits what its segments hold that
the store lacks, then deletes them. Merging is idempotent: what the store holds is skipped,
never rewritten. A lock is made as `.BASE.lock`, locked, then renamed: mergers skip dot names,
and delete one unlocked and older than PARTIAL_AGE, which a process killed while making it
left.

Frames are an 8-byte big-endian length and a pickle of one `Run`, `Exchange`, `Snapshot` or
`Blob` (a piece of a body too large to hold, journaled before the bytes after it reach the
agent, and before the exchange that names it); a cut last frame (the process died inside a
write) is ignored.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pickle
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import NamedTuple

from forkpoint.cassettes.store import Store
from forkpoint.runtime.recording.owners import owner_of
from forkpoint.runtime.recording.writer import Item

log = logging.getLogger(__name__)

HEADER = struct.Struct("!Q")
# A segment this big is closed and a new one begun, so a file is deleted once its items are
# committed while the proxy goes on (bytes); one whose items are all committed already is
# closed from QUIET_BYTES, so a journal stays small while the writer keeps up.
SEGMENT_BYTES = 32 << 20
QUIET_BYTES = 1 << 20
# A partial lock (`.BASE.lock`) unlocked and older than this was left by a process killed while
# making its journal (s): a live maker locks it microseconds after opening it.
PARTIAL_AGE = 60.0


def journal_dir(store: Store) -> Path | None:
    """Where journals for `store` live; None for a store no later process can open (memory)."""
    path = getattr(store, "path", None)
    if isinstance(path, Path):
        return path.with_name(f"{path.name}.journals")
    location = getattr(store, "location", None)
    if isinstance(location, str) and "://" in location:
        state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        key = hashlib.sha256(location.encode()).hexdigest()[:16]
        return Path(state) / "forkpoint" / "journals" / key
    return None


@dataclass(eq=False)
class Segment:
    """One journal file: its items not committed yet (`pending`), those given up on for now
    because the store could not take them (`held`, retried from the file)."""

    path: Path
    fd: int
    size: int = 0
    pending: int = 0
    held: int = 0
    closed: bool = False


class Entry(NamedTuple):
    """An item handed to a recorder: its pickle, framed (None without a journal), and its
    segment."""

    item: Item
    payload: bytes | None = None
    segment: Segment | None = None


class Journal:
    """This process's journal in `directory` (see the module's docstring)."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._base = f"{time.time_ns():x}-{os.getpid()}"
        # Locked before it has its name, so no merger ever sees it unlocked.
        partial = directory / f".{self._base}.lock"
        self.lock_fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        self.lock_path = directory / f"{self._base}.lock"
        os.rename(partial, self.lock_path)
        self.owner = owner_of(self._base)  # what the runs this process opens name
        self._mutex = threading.Lock()
        self._rewriting = threading.Lock()
        self._segments: list[Segment] = []
        self._count = 0
        self._failed = False
        self._current = self._begin()

    @property
    def segments(self) -> list[Segment]:
        with self._mutex:
            return list(self._segments)

    def entry(self, item: Item) -> Entry:
        """Pickle `item` and append it; called on the event loop before the agent gets the
        last byte of its answer."""
        payload = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        payload = HEADER.pack(len(payload)) + payload  # framed: what the writer process reads
        segment = self._current
        try:
            _write_all(segment.fd, payload)
        except OSError as error:  # a full disk: the item is only in memory until committed
            if not self._failed:
                log.error("forkpoint: cannot write the journal %s (%s): exchanges are held in "
                          "memory until committed", segment.path, error)  # fmt: skip
                self._failed = True
            return Entry(item, payload, None)
        self._failed = False
        with self._mutex:
            quiet = segment.pending == 0
            segment.pending += 1
        segment.size += len(payload)
        if segment.size >= SEGMENT_BYTES or (quiet and segment.size >= QUIET_BYTES):
            self._rotate()
        return Entry(item, payload, segment)

    def done(self, segment: Segment | None, count: int = 1) -> None:
        """`count` items of `segment` are committed (any thread)."""
        if segment is None:
            return
        with self._mutex:
            segment.pending -= count
            if segment.closed and segment.pending <= 0:
                self._delete(segment)

    def hold(self, segment: Segment | None) -> None:
        """One item of `segment` could not be written: it stays in the file, to be retried."""
        if segment is not None:
            with self._mutex:
                segment.held += 1

    def held_segments(self) -> list[Segment]:
        with self._mutex:
            return [segment for segment in self._segments if segment.held]

    def release_held(self, segment: Segment, count: int) -> None:
        """`count` held items of `segment` were committed from its file."""
        with self._mutex:
            segment.held -= count
        self.done(segment, count)

    def rewrite_held(self, merge: Callable[[Path], int]) -> int:
        """Write the held items again from their files: `merge` writes a file's items and
        returns how many the store refused, which stay held. Returns how many were refused.
        One caller at a time (a writer thread and its fallback share a journal): two counting
        the same file's items as written would release them twice, and delete the file under
        one still refused."""
        refused = 0
        with self._rewriting:
            for segment in self.held_segments():
                count = segment.held
                left = merge(segment.path)  # may count items not held yet: fewer released
                self.release_held(segment, max(count - left, 0))
                refused += left
        return refused

    def close(self) -> bool:
        """Close the journal: deleted when everything in it is committed, else left for the
        next process to merge. Returns whether it was deleted."""
        with self._mutex:
            left = [segment for segment in self._segments if segment.pending > 0]
            for segment in list(self._segments):
                segment.closed = True
                if segment.pending <= 0:
                    self._delete(segment)
                else:
                    os.close(segment.fd)
        if not left:
            os.unlink(self.lock_path)
        os.close(self.lock_fd)  # the lock goes with it (and with the writer process's copy)
        if left:
            log.warning("forkpoint: %d items not committed are kept in the journal %s: the "
                        "next forkpoint to open this store merges them",
                        sum(s.pending for s in left), self.directory)  # fmt: skip
        return not left

    def _begin(self) -> Segment:
        path = self.directory / f"{self._base}-{self._count}.journal"
        self._count += 1
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        segment = Segment(path, fd)
        with self._mutex:
            self._segments.append(segment)
        return segment

    def _rotate(self) -> None:
        old, self._current = self._current, self._begin()
        with self._mutex:
            old.closed = True
            if old.pending <= 0:
                self._delete(old)

    def _delete(self, segment: Segment) -> None:
        """Under the mutex."""
        if segment in self._segments:
            self._segments.remove(segment)
            os.unlink(segment.path)
            os.close(segment.fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_items(path: Path, unread: list[str] | None = None) -> Iterator[Item]:
    """The items of one journal file, in order; a cut last frame is ignored, and a record that
    does not unpickle (another version wrote it, or it is damaged) is skipped, its error added
    to `unread`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    at = 0
    while at + HEADER.size <= len(data):
        (length,) = HEADER.unpack_from(data, at)
        end = at + HEADER.size + length
        if end > len(data):
            return
        try:
            item = pickle.loads(data[at + HEADER.size : end])
        except Exception as error:  # one unreadable record, not the rest
            if unread is not None:
                unread.append(f"{type(error).__name__}: {error}")
        else:
            yield completed(item)
        at = end


def completed(item: Item) -> Item:
    """`item` with the fields it lacks at their defaults: a journal an older forkpoint left
    holds records pickled before those fields existed (an exchange's `pieces`), which unpickle
    without them. Checked here, where old journals are read, not on every unpickle."""
    for spec in fields(item):
        if hasattr(item, spec.name):
            continue
        if spec.default is MISSING:  # a field with no default is in every pickle
            object.__setattr__(item, spec.name, spec.default_factory())  # type: ignore[operator]
        else:
            object.__setattr__(item, spec.name, spec.default)
    return item


def orphans(directory: Path | None) -> Iterator[tuple[Path, list[Path]]]:
    """Each journal in `directory` whose process is gone, locked by this process while the
    caller works on it: its lock file and its segments in order."""
    if directory is None or not directory.is_dir():
        return
    for lock in sorted(directory.glob("*.lock")):
        if lock.name.startswith("."):
            # a lock still being made (pathlib's glob matches dot names) is no orphan: found
            # unlocked in the moment before its maker locks it, it would be taken for a dead
            # process's and deleted, and its maker would run with no journal; one whose maker
            # was killed in that moment goes once that is proven
            _remove_if_dead(lock)
            continue
        with _unheld(lock) as fd:
            # unheld: its process is gone; gone meanwhile: merged and deleted by another one
            if fd is not None and lock.exists():
                yield lock, segments_of(lock)


def _remove_if_dead(partial: Path) -> None:
    """Delete `partial`, a lock still under its dot name, if its maker was killed making it:
    unlocked and older than PARTIAL_AGE, it has no maker between opening and locking it. Deleted
    under the lock, so no maker takes it meanwhile. No segment has its name yet."""
    with _unheld(partial) as fd:  # held: its maker is alive, about to rename it
        if fd is not None and time.time() - os.fstat(fd).st_mtime > PARTIAL_AGE:
            partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _unheld(lock: Path) -> Iterator[int | None]:
    """`lock` opened and locked by this process while the block runs; None when another
    process holds it, or it is gone."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield fd
    finally:
        os.close(fd)


def segments_of(lock: Path) -> list[Path]:
    base = lock.name.removesuffix(".lock")

    def number(path: Path) -> int:
        return int(path.name.removesuffix(".journal").rpartition("-")[2])

    return sorted(lock.parent.glob(f"{base}-*.journal"), key=number)


def all_segments(directory: Path | None) -> list[Path]:
    """Every journal file in `directory`, live or orphaned (for reports; never written)."""
    if directory is None or not directory.is_dir():
        return []
    return sorted(directory.glob("*.journal"))
