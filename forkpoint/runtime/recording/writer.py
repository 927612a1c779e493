"""Commits new runs, completed exchanges and snapshots to a store, in whichever thread or
process runs it.

Everything the live path leaves for later happens here: creating runs, summarizing bodies
(decompression, SSE parsing), fingerprinting, hashing and compressing blobs, one transaction
per batch. It imports no asyncio or aiohttp, so the writer process starts quickly.

A writer never dies of one item, nor drops one: an exchange it cannot read is recorded as its
bytes (see `engine.derive`); one the store refuses with an error that is no `CassetteError` (a
value it cannot take, a bug) is left out of the commit, logged in one line, and handed back:
the caller keeps it in its journal, and a later try or the next merge writes it. A store that
cannot take writes at all (locked past its busy timeout, a full disk, a database away) raises
`Unavailable`: the caller holds the batch in its journal and retries. Writing is idempotent:
what the store holds already (a run id, a step) is skipped, never rewritten.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, TypeVar

from forkpoint.cassettes.store import Store
from forkpoint.engine.derive import derive
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import AlreadyRecorded, CassetteError
from forkpoint.models import Blob, Ending, Exchange, Run, Snapshot, Ticket

log = logging.getLogger(__name__)

Item = Exchange | Snapshot | Run | Blob | Ticket | Ending
Recorded = TypeVar("Recorded", Exchange, Snapshot, Ending)  # an item of a run
# Pieces per transaction when merging a journal (each up to a few MiB).
PIECE_BATCH = 8
# Exchanges per transaction when merging a journal.
MERGE_BATCH = 256
# What becomes of an item the store refuses, as the log says it.
KEPT = "it stays in the journal and is tried again"


class Unavailable(Exception):
    """The store cannot take writes now; what was not written is to be retried."""


class Merged(NamedTuple):
    """What a merge wrote: the exchanges added, and how many items the store refused."""

    added: int
    refused: int


class CassetteWriter:
    """Writes items to `store`. `kept` says what becomes of an item the store refuses, in the
    one line logged for each kind of refusal; None logs nothing (the writer process, whose
    proxy writes the item again and says it)."""

    def __init__(
        self, store: Store, match: MatchConfig = MatchConfig(), *, kept: str | None = KEPT
    ):
        self.store = store
        self.match = match
        self.kept = kept
        self._logged: set[str] = set()  # kinds of trouble logged already
        self._unmade: set[str] = set()  # runs the store refused to create

    def write(self, batch: Sequence[Item]) -> list[Item]:
        """Commit `batch`: its new runs, its pieces (before the exchanges that name them), its
        exchanges in one transaction, then each snapshot. Returns what the store refused, to
        be kept and written again; the rest is committed.
        Raises `Unavailable` when the store takes none of it; the batch may then be written
        again whole (what was committed of it is skipped)."""
        refused: list[Item] = []
        for run in (item for item in batch if isinstance(item, Run)):
            if self._stored(f"run {run.id}", functools.partial(self.store.create_run, run)):
                self._unmade.discard(run.id)
            else:
                self._unmade.add(run.id)
                refused.append(run)
        refused += self._numbered(batch)
        pieces = [item for item in batch if isinstance(item, Blob)]
        if pieces:
            add = functools.partial(self.store.add_pieces, pieces)
            if not self._stored(f"{len(pieces)} pieces of a body", add):
                refused += pieces
        exchanges, waiting = self._by_run(
            [item for item in batch if isinstance(item, Exchange) and item.step >= 0]
        )
        refused += waiting
        if exchanges:
            refused += self._write_exchanges(exchanges)
        snapshots, waiting = self._by_run(
            [item for item in batch if isinstance(item, Snapshot) and item.step >= 0]
        )
        refused += waiting
        for snapshot in snapshots:
            what = f"the {snapshot.adapter} snapshot of run {snapshot.run_id} step {snapshot.step}"
            if not self._stored(what, functools.partial(self.store.add_snapshot, snapshot)):
                refused.append(snapshot)
        endings, waiting = self._by_run([item for item in batch if isinstance(item, Ending)])
        refused += waiting
        for ending in endings:
            if not self._stored(f"the end of run {ending.run_id}",
                                functools.partial(self.store.end_run, ending)):  # fmt: skip
                refused.append(ending)
        return refused

    def _numbered(self, batch: Sequence[Item]) -> list[Item]:
        """Give the batch's tickets their steps (`models.Ticket`), in the order they came, and
        put them in place of the provisional steps its exchanges and snapshots carry. What
        belongs to a run the store could not number for is refused, to be tried again."""
        tickets: dict[str, list[int]] = {}
        for item in batch:
            if isinstance(item, Ticket):
                tickets.setdefault(item.run_id, []).append(item.ticket)
            elif isinstance(item, Exchange | Snapshot) and item.step < 0:
                tickets.setdefault(item.run_id, []).append(item.step)
        if not tickets:
            return []
        steps: dict[tuple[str, int], int] = {}

        def number(run_id: str, numbers: list[int]) -> None:
            for ticket, step in self.store.number(run_id, numbers).items():
                steps[run_id, ticket] = step

        for run_id, numbers in tickets.items():
            if run_id not in self._unmade:
                self._stored(f"the steps of run {run_id}",
                             functools.partial(number, run_id, numbers))  # fmt: skip
        left: list[Item] = []  # not numbered: kept with their tickets, to be tried again
        for item in batch:
            if isinstance(item, Exchange | Snapshot) and item.step < 0:
                step = steps.get((item.run_id, item.step))
                if step is None:
                    left.append(item)
                else:
                    item.step = step
            elif isinstance(item, Ticket) and (item.run_id, item.ticket) not in steps:
                left.append(item)
        return left

    def merge(self, items: Iterable[Item]) -> Merged:
        """Write what of `items` (a journal's) the store lacks.
        Pieces go first, a few per transaction; one stored already is skipped (a blob)."""
        items = list(items)
        refused = self.write([item for item in items if isinstance(item, Run)])
        refused += self._numbered(items)  # in the journal's order: the order they came
        pieces: list[Item] = []
        exchanges: dict[tuple[str, int], Exchange] = {}
        snapshots: list[Item] = []  # and the runs' ends, after everything else
        for item in items:
            if isinstance(item, Exchange) and item.step >= 0:
                exchanges.setdefault((item.run_id, item.step), item)
            elif isinstance(item, Blob):
                pieces.append(item)
            elif isinstance(item, Ending) or (isinstance(item, Snapshot) and item.step >= 0):
                snapshots.append(item)
        for start in range(0, len(pieces), PIECE_BATCH):
            refused += self.write(pieces[start : start + PIECE_BATCH])
        held: dict[str, set[int]] = {}
        for run_id in {run_id for run_id, _ in exchanges}:
            try:
                held[run_id] = set(self.store.response_keys(run_id))
            except CassetteError as error:
                raise Unavailable(str(error)) from error
        new = [e for (run_id, step), e in exchanges.items() if step not in held[run_id]]
        added = len(new)
        for start in range(0, len(new), MERGE_BATCH):
            left = self.write(new[start : start + MERGE_BATCH])
            added -= sum(isinstance(item, Exchange) for item in left)
            refused += left
        refused += self.write(snapshots)
        return Merged(added, len(refused))

    def _by_run(self, items: list[Recorded]) -> tuple[list[Recorded], list[Item]]:
        """`items` whose run the store made, and those whose run it refused to create: these
        are refused with it, untried (they would find no run, which reads as a store taking no
        writes, and hold up every other run)."""
        if not self._unmade:
            return items, []
        waiting: list[Item] = [item for item in items if item.run_id in self._unmade]
        return [item for item in items if item.run_id not in self._unmade], waiting

    def _write_exchanges(self, exchanges: list[Exchange]) -> list[Item]:
        for exchange in exchanges:
            derive(exchange, self.match, fell_back=functools.partial(self._unreadable, exchange))
        if len(exchanges) > 1:
            try:
                self.store.add_exchanges(exchanges)
                return []
            except Exception:  # one exchange must not take its batch down: one by one
                pass
        refused: list[Item] = []
        for exchange in exchanges:
            one = functools.partial(self.store.add_exchanges, [exchange])
            if not self._stored(f"run {exchange.run_id} step {exchange.step}", one):
                refused.append(exchange)
        return refused

    def _stored(self, what: str, write: Callable[[], None]) -> bool:
        """Call `write`; False when the store refused it (said once for each kind of error).
        Raises `Unavailable` when the store takes no writes."""
        try:
            write()
        except AlreadyRecorded:
            pass  # written before: a journal merged, a batch retried, another proxy first
        except CassetteError as error:
            raise Unavailable(str(error)) from error
        except Exception as error:  # a value the store cannot take, or a bug: kept, not lost
            if self.kept is not None:
                name, said = type(error).__name__, " ".join(str(error).split())  # one line
                message = f"could not write {what} ({name}: {said}): {self.kept} (said once)"
                self._log_once(f"refused {name}", message, logging.ERROR)
            return False
        return True

    def _unreadable(self, exchange: Exchange, what: str) -> None:
        message = (f"run {exchange.run_id} step {exchange.step} is recorded as its bytes: "
                   f"forkpoint could not read {what} (said once)")  # fmt: skip
        self._log_once("unreadable", message)

    def _log_once(self, kind: str, message: str, level: int = logging.WARNING) -> None:
        if kind not in self._logged:
            self._logged.add(kind)
            log.log(level, "forkpoint: %s", message)
