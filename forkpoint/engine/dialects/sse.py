"""Server-sent events, parsed from a whole recorded stream body.

Follows the WHATWG event-stream rules, with one deliberate difference: an event still open when
the body ends is returned, because a stream that broke off mid-event is exactly what forkpoint
has to summarize after a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SseEvent", "parse_events"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str | None
    data: str


def parse_events(body: bytes) -> list[SseEvent]:
    """The events of `body`; `id:` and `retry:` fields are read past, comments dropped."""
    text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
    events: list[SseEvent] = []
    event: str | None = None
    data: list[str] = []
    for line in _LINE_BREAK.split(text):
        if not line:
            # A blank line ends the event; one without data lines is dropped, as the spec says.
            if data:
                events.append(SseEvent(event, "\n".join(data)))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value or None
    if data:
        events.append(SseEvent(event, "\n".join(data)))
    return events
