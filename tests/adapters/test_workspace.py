"""The workspace adapter restores a directory exactly: contents, deletions, modes."""

from __future__ import annotations

import os
import stat

import pytest

from forkpoint.adapters.protocol import State
from forkpoint.adapters.workspace import WorkspaceAdapter
from forkpoint.models import Run, Snapshot


def test_restore_undoes_added_changed_and_deleted_files_and_modes(tmp_path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print('v1')")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "data.bin").write_bytes(bytes(range(256)))
    adapter = WorkspaceAdapter(root)
    snapshot = adapter.pull_now()

    (root / "src" / "main.py").write_text("print('v2')")  # changed
    (root / "data.bin").unlink()  # deleted
    (root / "new" / "deep").mkdir(parents=True)
    (root / "new" / "deep" / "added.txt").write_text("added")  # added, in new folders
    os.chmod(root / "run.sh", 0o600)  # mode changed

    adapter.restore_now(snapshot)
    assert (root / "src" / "main.py").read_text() == "print('v1')"
    assert (root / "data.bin").read_bytes() == bytes(range(256))
    assert not (root / "new").exists()
    assert stat.S_IMODE((root / "run.sh").stat().st_mode) == 0o755
    assert adapter.pull_now() == snapshot


def test_restore_into_an_empty_or_missing_directory(tmp_path):
    source = tmp_path / "a"
    source.mkdir()
    (source / "f.txt").write_text("x")
    state = WorkspaceAdapter(source).pull_now()
    target = WorkspaceAdapter(tmp_path / "b" / "c")
    target.restore_now(state)
    assert (tmp_path / "b" / "c" / "f.txt").read_text() == "x"


def test_garbage_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a workspace snapshot"):
        WorkspaceAdapter(tmp_path).restore_now(State("application/octet-stream", b"\x00garbage"))


def test_unchanged_files_are_stored_once_across_snapshots(store, tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    big = os.urandom(200_000)
    (root / "big.bin").write_bytes(big)
    adapter = WorkspaceAdapter(root)
    store.create_run(Run("r1"))
    for step in range(5):
        (root / f"small-{step}.txt").write_text(f"step {step}")
        state = adapter.pull_now()
        store.add_snapshot(Snapshot("r1", step, "workspace", state.content_type, state.data))
    stored = store.query("SELECT sum(length(data)) FROM blobs")[0][0]
    assert stored < 2 * len(big)  # five snapshots, the 200 kB file stored once
    [latest] = store.latest_snapshots("r1")
    assert latest.step == 4 and latest.data == adapter.pull_now().data
