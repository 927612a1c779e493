"""Type-checked reads of untrusted JSON, shared by the dialects.

Bodies come from upstreams, agents and broken connections; every field may be missing, null or
of the wrong type. These readers turn all of that into None (or an empty container), so a
dialect never raises on garbage.
"""

from __future__ import annotations

import orjson

from forkpoint.engine.dialects.sse import parse_events


def loads(data: bytes | str) -> object | None:
    """The JSON value of `data`, or None when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def obj(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def arr(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def dig(value: object, *keys: str) -> object:
    """`value[k1][k2]…` through dicts, or None where a step is missing."""
    for key in keys:
        value = obj(value).get(key)
    return value


def text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def count(value: object) -> int:
    """A token count: JSON integers only (bool is an int in Python but not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def request_model(request_json: object | None) -> str | None:
    return text(dig(request_json, "model"))


def is_stream(body: bytes, streamed: bool) -> bool:
    """Whether to read `body` as SSE: an error to a stream request comes back as plain JSON."""
    return streamed and not body.lstrip().startswith(b"{")


def stream_payloads(body: bytes) -> list[dict[str, object]]:
    """The JSON objects carried by the `data:` of each event; `[DONE]` and non-JSON skipped."""
    payloads = (loads(event.data) for event in parse_events(body))
    return [payload for payload in payloads if isinstance(payload, dict)]


def joined(parts: list[str]) -> str | None:
    """Concatenated text fragments, None when there were none (or all were empty)."""
    return "".join(parts) or None
