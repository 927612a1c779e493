"""The workspace adapter: a directory the agent works in, snapshotted and restored exactly.

A snapshot is a framed body (`forkpoint.cassettes.blobs.frame`): a manifest (JSON: path → mode,
size, sha256), then each file. The cassette stores framed parts one blob each, by content
hash, so a file unchanged between steps is stored once. Restoring
writes the directory back to the manifest: changed files rewritten, missing ones created,
files the manifest lacks deleted, modes set.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from pathlib import Path

import orjson

from forkpoint.adapters.protocol import State
from forkpoint.cassettes import blobs

CONTENT_TYPE = "application/vnd.forkpoint.workspace" + blobs.FRAMED_SUFFIX


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
                "mode": stat.S_IMODE(path.stat().st_mode),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            contents.append(data)
        manifest = orjson.dumps(entries, option=orjson.OPT_SORT_KEYS)
        return State(CONTENT_TYPE, blobs.frame([manifest, *contents]))

    def restore_now(self, state: State) -> None:
        entries, files = _parse(state.data)
        self.root.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.root.rglob("*"), reverse=True):  # children before parents
            relative = path.relative_to(self.root).as_posix()
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            elif relative not in entries:
                path.unlink()
        for relative, data in files.items():
            target = self.root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
            os.chmod(target, int(entries[relative]["mode"]))


def _parse(data: bytes) -> tuple[dict[str, dict[str, int | str]], dict[str, bytes]]:
    try:
        manifest, *contents = blobs.unframe(data)
        entries = orjson.loads(manifest)
    except (ValueError, orjson.JSONDecodeError) as error:
        raise ValueError(f"not a workspace snapshot: {error}") from error
    return entries, dict(zip(entries, contents, strict=True))
