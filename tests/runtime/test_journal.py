"""The recorder's journal on real files: what a dead process left is merged once, never over
what the store holds; a live process's journal is left alone; a cut last frame is ignored."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.matching import MatchConfig
from forkpoint.models import Blob, Exchange, Piece, Run
from forkpoint.runtime.recording.journal import PARTIAL_AGE, Journal, journal_dir, read_items
from forkpoint.runtime.recording.journaled import held_exchanges, merge_orphans
from tests.builders import exchange


def died(journal: Journal) -> None:
    """As a kill -9 leaves it: files in place, the lock released."""
    for segment in journal.segments:
        os.close(segment.fd)
    os.close(journal.lock_fd)


def test_a_dead_process_journal_is_merged_once_and_never_over_what_is_stored(store):
    directory = journal_dir(store)
    assert directory == Path(f"{store.path}.journals")
    journal = Journal(directory)
    journal.entry(Run("r1"))
    for step in range(3):
        journal.entry(exchange(run_id="r1", step=step, response_body=b"journaled"))
    store.create_run(Run("r1"))
    store.add_exchanges([exchange(run_id="r1", step=1, response_body=b"stored")])
    assert held_exchanges(store)[0] == {"r1": 2}
    assert merge_orphans(store, MatchConfig()) == 0  # alive: its process may still write it
    died(journal)
    assert merge_orphans(store, MatchConfig()) == 2
    assert [e.response_body for e in store.exchanges("r1")] == [b"journaled", b"stored",
                                                                 b"journaled"]  # fmt: skip
    assert not list(directory.iterdir())  # merged, then deleted
    assert merge_orphans(store, MatchConfig()) == 0
    assert held_exchanges(store)[0] == {}


def test_pieces_a_dead_process_journaled_are_merged_with_their_exchange_once(store):
    parts = [b"a" * 70_000, b"b" * 70_000]
    blobs = [Blob(hashlib.sha256(part).hexdigest(), part) for part in parts]
    journal = Journal(journal_dir(store))
    journal.entry(Run("r1"))
    for blob in blobs:
        journal.entry(blob)
    pieces = tuple(Piece(b.digest, len(b.data), 2.0) for b in blobs)
    journal.entry(exchange(run_id="r1", step=0, response_body=b"held", pieces=pieces))
    died(journal)
    store.create_run(Run("r1"))
    store.add_pieces(blobs[:1])  # the writer had got as far as the first piece
    assert merge_orphans(store, MatchConfig()) == 1
    (merged,) = store.exchanges("r1")
    assert [store.piece(piece) for piece in merged.pieces] == parts
    assert merge_orphans(store, MatchConfig()) == 0


def test_an_exchange_an_older_forkpoint_journaled_reads_with_no_pieces(store, monkeypatch):
    journal = Journal(journal_dir(store))
    journal.entry(Run("r1"))
    old = exchange(run_id="r1", step=0)
    # pickled as a forkpoint from before `pieces` did: its slots by name, that one lacking
    monkeypatch.delattr(Exchange, "__reduce_ex__")
    del old.pieces
    journal.entry(old)
    monkeypatch.undo()
    [segment] = journal.segments
    (_, revived) = read_items(segment.path)
    assert isinstance(revived, Exchange) and revived.pieces == ()
    died(journal)
    assert merge_orphans(store, MatchConfig()) == 1
    assert store.exchanges("r1")[0].pieces == ()


def test_a_cut_last_frame_is_ignored(store):
    journal = Journal(journal_dir(store))
    journal.entry(Run("r1"))
    journal.entry(exchange(run_id="r1", step=0))
    [segment] = journal.segments
    os.write(segment.fd, b"\x00\x00\x00\x00\x00\x01\x00\x00partial")  # died inside a write
    assert [type(item).__name__ for item in read_items(segment.path)] == ["Run", "Exchange"]
    died(journal)
    assert merge_orphans(store, MatchConfig()) == 1


def test_a_journal_with_records_that_do_not_read_is_kept_not_deleted(store, caplog):
    """A record another forkpoint wrote (or a damaged one) is never thrown away: what reads is
    merged, and the journal stays, named in an error, for the version that wrote it."""
    journal = Journal(journal_dir(store))
    journal.entry(Run("r1"))
    journal.entry(exchange(run_id="r1", step=0))
    [segment] = journal.segments
    unreadable = b"\x80\x05not a pickle of this version"
    os.write(segment.fd, len(unreadable).to_bytes(8, "big") + unreadable)
    journal.entry(exchange(run_id="r1", step=1))
    died(journal)
    assert merge_orphans(store, MatchConfig()) == 2
    assert [e.step for e in store.exchanges("r1")] == [0, 1]
    assert segment.path.exists()
    assert f"{segment.path}" in caplog.text and "kept" in caplog.text
    caplog.clear()
    assert merge_orphans(store, MatchConfig()) == 0  # tried again, nothing written twice
    assert segment.path.exists() and f"{segment.path}" in caplog.text


def test_a_journal_whose_items_are_committed_is_deleted_on_close(store):
    journal = Journal(journal_dir(store))
    entry = journal.entry(Run("r1"))
    journal.done(entry.segment)
    assert journal.close()
    assert not list(journal.directory.iterdir())


def test_a_store_in_memory_has_no_journal_and_postgres_one_per_database(tmp_path, monkeypatch):
    assert journal_dir(MemoryStore()) is None
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))

    class Located:
        location = "postgresql://127.0.0.1/test"

    found = journal_dir(Located())  # type: ignore[arg-type]
    assert found is not None and found.parent == tmp_path / "forkpoint" / "journals"
    sqlite = SqliteStore(tmp_path / "a.db")
    assert journal_dir(sqlite) == tmp_path / "a.db.journals"
    sqlite.close()


def test_a_lock_still_being_made_is_no_orphan_and_a_merge_leaves_it(store, monkeypatch):
    # A journal's lock file is made under a dot name, then locked, then renamed. A merger
    # running in between found the dot file unlocked, took it for a dead process's, merged
    # and deleted it; the new journal's rename then failed, and that proxy ran with none
    # (a kill -9 trial lost exchanges its clients had received).
    directory = journal_dir(store)
    assert directory is not None
    real_flock = fcntl.flock
    merged: list[int] = []

    def flock_after_a_merge(fd: int, operation: int) -> None:
        if operation == fcntl.LOCK_EX and not merged:  # the new journal's own, not yet taken
            merged.append(merge_orphans(store, MatchConfig()))
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_merge)
    journal = Journal(directory)  # raised FileNotFoundError on its rename
    monkeypatch.setattr(fcntl, "flock", real_flock)
    assert merged == [0] and journal.lock_path.exists()
    journal.entry(Run("r1"))
    died(journal)
    assert merge_orphans(store, MatchConfig()) == 0 and not list(directory.iterdir())


def test_a_dead_process_journal_holding_what_the_store_refuses_is_kept_for_the_next_merge(
    store, monkeypatch, caplog
):
    journal = Journal(journal_dir(store))
    journal.entry(Run("r1"))
    for step in range(3):
        journal.entry(exchange(run_id="r1", step=step))
    [segment] = journal.segments
    died(journal)
    add_exchanges = store.add_exchanges

    def refusing_step_1(exchanges: Iterable[Exchange]) -> None:
        exchanges = list(exchanges)
        if any(e.step == 1 for e in exchanges):
            raise ValueError("step 1 is refused")
        add_exchanges(exchanges)

    monkeypatch.setattr(store, "add_exchanges", refusing_step_1)
    assert merge_orphans(store, MatchConfig()) == 2
    assert [e.step for e in store.exchanges("r1")] == [0, 2]
    assert segment.path.exists()  # the refused one is still in it, for the next merge
    assert caplog.text.count("ValueError: step 1 is refused") == 1
    assert not any(record.exc_info for record in caplog.records)
    monkeypatch.undo()
    assert merge_orphans(store, MatchConfig()) == 1
    assert [e.step for e in store.exchanges("r1")] == [0, 1, 2]
    assert not list(journal.directory.iterdir())


def test_a_partial_lock_left_by_a_process_killed_making_it_is_removed_once_provably_dead(store):
    # Killed between making `.BASE.lock` and renaming it, a process left the dot file, which
    # mergers skip (see above): it stayed forever. Unlocked and old, it is nobody's.
    directory = journal_dir(store)
    assert directory is not None
    directory.mkdir()
    long_ago = time.time() - 2 * PARTIAL_AGE
    dead, young, held = (directory / f".{n:x}-{n}.lock" for n in (1, 2, 3))
    for partial in (dead, young, held):
        partial.touch()
    for partial in (dead, held):
        os.utime(partial, (long_ago, long_ago))
    holder = os.open(held, os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # its maker, alive, about to rename it
    try:
        assert merge_orphans(store, MatchConfig()) == 0
        assert not dead.exists()
        assert young.exists()  # unlocked, but just made: its maker may be about to lock it
        assert held.exists()
    finally:
        os.close(holder)


def test_a_rewrite_of_held_items_releases_no_more_than_it_can_tell_were_written(store):
    """A held file's rewrite reads items not held yet too (still on their way to the writer),
    and the store's refusal does not say which: the file outlives every refused one."""
    journal = Journal(journal_dir(store))
    held, coming = (journal.entry(exchange(run_id="r1", step=step)) for step in range(2))
    journal.hold(held.segment)
    # as if `held` were refused again and `coming` written
    assert journal.rewrite_held(lambda path: 1) == 1
    journal.done(coming.segment)  # on its way, found written
    assert not journal.close()  # kept, for the next merge: `held` is in no store
