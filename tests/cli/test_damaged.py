"""Damaged cassettes: every reading command names the run and step a bad row belongs to, shows
what it can, and never prints a traceback; a cassette is never written by a reading command,
even one on a read-only filesystem."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Run
from tests.cassettes.test_contract import conversation, exchange
from tests.runner import forkpoint

HURT_STEP_1 = "WHERE run_id='01HURT' AND step=1"
A_BLOB_OF_STEP_2_ONLY = (  # its question: only that step has it (the tail after it is shared)
    "WHERE hash=(SELECT json_extract(request_body, '$.add[0]') FROM exchanges "
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
    "codec": (f"UPDATE blobs SET codec='lz4' {A_BLOB_OF_STEP_2_ONLY}", "run 01HURT step 2"),
    "zstd": (f"UPDATE blobs SET codec='zstd', data=x'28b52ffd0011' {A_BLOB_OF_STEP_2_ONLY}",
             "run 01HURT step 2"),
}  # fmt: skip
ROW_DAMAGE = {"kind", "origin", "tool calls", "headers", "method"}  # read even without bodies
BODY_DAMAGE = {"manifest", "codec", "zstd"}


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
