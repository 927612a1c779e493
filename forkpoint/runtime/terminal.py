"""The terminal's foreground, for a command forkpoint starts in a process group of its own.

An agent runs in its own process group so that parking ends the whole agent (its children
too) and never forkpoint. A terminal sends Ctrl-C to its foreground group only, so when
forkpoint has the terminal it hands the foreground to the agent's group (`hand`), and takes
it back when the agent is gone (`take_back`). Out of forkpoint's group, a signal to that
group no longer reaches the agent: on Linux the agent is told SIGTERM when forkpoint dies
(`own_group`: the parent-death signal), as it was when they shared a group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_handed: list[int] = []  # the terminal handed over, for `take_back`
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def own_group() -> None:
    """In the child, before it runs the command: a process group of its own, and (Linux)
    SIGTERM when its parent dies, so a killed forkpoint leaves no agent behind."""
    os.setpgrp()
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def own_session() -> None:
    """In the child, before it runs the command: a session (and process group) of its own,
    out of the terminal's reach, and (Linux) SIGTERM when its parent dies: an agent `serve`
    woke is served by serve, and does not outlive it."""
    os.setsid()
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def hand(group: int) -> None:
    """Give the terminal's foreground to process group `group` if this process has it."""
    with contextlib.suppress(OSError):
        fd = 0
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return
        os.tcsetpgrp(fd, group)
        _handed.append(fd)
        os.killpg(group, signal.SIGCONT)  # stopped if it read the terminal before it had it


def take_back() -> None:
    """Take the terminal's foreground back, if it was handed over (SIGTTOU blocked: this
    process is in the background until then)."""
    if not _handed:
        return
    fd = _handed.pop()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTOU})
    try:
        with contextlib.suppress(OSError):
            os.tcsetpgrp(fd, os.getpgrp())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
