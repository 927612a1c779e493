"""The workspace adapter: a directory the agent works in, snapshotted and restored exactly.

A snapshot is a framed body (`forkpoint.cassettes.blobs.frame`): a manifest (JSON: path → mode,
size, sha256), then each file. The cassette stores framed parts one blob each, by content
hash, so a file unchanged between steps is stored once. Restoring
writes the directory back to the manifest: changed files rewritten, missing ones created,
files the manifest lacks deleted, modes set.

A cassette may come from anyone (shared, imported, or a state an adapter gave), so a snapshot
is checked whole before anything is touched: a path that is absolute, climbs out with `..`,
or carries a NUL, a backslash or a drive is refused, as are modes beyond rwx (setuid, setgid,
a device's or a link's type bits). Restoring never follows a symlink: the directory is walked
and written through directory descriptors opened with O_NOFOLLOW, and a symlink found where
the snapshot has a file or a directory is removed (the link, not what it points to), as any
other file the snapshot lacks. A changed file is written anew and renamed over the old, so a
hard link's other names (maybe outside) are never written through.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path, PureWindowsPath

import orjson

from forkpoint.adapters.protocol import State
from forkpoint.cassettes import blobs

CONTENT_TYPE = "application/vnd.forkpoint.workspace" + blobs.FRAMED_SUFFIX
# The only mode bits a restored file gets: read, write, execute for user, group, others.
MODE_BITS = 0o777
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class WorkspaceAdapter:
    name = "workspace"

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    async def pull(self) -> State:
        return await asyncio.to_thread(self.pull_now)

    async def restore(self, state: State) -> None:
        await asyncio.to_thread(self.restore_now, state)

    def pull_now(self) -> State:
        """The directory as one state: a manifest followed by the files' contents."""
        entries, contents = {}, []
        for path in sorted(p for p in self.root.rglob("*") if p.is_file() and not p.is_symlink()):
            data = path.read_bytes()
            relative = path.relative_to(self.root).as_posix()
            entries[relative] = {
                "mode": stat.S_IMODE(path.stat().st_mode) & MODE_BITS,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            contents.append(data)
        manifest = orjson.dumps(entries, option=orjson.OPT_SORT_KEYS)
        return State(CONTENT_TYPE, blobs.frame([manifest, *contents]))

    def restore_now(self, state: State) -> None:
        """Put the directory back as `state` has it; ValueError (naming the entry) for a
        snapshot that would reach outside it, before anything is written."""
        files = _parse(state.data)
        self.root.mkdir(parents=True, exist_ok=True)
        root = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _prune(root, "", files)
            for relative, (mode, data) in files.items():
                _write(root, relative, mode, data)
        finally:
            os.close(root)


def _prune(directory: int, prefix: str, files: dict[str, tuple[int, bytes]]) -> None:
    """Delete what the snapshot lacks under `directory`, children before parents: every
    symlink among it, which is unlinked, never followed."""
    with os.scandir(directory) as found:
        entries = list(found)
    for entry in entries:
        relative = prefix + entry.name
        if entry.is_dir(follow_symlinks=False):
            child = os.open(entry.name, _DIR, dir_fd=directory)
            try:
                _prune(child, relative + "/", files)
                empty = not os.listdir(child)
            finally:
                os.close(child)
            if empty:
                os.rmdir(entry.name, dir_fd=directory)
        elif not (entry.is_file(follow_symlinks=False) and relative in files):
            os.unlink(entry.name, dir_fd=directory)


def _write(root: int, relative: str, mode: int, data: bytes) -> None:
    """Write one file under `root`, through its parents as directories, following no link."""
    *parents, name = relative.split("/")
    directory = root
    try:
        for parent in parents:
            with contextlib.suppress(FileExistsError):
                os.mkdir(parent, 0o755, dir_fd=directory)
            opened = os.open(parent, _DIR, dir_fd=directory)
            if directory != root:
                os.close(directory)
            directory = opened
        if not _kept(directory, name, mode, data):
            _replace(directory, name, mode, data)
    except OSError as error:  # the directory changed under us (a link made since the check)
        reason = "a symlink is in the way" if error.errno == errno.ELOOP else error.strerror
        raise ValueError(f"workspace snapshot: cannot restore {relative!r}: {reason}") from error
    finally:
        if directory != root:
            os.close(directory)


def _kept(directory: int, name: str, mode: int, data: bytes) -> bool:
    """An unchanged file keeps its times: only its mode is set. Only a regular file with one
    link is kept; a hard link's other names (maybe outside) are never written through."""
    try:
        file = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
    except FileNotFoundError:
        return False
    try:
        found = os.fstat(file)
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or found.st_size != len(data):
            return False
        with os.fdopen(os.dup(file), "rb") as handle:
            if handle.read() != data:
                return False
        os.fchmod(file, mode)
        return True
    finally:
        os.close(file)


def _replace(directory: int, name: str, mode: int, data: bytes) -> None:
    """Write a new file beside `name` and rename it over: a fresh inode, never a link's."""
    temporary = f".{name}.forkpoint-{secrets.token_hex(4)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    file = os.open(temporary, flags, 0o600, dir_fd=directory)
    try:
        with os.fdopen(os.dup(file), "wb") as handle:
            handle.write(data)
        os.fchmod(file, mode)
    finally:
        os.close(file)
    try:
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError:
        os.unlink(temporary, dir_fd=directory)
        raise


def _parse(data: bytes) -> dict[str, tuple[int, bytes]]:
    """The snapshot's files, path → (mode, contents), once every entry is checked."""
    try:
        manifest, *contents = blobs.unframe(data)
        entries = orjson.loads(manifest)
        if not isinstance(entries, dict):
            raise ValueError("its manifest is not a JSON object")
        if len(entries) != len(contents):
            raise ValueError(f"{len(entries)} entries for {len(contents)} files")
        modes = {path: entry["mode"] for path, entry in entries.items()}
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"not a workspace snapshot: {error}") from error
    for path, mode in modes.items():
        _check(path, mode)
    directories = {path.rpartition("/")[0] for path in modes} | {
        parent for path in modes for parent in _parents(path)
    }
    for path in modes:
        if path in directories:
            raise _refused(path, "is both a file and a directory")
    return dict(zip(modes, zip(modes.values(), contents, strict=True), strict=True))


def _check(path: str, mode: object) -> None:
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\x00" in path
        or "\\" in path
        or PureWindowsPath(path).drive
        or ":" in parts[0]
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise _refused(path, "leaves the workspace")
    if type(mode) is not int or not 0 <= mode <= MODE_BITS:
        shown = oct(mode) if type(mode) is int else repr(mode)
        raise _refused(path, f"has mode {shown} (only rwx bits are restored)")


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:end]) for end in range(1, len(parts))]


def _refused(path: str, why: str) -> ValueError:
    return ValueError(f"workspace snapshot entry {path!r} {why}: nothing was restored")
