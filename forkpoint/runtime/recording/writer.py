"""Commits new runs, completed exchanges and snapshots to a store, in whichever thread or
process runs it.

Everything the live path leaves for later happens here: creating runs, summarizing bodies
(decompression, SSE parsing), fingerprinting, hashing and compressing blobs, one transaction
per batch. It imports no asyncio or aiohttp, so the writer process starts quickly.

A writer never dies of one item: an exchange it cannot read is recorded as its bytes (see
`engine.derive`), one the store refuses is logged and skipped. A store that cannot take writes
at all (locked past its busy timeout, a full disk, a database away) raises `Unavailable`: the
caller holds the batch in its journal and retries. Writing is idempotent: what the store holds
already (a run id, a step) is skipped, never rewritten.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence

from forkpoint.cassettes.store import Store
from forkpoint.engine.derive import derive
from forkpoint.engine.matching import MatchConfig
from forkpoint.errors import AlreadyRecorded, CassetteError
from forkpoint.models import Blob, Exchange, Run, Snapshot

log = logging.getLogger(__name__)

Item = Exchange | Snapshot | Run | Blob
# Pieces per transaction when merging a journal (each up to a few MiB).
PIECE_BATCH = 8
# Exchanges per transaction when merging a journal.
MERGE_BATCH = 256


class Unavailable(Exception):
    """The store cannot take writes now; what was not written is to be retried."""


class CassetteWriter:
    def __init__(self, store: Store, match: MatchConfig = MatchConfig()):
        self.store = store
        self.match = match
        self._refused: set[str] = set()  # kinds of refusal logged already

    def write(self, batch: Sequence[Item]) -> None:
        """Commit `batch`: its new runs, its pieces (before the exchanges that name them), its
        exchanges in one transaction, then each snapshot.
        Raises `Unavailable` when the store takes none of it; the batch may then be written
        again whole (what was committed of it is skipped)."""
        for run in (item for item in batch if isinstance(item, Run)):
            self._create_run(run)
        pieces = [item for item in batch if isinstance(item, Blob)]
        if pieces:
            self._write_pieces(pieces)
        exchanges = [item for item in batch if isinstance(item, Exchange)]
        if exchanges:
            self._write_exchanges(exchanges)
        for snapshot in (item for item in batch if isinstance(item, Snapshot)):
            self._write_snapshot(snapshot)

    def merge(self, items: Iterable[Item]) -> int:
        """Write what of `items` (a journal's) the store lacks; returns how many exchanges.
        Pieces go first, a few per transaction; one stored already is skipped (a blob)."""
        runs: list[Item] = []
        pieces: list[Item] = []
        exchanges: dict[tuple[str, int], Exchange] = {}
        snapshots: list[Item] = []
        for item in items:
            if isinstance(item, Exchange):
                exchanges.setdefault((item.run_id, item.step), item)
            elif isinstance(item, Blob):
                pieces.append(item)
            else:
                (runs if isinstance(item, Run) else snapshots).append(item)
        self.write(runs)
        for start in range(0, len(pieces), PIECE_BATCH):
            self.write(pieces[start : start + PIECE_BATCH])
        held: dict[str, set[int]] = {}
        for run_id in {run_id for run_id, _ in exchanges}:
            try:
                held[run_id] = set(self.store.response_keys(run_id))
            except CassetteError as error:
                raise Unavailable(str(error)) from error
        new = [e for (run_id, step), e in exchanges.items() if step not in held[run_id]]
        for start in range(0, len(new), MERGE_BATCH):
            self.write(new[start : start + MERGE_BATCH])
        self.write(snapshots)
        return len(new)

    def _write_exchanges(self, exchanges: list[Exchange]) -> None:
        for exchange in exchanges:
            derive(exchange, self.match, fell_back=functools.partial(self._unreadable, exchange))
        try:
            self.store.add_exchanges(exchanges)
            return
        except AlreadyRecorded:
            pass  # written before (a journal merged, a batch retried): the rest one by one
        except CassetteError as error:
            if len(exchanges) == 1:
                raise Unavailable(str(error)) from error
        except Exception as error:  # one exchange must not take its batch down
            self._log_once(type(error).__name__, "cassette write failed, writing one by one")
        for exchange in exchanges:
            self._write_one(exchange)

    def _write_one(self, exchange: Exchange) -> None:
        try:
            self.store.add_exchanges([exchange])
        except AlreadyRecorded:
            pass
        except CassetteError as error:
            raise Unavailable(str(error)) from error
        except Exception:
            log.exception("forkpoint: could not write run %s step %d; it is skipped",
                          exchange.run_id, exchange.step)  # fmt: skip

    def _write_pieces(self, pieces: list[Blob]) -> None:
        try:
            self.store.add_pieces(pieces)
        except CassetteError as error:
            raise Unavailable(str(error)) from error
        except Exception:
            log.exception("forkpoint: could not write %d pieces of a body", len(pieces))

    def _create_run(self, run: Run) -> None:
        try:
            self.store.create_run(run)
        except AlreadyRecorded:
            pass  # another proxy on the same cassette made it first, or a journal merged it
        except CassetteError as error:
            raise Unavailable(str(error)) from error
        except Exception:
            log.exception("forkpoint: could not create run %s", run.id)

    def _write_snapshot(self, snapshot: Snapshot) -> None:
        try:
            self.store.add_snapshot(snapshot)
        except CassetteError as error:
            raise Unavailable(str(error)) from error
        except Exception:
            log.exception("forkpoint: could not write the snapshot of run %s step %d (%s)",
                          snapshot.run_id, snapshot.step, snapshot.adapter)  # fmt: skip

    def _unreadable(self, exchange: Exchange, what: str) -> None:
        message = (f"run {exchange.run_id} step {exchange.step} is recorded as its bytes: "
                   f"forkpoint could not read {what} (said once)")  # fmt: skip
        self._log_once("unreadable", message, trace=False)

    def _log_once(self, kind: str, message: str, *, trace: bool = True) -> None:
        if kind not in self._refused:
            self._refused.add(kind)
            log.warning("forkpoint: %s", message, exc_info=trace)
