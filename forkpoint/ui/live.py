"""A run being recorded, followed live: its new steps as server-sent events.

The proxy's recorder writes the store; the web view reads it. It learns of new steps by asking
the store, every `POLL` seconds on a reader thread, how many steps the run has (one indexed
count), and reads the run's exchanges only when that changed. One way for every case: a web
view in another process than the proxy (`forkpoint ui` beside `forkpoint serve`), a fleet of
proxies on one PostgreSQL store, and the view `serve` mounts itself. A step appears once its
exchange is committed: after its answer reached the agent, within the recorder's batch.

Steps may commit out of order (parallel requests), and a crash may leave a step never
written, so what a client has seen is a set of steps, not a number: the event id is that set
as ranges (`0-41,43`), which the browser sends back as `Last-Event-ID` when it reconnects, so
it gets exactly the steps it lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# How often a live page's run is looked at, seconds: a step shows this long after it commits
# at most, for one count query each time (benchmarks/ui.py measures it).
POLL = 0.25
# How often a comment keeps an idle stream open through proxies that close silent ones, s.
KEEPALIVE = 15.0

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
# The most steps a cursor may name: a bad header costs a parse, not the memory of a set.
_MOST = 10_000_000


def cursor(steps: Iterable[int]) -> str:
    """The steps as sorted ranges: `0-41,43,45-46` (empty for none)."""
    ranges: list[list[int]] = []
    for step in sorted(set(steps)):
        if ranges and step == ranges[-1][1] + 1:
            ranges[-1][1] = step
        else:
            ranges.append([step, step])
    return ",".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)


def seen(text: str | None) -> tuple[tuple[int, int], ...]:
    """A cursor read back as inclusive ranges; anything that is not one reads as nothing seen
    (the client then gets every step again, which is safe)."""
    found: list[tuple[int, int]] = []
    for part in (text or "").split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            return ()
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low or high - low > _MOST:
            return ()
        found.append((low, high))
    return tuple(found)


def holds(ranges: tuple[tuple[int, int], ...], step: int, sent: set[int]) -> bool:
    """Whether the client has `step`: in a range it named, or sent to it since."""
    return step in sent or any(low <= step <= high for low, high in ranges)


def event(name: str, data: str, ident: str | None = None) -> bytes:
    """One server-sent event; `data` may span lines."""
    lines = [f"event: {name}"]
    if ident is not None:
        lines.append(f"id: {ident}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()
