"""Readers over a store and its journals (`Unmerged`), on real files, a real SQLite cassette
and real processes: what a journal holds is shown as if merged, nothing is written, and a run
whose process is gone is shown crashed, only when that is known."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.transfer import dump_run
from forkpoint.errors import CassetteError
from forkpoint.models import Blob, Ending, Exchange, Piece, Run, RunStatus, Snapshot, Ticket
from forkpoint.runtime.recording.journal import HEADER, Journal, journal_dir
from forkpoint.runtime.recording.owners import Owner, alive, owner_of, this_boot
from forkpoint.runtime.recording.unmerged import Unmerged
from tests.builders import exchange


def died(journal: Journal) -> None:
    """As a kill -9 leaves it: files in place, the lock released."""
    for segment in journal.segments:
        os.close(segment.fd)
    os.close(journal.lock_fd)


def chat(step: int, text: str, run_id: str = "r1") -> Exchange:
    body = f'{{"model":"gpt-4o","choices":[{{"message":{{"content":"{text}"}}}}]}}'.encode()
    return exchange(run_id=run_id, step=step, response_body=body)


def files(path: Path) -> dict[str, str]:
    """The cassette, its WAL and its journals, by name, with their bytes' hash. Not its -shm:
    SQLite's shared-memory index of the WAL, which every reader's read marks change."""
    found = [p for p in path.parent.glob(f"{path.name}*") if p.is_file()]
    found += [p for p in journal_dir_of(path).glob("*") if p.is_file()]
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in found
        if not p.name.endswith("-shm")
    }


def journal_dir_of(path: Path) -> Path:
    return path.with_name(f"{path.name}.journals")


def reader(path: Path) -> Unmerged:
    return Unmerged(SqliteStore(path, create=False, read_only=True))


def test_a_killed_writers_journal_is_shown_as_if_merged_and_nothing_is_written(store):
    journal = Journal(journal_dir(store))
    run = Run("r1", name="killed", owner=journal.owner)
    journal.entry(run)
    for step in range(5):
        journal.entry(chat(step, f"answer {step}"))
    store.create_run(run)  # what its writer had committed when it was killed
    store.add_exchanges([chat(step, f"answer {step}") for step in range(2)])
    died(journal)
    before = files(store.path)
    view = reader(store.path)
    try:
        shown = view.list_runs()
        exchanges, journaled = view.read("r1")
        assert [(r.id, r.status) for r in shown] == [("r1", RunStatus.CRASHED)]
        assert "its forkpoint process is gone" in (shown[0].error or "")
        assert "merged by the next forkpoint" in (shown[0].error or "")
        assert [e.step for e in exchanges] == [0, 1, 2, 3, 4]
        assert journaled == {2: False, 3: False, 4: False}
        # the writer's summary, as merged: the model the body names
        assert [e.summary.model for e in exchanges[2:] if e.summary] == ["gpt-4o"] * 3
        assert all(e.fingerprint for e in exchanges[2:])
        assert view.step_count("r1") == 5 and view.next_step("r1") == 5
        assert set(view.response_keys("r1")) == {0, 1, 2, 3, 4}
        assert view.find_run("killed").status is RunStatus.CRASHED
        assert "answer 4" in dump_run(view, "r1", fmt="jsonl")
    finally:
        view.close()
    assert files(store.path) == before  # a read never writes
    assert store.get_run("r1").status is RunStatus.RUNNING  # derived, not written
    assert store.step_count("r1") == 2


def test_a_run_only_in_a_journal_is_listed_found_and_read_with_its_pieces(store):
    journal = Journal(journal_dir(store))
    store.create_run(Run("older"))
    data = os.urandom(1000)
    digest = hashlib.sha256(data).hexdigest()
    journal.entry(Run("r1", name="new", owner=journal.owner))
    journal.entry(Blob(digest, data))
    journal.entry(chat(0, "x"))
    named = exchange(run_id="r1", step=1, pieces=(Piece(digest, len(data), 3.0),))
    journal.entry(named)
    journal.entry(Snapshot("r1", 1, "state", data=b"memory"))
    died(journal)
    view = reader(store.path)
    try:
        assert [r.id for r in view.list_runs()] == ["older", "r1"]
        assert [r.id for r in view.list_runs(newest=1)] == ["r1"]
        assert view.find_run("new").id == "r1" and view.get_run("r1").name == "new"
        assert view.piece(Piece(digest, len(data), 3.0)) == data
        with pytest.raises(CassetteError):
            view.piece(Piece("0" * 64, 3, 0.0))
        assert [(s.step, s.data) for s in view.snapshots("r1", data=True)] == [(1, b"memory")]
        assert [s.adapter for s in view.latest_snapshots("r1")] == ["state"]
        joined = dump_run(view, "r1", fmt="har")  # the export joins the journaled piece
        assert str(len(data) + len(b'{"ok":1}')) in joined
    finally:
        view.close()


def test_tickets_take_the_stored_step_else_a_provisional_one_in_journal_order(store):
    journal = Journal(journal_dir(store))
    store.create_run(Run("shared"))
    store.add_exchanges([chat(step, "own", "shared") for step in range(2)])
    for ticket in (-5, -6, -7, -8):
        journal.entry(Ticket("shared", ticket))
    for ticket in (-5, -6, -7):  # -8 never got its answer: a gap, as a merge leaves it
        journal.entry(chat(ticket, f"ticket {ticket}", "shared"))
    journal.entry(Snapshot("shared", -7, "state", data=b"s"))
    died(journal)
    # the writer numbered -5 and -6 and stored -5's exchange before it was killed
    assert store.number("shared", [-5, -6]) == {-5: 2, -6: 3}
    store.add_exchanges([chat(2, "ticket -5", "shared")])
    view = reader(store.path)
    try:
        exchanges, journaled = view.read("shared")
        assert [(e.step, e.response_body.decode().split('"')[-2]) for e in exchanges] == [
            (0, "own"), (1, "own"), (2, "ticket -5"), (3, "ticket -6"), (4, "ticket -7"),
        ]  # fmt: skip
        assert journaled == {3: False, 4: True}  # -6 was numbered by the store, -7 is not
        assert [e.step for e in view.exchanges("shared", bodies=False)] == [0, 1, 2, 3, 4]
        assert [s.step for s in view.snapshots("shared")] == [4]
        assert view.next_step("shared") == 6  # after -8's step too
        assert view.shown(view.get_run("shared")).status is RunStatus.RUNNING  # no owner
    finally:
        view.close()
    assert store.numbered("shared") == {-5: 2, -6: 3}  # nothing numbered by reading


def test_a_journal_is_read_up_to_its_last_whole_record(store):
    journal = Journal(journal_dir(store))
    store.create_run(Run("r1"))
    journal.entry(chat(0, "first"))
    garbage = b"not a pickle"
    os.write(journal.segments[0].fd, HEADER.pack(len(garbage)) + garbage)  # a damaged record
    journal.entry(chat(1, "second"))
    os.write(journal.segments[0].fd, HEADER.pack(10**9) + b"\x80\x05cut")  # a torn tail
    died(journal)
    view = reader(store.path)
    try:
        assert [e.step for e in view.exchanges("r1")] == [0, 1]
        assert view.holding().unread == 1
        with journal.segments[0].path.open("ab") as file:  # appended later: read on
            file.write(b"more")
        assert [e.step for e in view.exchanges("r1")] == [0, 1]
    finally:
        view.close()


def test_an_ending_in_the_journal_ends_the_run_as_shown(store):
    journal = Journal(journal_dir(store))
    store.create_run(Run("r1", owner=journal.owner))
    journal.entry(Ending("r1", RunStatus.FINISHED, ended_at=5.0))
    journal.close()  # a store that took no writes: its items kept, its process gone
    view = reader(store.path)
    try:
        shown = view.get_run("r1")
        assert (shown.status, shown.ended_at) == (RunStatus.FINISHED, 5.0)
    finally:
        view.close()


LIVE = """
import os, signal, sys
from pathlib import Path
from forkpoint.runtime.recording.journal import Journal
journal = Journal(Path(sys.argv[1]))
print(journal.owner, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.readline()
"""


def test_an_owner_is_alive_while_it_holds_its_journal_and_gone_once_killed(tmp_path):
    directory = tmp_path / "journals"
    live = subprocess.Popen(
        [sys.executable, "-c", LIVE, str(directory), "wait"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert live.stdout is not None and live.stdin is not None
    owner = live.stdout.readline().strip()
    try:
        assert alive(owner, directory) is True
        assert alive(owner, directory) is True  # asking did not take the lock from it
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait(10)
        live.stdout.close()
        live.stdin.close()
    assert alive(owner, directory) is False  # its lock is left, unheld
    killed = subprocess.run(
        [sys.executable, "-c", LIVE, str(directory), "kill"], capture_output=True, text=True
    )
    gone = killed.stdout.strip()
    assert killed.returncode == -signal.SIGKILL
    for lock in directory.glob("*.lock"):  # merged by another proxy: the pid decides
        lock.unlink()
    assert alive(gone, directory) is False
    assert alive(gone, None) is False


def test_an_owner_that_cannot_be_told_about_is_not_called_gone(tmp_path):
    here = Owner(socket.gethostname(), this_boot(), f"18a-{os.getpid()}")
    assert alive(str(here), tmp_path) is True  # no lock to see, its process by that id lives
    elsewhere = Owner("another-host", this_boot(), "18a-999999999")
    assert alive(str(elsewhere), tmp_path) is None
    assert alive(None, tmp_path) is None and alive("nonsense", tmp_path) is None
    if this_boot():  # a boot since: every process of before is gone
        rebooted = Owner(socket.gethostname(), "another-boot", f"18a-{os.getpid()}")
        assert alive(str(rebooted), tmp_path) is False
    assert owner_of("18a-1").startswith(socket.gethostname() + "/")
