"""The garbage collector's settings in a forkpoint command's own process.

A proxy allocates a few hundred objects an exchange and frees them by reference counting once
the answer ends: under load none of them is a cycle (checked with `gc.DEBUG_SAVEALL`), yet
CPython's young-generation threshold (700 objects more allocated than freed) still collects
every few exchanges at c=32, each time traversing every answer in flight and promoting it, and
every full collection walks the whole heap (aiohttp, the store, the engine). With YOUNG the
collector's share of a recording proxy's CPU fell from about 41 to 4 µs an exchange
(benchmarks/gateway.py). Cycles, were there any, are still collected, only less often.

Only a command's process is tuned (`forkpoint.cli`): a user's own process, a pytest session
or a notebook using the Python API, keeps its settings.
"""

from __future__ import annotations

import gc

YOUNG = 10_000


def tune() -> None:
    """Collect the young generation every YOUNG net allocations, the older ones as before."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
