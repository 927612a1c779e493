"""The event loop a forkpoint command runs on: uvloop where it is installed, else asyncio's.

uvloop (the `fast` extra) makes a command's proxy cheaper: about 6% less CPU per request and
10% more requests/s at c=32 (benchmarks/gateway.py --loops), and fork and resume reach their
first live request 0.1 s sooner (benchmarks/fork_resume.py). It runs only a loop on the main
thread (a command's, or a script's sync call), so there is at most one uvloop loop in a
process: uvloop refuses two loops that spawn processes at the same moment, and loops on
threads (`ProxyThread`, a notebook's sync call) stay on asyncio. `FORKPOINT_LOOP=asyncio`
turns it off.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from forkpoint.errors import ConfigError, MissingExtra
from forkpoint.importing import require_extra

ENV = "FORKPOINT_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory where it is installed and wanted; None for asyncio's own."""
    wanted = os.environ.get(ENV, "").strip().lower()
    if wanted not in ("", "uvloop", "asyncio"):
        raise ConfigError(f"{ENV}={wanted!r}: use uvloop or asyncio")
    if wanted == "asyncio" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        [uvloop] = require_extra("fast", f"{ENV}=uvloop", modules=("uvloop",))
    except MissingExtra:
        if wanted == "uvloop":
            raise
        return None  # not asked for by name: asyncio's loop serves as well, a little slower
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run[T](coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run`, on the loop `loop_factory` chooses."""
    try:
        factory = loop_factory()
    except ConfigError:
        coroutine.close()  # never started: no "never awaited" warning besides the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coroutine)
