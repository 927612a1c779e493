"""The sync form of an async verb, usable anywhere: a script, a thread, a notebook cell.

`asyncio.run` refuses to start inside a running loop (a Jupyter notebook, an async web
handler). There the coroutine runs on a loop of its own in a worker thread, and this thread
waits for it, as a sync call would. On the main thread the loop is uvloop's where it is
installed (`runtime.loops`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

from forkpoint.runtime import loops

T = TypeVar("T")


def run_sync[T](coroutine: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return loops.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forkpoint-sync") as pool:
        return pool.submit(asyncio.run, coroutine).result()
