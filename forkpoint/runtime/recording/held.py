"""What the journals of a store hold, read as a reader reads: without writing, locking or
deleting anything, while proxies go on appending to them and deleting them.

`JournalFiles` keeps what it read of each journal file and reads only what was appended since
(a file is only ever appended to, then deleted whole), so a reader that asks often (the web
view, every 250 ms) reads each byte once. A frame cut by a write under way, or by a process
killed inside one, ends what is read of its file until it is whole; a frame whose length
runs past the file's end (a damaged tail) stays unread, so a file is read up to its last whole
record. A record that does not unpickle, or is no record a recorder journals, is passed over
and counted (`unread`).

`Held` is one run's share, in journal order (files by their process's start, then segment
number), as `CassetteWriter.merge` would take it: the run, its exchanges and snapshots (a
ticket for a step while the store has not numbered it), its tickets, its first ending.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from forkpoint.models import Blob, Ending, Exchange, Run, Snapshot, Ticket
from forkpoint.runtime.recording.journal import HEADER, completed


class Spot(NamedTuple):
    """Where a journaled piece's record is: its file and frame, read again when asked for."""

    path: Path
    start: int
    end: int


Record = Exchange | Snapshot | Run | Ticket | Ending | tuple[str, Spot]


@dataclass
class Held:
    """One run as its journals hold it (see the module's docstring)."""

    run: Run | None = None
    exchanges: list[Exchange] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    tickets: list[int] = field(default_factory=list)  # in journal order, each once
    ending: Ending | None = None

    def ticket(self, number: int) -> None:
        if number not in self._seen:
            self._seen.add(number)
            self.tickets.append(number)

    def __post_init__(self) -> None:
        self._seen: set[int] = set()


class Holding(NamedTuple):
    """What the journals hold: per run, and the pieces by sha256."""

    runs: dict[str, Held]
    pieces: dict[str, Spot]
    unread: int


@dataclass
class _File:
    inode: int
    offset: int = 0  # up to the end of its last whole frame read
    records: list[Record] = field(default_factory=list)
    unread: int = 0


class JournalFiles:
    """The journal files in `directory`, read as they grow (see the module's docstring)."""

    def __init__(self, directory: Path | None):
        self.directory = directory
        self._files: dict[Path, _File] = {}

    def holding(self) -> Holding:
        """What the journals hold now. Not thread-safe: one caller at a time."""
        runs: dict[str, Held] = {}
        pieces: dict[str, Spot] = {}
        unread = 0
        for path in self._refreshed():
            known = self._files[path]
            unread += known.unread
            for record in known.records:
                if isinstance(record, tuple):
                    pieces.setdefault(*record)
                    continue
                held = runs.setdefault(record.run_id if not isinstance(record, Run)
                                       else record.id, Held())  # fmt: skip
                _add(held, record)
        return Holding(runs, pieces, unread)

    def _refreshed(self) -> list[Path]:
        """The files there now, in journal order, each read to its end."""
        found = _journal_files(self.directory)
        for gone in self._files.keys() - set(found):
            del self._files[gone]
        present = []
        for path in found:
            try:
                with path.open("rb") as file:
                    inode = os.fstat(file.fileno()).st_ino
                    known = self._files.get(path)
                    if known is None or known.inode != inode:
                        known = self._files[path] = _File(inode)
                    file.seek(known.offset)
                    self._read(path, known, file.read())
            except FileNotFoundError:  # committed and deleted meanwhile: in the store now
                self._files.pop(path, None)
                continue
            present.append(path)
        return present

    def _read(self, path: Path, known: _File, data: bytes) -> None:
        at = 0
        while at + HEADER.size <= len(data):
            (length,) = HEADER.unpack_from(data, at)
            end = at + HEADER.size + length
            if end > len(data):
                break  # cut (a write under way, a process killed in one) or damaged: stop
            start = known.offset + at
            record = self._record(data[at + HEADER.size : end], path, start, known.offset + end)
            if record is None:
                known.unread += 1
            else:
                known.records.append(record)
            at = end
        known.offset += at

    def _record(self, frame: bytes, path: Path, start: int, end: int) -> Record | None:
        try:
            item = pickle.loads(frame)
        except Exception:  # one unreadable record, not the rest
            return None
        if isinstance(item, Blob):  # its bytes stay in the file until asked for
            return item.digest, Spot(path, start, end)
        if not isinstance(item, Exchange | Snapshot | Run | Ticket | Ending):
            return None
        record = completed(item)
        return None if isinstance(record, Blob) else record  # (a Blob was taken above)


def piece_bytes(spot: Spot) -> bytes | None:
    """The bytes of the piece journaled at `spot`; None when its file is gone (merged)."""
    try:
        with spot.path.open("rb") as file:
            file.seek(spot.start + HEADER.size)
            frame = file.read(spot.end - spot.start - HEADER.size)
    except FileNotFoundError:
        return None
    try:
        item = pickle.loads(frame)
    except Exception:  # damaged since it was first read
        return None
    return item.data if isinstance(item, Blob) else None


def _add(held: Held, record: Exchange | Snapshot | Run | Ticket | Ending) -> None:
    if isinstance(record, Run):
        held.run = held.run or record
    elif isinstance(record, Ticket):
        held.ticket(record.ticket)
    elif isinstance(record, Ending):
        held.ending = held.ending or record
    else:
        if record.step < 0:  # its ticket, should its `Ticket` record be missing
            held.ticket(record.step)
        if isinstance(record, Exchange):
            held.exchanges.append(record)
        else:
            held.snapshots.append(record)


def _journal_files(directory: Path | None) -> list[Path]:
    """The journal files in `directory` in journal order: by process start (the hex time
    that begins each name), then segment number."""
    if directory is None or not directory.is_dir():
        return []

    def order(path: Path) -> tuple[str, int]:
        base, _, number = path.name.removesuffix(".journal").rpartition("-")
        return base, int(number) if number.isdigit() else -1

    return sorted(directory.glob("[!.]*.journal"), key=order)
