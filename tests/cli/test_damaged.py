"""Damaged cassettes: every reading command names the run and step a bad row belongs to, shows
what it can, and never prints a traceback; a cassette is never written by a reading command,
even one on a read-only filesystem; a file with a damaged page is refused by the writers too,
and left as it was."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite import check
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import CassetteError
from forkpoint.models import Run
from tests.cassettes.test_contract import conversation, exchange
from tests.runner import forkpoint

HURT_STEP_1 = "WHERE run_id='01HURT' AND step=1"
A_BLOB_OF_STEP_2_ONLY = (  # its question: only that step has it (the tail after it is shared)
    "WHERE id=(SELECT json_extract(request_body, '$[1]') FROM exchanges "
    "WHERE run_id='01HURT' AND step=2)"
)
DAMAGE = {
    "status": ("UPDATE runs SET status='bogus' WHERE id='01HURT'", "run 01HURT is damaged"),
    "labels": ("UPDATE runs SET labels='{' WHERE id='01HURT'", "run 01HURT is damaged"),
    "kind": (f"UPDATE exchanges SET kind='bogus' {HURT_STEP_1}", "run 01HURT step 1"),
    "origin": (f"UPDATE exchanges SET origin='bogus' {HURT_STEP_1}", "run 01HURT step 1"),
    "tool calls": (f"UPDATE exchanges SET tool_calls='[[' {HURT_STEP_1}", "run 01HURT step 1"),
    "headers": (f"UPDATE exchanges SET request_headers='{{' {HURT_STEP_1}", "run 01HURT step 1"),
    "method": (f"UPDATE exchanges SET method=NULL {HURT_STEP_1}", "run 01HURT step 1"),
    "manifest": (f"UPDATE exchanges SET request_body='nope' {HURT_STEP_1}", "run 01HURT step 1"),
    "codec": (f"UPDATE contents SET codec='lz4' {A_BLOB_OF_STEP_2_ONLY}", "run 01HURT step 2"),
    "zstd": (f"UPDATE contents SET codec='zstd', data=x'28b52ffd0011' {A_BLOB_OF_STEP_2_ONLY}",
             "run 01HURT step 2"),
    # compressed against blobs written after it: never written so, so not read so
    "base": (f"UPDATE contents SET codec='zstd-dict', base='[999999]' {A_BLOB_OF_STEP_2_ONLY}",
             "run 01HURT step 2"),
    "bytes": (f"UPDATE contents SET codec='raw', data=x'00' {A_BLOB_OF_STEP_2_ONLY}",
              "run 01HURT step 2"),
}  # fmt: skip
ROW_DAMAGE = {"kind", "origin", "tool calls", "headers", "method"}  # read even without bodies
BODY_DAMAGE = {"manifest", "codec", "zstd", "base", "bytes"}


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("damaged") / "good.db"
    store = SqliteStore(path)
    for run_id, name in (("01GOOD", "good"), ("01HURT", "hurt")):
        store.create_run(Run(run_id, name=name))
        bodies = [conversation(i + 1).replace(b"question", name.encode()) for i in range(3)]
        store.add_exchanges([exchange(i, body, run_id=run_id) for i, body in enumerate(bodies)])
    store.close()
    return path


def damaged(good: Path, tmp_path: Path, case: str) -> Path:
    path = tmp_path / "damaged.db"
    shutil.copy(good, path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(DAMAGE[case][0])
        conn.commit()
    return path


def no_traceback(ran) -> None:  # type: ignore[no-untyped-def]
    assert "Traceback" not in ran.stderr, ran.stderr


@pytest.mark.parametrize("case", list(DAMAGE))
def test_runs_lists_every_run_it_can_and_names_the_damage(good, tmp_path, case):
    path = damaged(good, tmp_path, case)
    listed = forkpoint("runs", cassette=path)
    no_traceback(listed)
    assert "01GOOD" in listed.stdout  # the rest is shown
    if case in ("status", "labels"):
        assert DAMAGE[case][1] in listed.stderr and listed.returncode == 1
    elif case in ROW_DAMAGE:
        assert "01HURT" in listed.stdout and DAMAGE[case][1] in listed.stderr
        assert listed.returncode == 1
    else:  # `runs` does not read bodies: nothing to see
        assert "01HURT" in listed.stdout and listed.returncode == 0


@pytest.mark.parametrize("case", sorted(ROW_DAMAGE))
def test_show_shows_the_steps_that_read_and_names_the_one_that_does_not(good, tmp_path, case):
    path = damaged(good, tmp_path, case)
    shown = forkpoint("show", "hurt", cassette=path)
    no_traceback(shown)
    assert shown.returncode == 1 and DAMAGE[case][1] in shown.stderr
    steps = [line.split()[0] for line in shown.stdout.splitlines()[2:] if line[:4].strip().isdigit()]
    assert steps == ["0", "2"]


@pytest.mark.parametrize("case", sorted(ROW_DAMAGE | BODY_DAMAGE))
def test_export_and_replay_refuse_a_damaged_run_naming_run_and_step(good, tmp_path, case):
    path = damaged(good, tmp_path, case)
    exported = forkpoint("export", "hurt", "--format", "jsonl", cassette=path)
    no_traceback(exported)
    assert exported.returncode == 2 and DAMAGE[case][1] in exported.stderr
    served = forkpoint("serve", "--port", "0", "--replay", "hurt", cassette=path, timeout=60)
    no_traceback(served)
    assert served.returncode == 2 and DAMAGE[case][1] in served.stderr
    fine = forkpoint("export", "good", "--format", "jsonl", cassette=path)
    assert fine.returncode == 0 and fine.stdout.count("\n") >= 3


def test_a_reading_command_never_writes_the_file(good, tmp_path):
    path = tmp_path / "c.db"
    shutil.copy(good, path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")  # a writer would switch it back to WAL
    before = path.read_bytes()
    for args in (["runs"], ["show", "good"], ["export", "good"], ["diff", "good", "hurt"],
                 ["snapshots", "good"], ["experiment", "list"]):  # fmt: skip
        ran = forkpoint(*args, cassette=path)
        assert ran.returncode == 0, (args, ran.stderr)
        assert path.read_bytes() == before, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]


def test_runs_on_an_empty_file_writes_nothing_into_it(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    listed = forkpoint("runs", cassette=empty)
    assert listed.returncode == 2 and "is empty" in listed.stderr
    assert empty.read_bytes() == b""


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[Path]:
    """`directory` where nothing can be written: a read-only bind mount for root (whom file
    modes do not stop), else files 0444 in a 0555 directory."""
    if os.geteuid() != 0:
        for path in directory.iterdir():
            path.chmod(0o444)
        directory.chmod(0o555)
        try:
            yield directory
        finally:
            directory.chmod(0o755)
        return
    mount = directory.with_name(directory.name + "-ro")
    mount.mkdir()
    subprocess.run(["mount", "--bind", str(directory), str(mount)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_cassette_on_a_read_only_filesystem_can_be_read(good, tmp_path, journal):
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(good, folder / "c.db")
    if journal == "delete":
        with contextlib.closing(sqlite3.connect(folder / "c.db")) as conn:
            conn.execute("PRAGMA journal_mode=DELETE")
    with read_only(folder) as where:
        cassette = where / "c.db"
        for args in (["runs"], ["show", "good"], ["export", "good"]):
            ran = forkpoint(*args, cassette=cassette)
            no_traceback(ran)
            assert ran.returncode == 0, (args, ran.stderr)
            assert "01GOOD" in ran.stdout or "good" in ran.stdout
        exported = tmp_path / "good.yaml"
        exported.write_text(forkpoint("export", "good", cassette=good).stdout)
        written = forkpoint("import", exported, cassette=cassette)  # a write: refused, clearly
        no_traceback(written)
        assert written.returncode == 2 and "c.db" in written.stderr


# A damaged page (issue 25.12): the readers refuse the file, and so must the writers, before
# they write a byte into it. Before, `record`, `serve` and `import` wrote runs no one could read.

MALFORMED = "is not a readable SQLite cassette (database disk image is malformed)"


@pytest.fixture(scope="module")
def torn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cassette of 30 runs with one page of the exchanges' table, in its middle, overwritten
    with noise: what a bad sector or a torn copy leaves."""
    path = tmp_path_factory.mktemp("torn") / "torn.db"
    store = SqliteStore(path)
    for number in range(30):
        run_id = f"01TORN{number:04d}"
        store.create_run(Run(run_id, name=f"run-{number}"))
        bodies = [conversation(step + 1) + os.urandom(100).hex().encode() for step in range(20)]
        store.add_exchanges([exchange(s, body, run_id=run_id) for s, body in enumerate(bodies)])
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        leaves = conn.execute(
            "SELECT pageno FROM dbstat WHERE name='exchanges' AND pagetype='leaf' ORDER BY pageno"
        ).fetchall()
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    page = leaves[len(leaves) // 2][0]
    with path.open("r+b") as file:
        file.seek((page - 1) * size)
        file.write(random.Random(25).randbytes(size))
    return path


def test_a_damaged_page_is_refused_by_readers_and_writers_alike(torn, tmp_path):
    path = tmp_path / "torn.db"
    shutil.copy(torn, path)
    before = path.read_bytes()
    listed = forkpoint("runs", cassette=path)
    assert listed.returncode == 2 and MALFORMED in listed.stderr  # the readers, as before
    imported = tmp_path / "one.jsonl"
    imported.write_text('{"forkpoint": 1, "run": {"name": "new"}}\n'
                        '{"exchange": {"method": "GET", "route": "/x", "status": 200}}\n')  # fmt: skip
    for args in (
        ["import", imported],
        ["record", "--", sys.executable, "-c", "print('the agent ran')"],
        ["serve", "--port", "0"],
    ):
        ran = forkpoint(*args, cassette=path, timeout=60)
        no_traceback(ran)
        assert ran.returncode == 2 and f"{path} {MALFORMED}" in ran.stderr, (args, ran.stderr)
        assert "the agent ran" not in ran.stdout  # refused before its agent started
        assert path.read_bytes() == before, args


def test_a_large_damaged_file_is_checked_while_the_writer_starts_and_never_written(
    torn, good, tmp_path, monkeypatch
):
    """Past CHECK_AT_OPEN the check runs on a thread: the store opens at once, and its first
    write waits for the answer, then refuses; the file stays as it was."""
    path = tmp_path / "torn.db"
    shutil.copy(torn, path)
    before = path.read_bytes()
    monkeypatch.setattr(check, "CHECK_AT_OPEN", 0)
    opened, checking = threading.Event(), check.FileCheck._run

    def after_open(self: check.FileCheck, conn: sqlite3.Connection) -> None:  # takes longer
        opened.wait(10)
        checking(self, conn)

    monkeypatch.setattr(check.FileCheck, "_run", after_open)
    store = SqliteStore(path)
    opened.set()
    try:
        with pytest.raises(CassetteError, match=re.escape(MALFORMED)):
            store.create_run(Run("01NEW", name="new"))
        with pytest.raises(CassetteError, match=re.escape(MALFORMED)):
            store.list_runs()  # once it knows, it refuses reads too
    finally:
        store.close()
    assert path.read_bytes() == before
    fine = tmp_path / "fine.db"
    shutil.copy(good, fine)
    store = SqliteStore(fine)
    try:
        store.create_run(Run("01NEW", name="new"))  # a sound file: written after the check
        assert [run.id for run in store.list_runs()][-1] == "01NEW"
    finally:
        store.close()
