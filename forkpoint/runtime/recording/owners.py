"""Which forkpoint process records a run, and whether it still lives: how a reader tells a run
killed mid-recording (`crashed`) from one still recording (`running`) without writing.

A proxy names the runs it opens itself (`Run.owner`; a resume names itself again) by its
host, the host's boot and its journal's base name (`{time_ns:x}-{pid}`, see `journal`). A run
a request names has no owner: several proxies may serve it at once, and one of them gone says
nothing of the others.

Whether an owner lives (`alive`): on another host, or where that cannot be told, None (a
reader says nothing it cannot know). On this host: a boot since it started, it is gone; its
journal's lock file, held by flock for as long as it lives (and by its writer process), is the
test. The test asks for the lock shared and without waiting, and lets it go at once: a live
owner holds it, so it is refused; an unheld one is a dead owner's (a merger that meets it in
that moment skips the journal until its next merge, as for a live one). A lock file that is
gone was merged by a later proxy, or is where this reader cannot see (another user's state
directory): the process id then decides, a process by that id meaning it may live.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path
from typing import NamedTuple

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class Owner(NamedTuple):
    """A recording process: its host, the host's boot (empty where unknown), its journal's
    base name."""

    host: str
    boot: str
    base: str

    def __str__(self) -> str:
        return f"{self.host}/{self.boot}/{self.base}"

    @property
    def pid(self) -> int | None:
        pid = self.base.rpartition("-")[2]
        return int(pid) if pid.isdigit() else None


def this_boot() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def owner_of(base: str) -> str:
    """The owner name of this process, whose journal is `base`."""
    return str(Owner(socket.gethostname(), this_boot(), base))


def parsed(owner: str) -> Owner | None:
    host, _, rest = owner.partition("/")
    boot, _, base = rest.partition("/")
    return Owner(host, boot, base) if host and base and "/" not in base else None


def alive(owner: str | None, journals: Path | None) -> bool | None:
    """Whether the process `owner` names lives, its journals being in `journals`; None when
    this process cannot know (no owner, another host)."""
    found = parsed(owner) if owner else None
    if found is None or found.host != socket.gethostname():
        return None
    boot = this_boot()
    if found.boot and boot and found.boot != boot:
        return False  # the host started again since: every process of before is gone
    if journals is not None:
        held = _held(journals / f"{found.base}.lock")
        if held is not None:
            return held
    if found.pid is None:
        return None
    try:
        os.kill(found.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process by that id
    return True


def _held(lock: Path) -> bool | None:
    """Whether a process holds `lock` (flock); None when there is no such file."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # none (merged and deleted), or not ours to open
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
