"""The workspace adapter restores a directory exactly (contents, deletions, modes), and never\noutside it."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.protocol import State
from forkpoint.adapters.workspace import CONTENT_TYPE, WorkspaceAdapter
from forkpoint.cassettes import blobs
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Run, RunStatus, Snapshot
from tests.builders import exchange
from tests.runner import forkpoint


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
    stored = store.query("SELECT sum(length(data)) FROM contents")[0][0]
    assert stored < 2 * len(big)  # five snapshots, the 200 kB file stored once
    [latest] = store.latest_snapshots("r1")
    assert latest.step == 4 and latest.data == adapter.pull_now().data


# --- a snapshot never writes outside its workspace (a cassette may come from anyone) ---


def planted(entries: dict[str, bytes], *, modes: dict[str, object] | None = None) -> State:
    """A workspace snapshot as a stranger could write one: any paths, any modes."""
    manifest = {
        path: {"mode": (modes or {}).get(path, 0o644), "size": len(data), "sha256": "0" * 64}
        for path, data in entries.items()
    }
    return State(CONTENT_TYPE, blobs.frame([orjson.dumps(manifest), *entries.values()]))


def escaping_entries(outside: Path) -> list[str]:
    return [
        "../escaped.txt",
        str(outside / "escaped.txt"),  # absolute
        "sub/../../escaped.txt",
        "sub/../../../escaped.txt",
        "..",
        "a/\x00/b",
        "..\\escaped.txt",
        "C:\\escaped.txt",
        "C:escaped.txt",
        "",
    ]


@pytest.mark.parametrize("index", range(10))
def test_an_entry_that_leaves_the_workspace_is_refused_and_nothing_is_written(tmp_path, index):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "stray.txt").write_text("the agent's")
    evil = escaping_entries(outside)[index]
    state = planted({"good.txt": b"fine", evil: b"pwned"})
    with pytest.raises(ValueError, match="leaves the workspace") as refused:
        WorkspaceAdapter(root).restore_now(state)
    assert repr(evil) in str(refused.value)  # the entry is named
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["outside", "stray.txt", "ws"]
    assert (root / "stray.txt").read_text() == "the agent's"  # checked before any change


@pytest.mark.parametrize("mode", [0o4755, 0o2755, 0o20644, 0o120777, -1, "644", True])
def test_setuid_setgid_device_and_odd_modes_are_refused(tmp_path, mode):
    root = tmp_path / "ws"
    with pytest.raises(ValueError, match=r"'tool'.*mode") as refused:
        WorkspaceAdapter(root).restore_now(planted({"tool": b"#!/bin/sh\n"}, modes={"tool": mode}))
    assert "nothing was restored" in str(refused.value)
    assert not root.exists()


def test_a_file_that_is_also_a_directory_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"'a'.*both a file and a directory"):
        WorkspaceAdapter(tmp_path / "ws").restore_now(planted({"a": b"1", "a/b": b"2"}))
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("manifest", [b"[]", b'{"f": 1}', b'{"f": {"size": 1}}', b"{"])
def test_a_malformed_manifest_is_refused(tmp_path, manifest):
    state = State(CONTENT_TYPE, blobs.frame([manifest, b"x"]))
    with pytest.raises(ValueError, match="not a workspace snapshot"):
        WorkspaceAdapter(tmp_path).restore_now(state)


def test_a_symlinked_directory_in_the_workspace_is_not_followed(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (root / "link").symlink_to(outside, target_is_directory=True)
    WorkspaceAdapter(root).restore_now(planted({"link/x.txt": b"restored"}))
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (
        not (root / "link").is_symlink() and (root / "link" / "x.txt").read_bytes() == b"restored"
    )


def test_a_symlink_where_a_file_is_restored_is_replaced_not_written_through(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "bashrc").write_text("the user's")
    (root / "notes.txt").symlink_to(outside / "bashrc")
    (root / "dangling").symlink_to(outside / "nothing-here")
    WorkspaceAdapter(root).restore_now(planted({"notes.txt": b"restored", "dangling": b"d"}))
    assert (outside / "bashrc").read_text() == "the user's"
    assert not (outside / "nothing-here").exists()
    assert not (root / "notes.txt").is_symlink()
    assert (root / "notes.txt").read_bytes() == b"restored"
    assert (root / "dangling").read_bytes() == b"d"


def test_a_snapshot_of_a_workspace_with_a_setuid_file_restores_without_the_bit(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "tool").write_text("#!/bin/sh\n")
    os.chmod(root / "tool", 0o4755)
    adapter = WorkspaceAdapter(root)
    state = adapter.pull_now()
    (root / "tool").unlink()
    adapter.restore_now(state)
    assert stat.S_IMODE((root / "tool").stat().st_mode) == 0o755


def plant_in_cassette(cassette: Path, state: State) -> None:
    """A crashed run whose workspace snapshot was planted (a shared cassette)."""
    store = SqliteStore(cassette)
    store.create_run(Run("shared", status=RunStatus.CRASHED))
    store.add_exchanges([exchange(run_id="shared", step=0)])
    store.add_snapshot(Snapshot("shared", 0, "workspace", state.content_type, state.data))
    store.close()


@pytest.mark.parametrize("verb", [["fork", "shared", "--at", "1"], ["resume", "shared"]])
def test_fork_and_resume_with_a_workspace_refuse_a_planted_snapshot(tmp_path, verb):
    cassette, root, outside = tmp_path / "c.db", tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "work.txt").write_text("mine")
    plant_in_cassette(cassette, planted({"ok.txt": b"x", "sub/../../outside/evil": b"pwned"}))
    marker = tmp_path / "agent-ran"
    agent = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    done = forkpoint(*verb, "--workspace", root, "--", *agent, cassette=cassette)
    assert done.returncode == 2, done.output
    assert "'sub/../../outside/evil' leaves the workspace" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 2
    assert list(outside.iterdir()) == [] and not marker.exists()  # nor did the agent start
    assert sorted(p.name for p in root.iterdir()) == ["work.txt"]


@pytest.mark.parametrize("same_content", [False, True])
def test_a_file_hard_linked_outside_is_replaced_not_written_in_place(tmp_path, same_content):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "bashrc").write_text("the user's")
    os.chmod(outside / "bashrc", 0o600)
    os.link(outside / "bashrc", root / "notes.txt")
    data = b"the user's" if same_content else b"restored"
    WorkspaceAdapter(root).restore_now(planted({"notes.txt": data}, modes={"notes.txt": 0o755}))
    assert (outside / "bashrc").read_text() == "the user's"
    assert stat.S_IMODE((outside / "bashrc").stat().st_mode) == 0o600  # nor its mode changed
    assert (root / "notes.txt").read_bytes() == data
    assert stat.S_IMODE((root / "notes.txt").stat().st_mode) == 0o755
    assert (outside / "bashrc").stat().st_nlink == 1
