"""Values a client generates: what the second matching tier sets aside.

Two runs of the same agent doing the same task send the same requests except for what the
client makes up as it goes: session and device ids, message ids, UUIDs and ULIDs, random
tokens, the date and time, the directory it runs in and its HOME, the port of the proxy it was
pointed at. `masked` replaces each such value by a placeholder of its kind, so a request
matches a recording made on another day, in another directory or on another machine.

The placeholders of ids are numbered by first appearance (`<uuid:1>`, `<uuid:2>`): the same id
twice in one body stays the same placeholder twice, so a request that uses one id where the
recording used two (or the reverse) still differs. Dates, times and directories are not
numbered: a recording made just before midnight may hold two dates where a replay holds one.

What is kept is what decides behaviour: words, numbers, file names, model names, tool names
and arguments. A path keeps its last component (`/tmp/a/work/hello.txt` → `<dir>/hello.txt`),
so two files of different names never match.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

from forkpoint.engine import mcp
from forkpoint.engine.fields import drop, json_inside
from forkpoint.engine.multipart import DIGEST

# Per API, the fields its clients fill with their own ids, wholly set aside. Chosen by the
# route's path (a websocket message to `/v1/responses` is read like a POST there).
DIALECT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Anthropic Messages: Claude Code's `user_id` is a JSON document of device and session ids.
    ("/messages", ("metadata.user_id",)),
    # OpenAI Responses: Codex's session, thread, turn, window and installation ids, its turn
    # start time; the ids it gives the items it sends; its prompt cache key.
    ("/responses", ("client_metadata", "input.*.id", "prompt_cache_key")),
    # OpenAI Realtime: each client event's optional `event_id`.
    ("/realtime", ("event_id",)),
)


_HEX = "0-9a-fA-F"
# (kind, pattern, numbered): tried in this order, so a UUID is not read as two hex runs.
_ID_PATTERNS: tuple[tuple[str, str, bool], ...] = (
    # ISO 8601 date-times, with or without seconds, fraction and zone
    ("time", r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?", False),
    ("date", r"(?<!\d)\d{4}-\d{2}-\d{2}(?!\d)", False),
    ("uuid", rf"[{_HEX}]{{8}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{4}}-[{_HEX}]{{12}}", True),
    ("ulid", r"(?<![0-9A-Za-z])[0-7][0-9A-HJKMNP-TV-Z]{25}(?![0-9A-Za-z])", True),
    # a loopback address with its port: forkpoint's own, or a local server's, new each run
    ("loopback", r"(?:127\.0\.0\.1|localhost|\[::1\]):\d{2,5}", False),
    # hex runs of 16+ with a letter and a digit (a 16-digit number is a number, not an id)
    ("hex", r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{16,}(?![0-9A-Za-z])", True),
    ("hex", r"(?<![0-9A-Za-z])(?=[0-9A-F]*[A-F])(?=[0-9A-F]*\d)[0-9A-F]{16,}(?![0-9A-Za-z])", True),
)
# base62 tokens of 20-64 characters with a digit, a capital and a small letter
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Z])(?=[A-Za-z0-9]*[a-z])"
    r"[A-Za-z0-9]{20,64}(?![A-Za-z0-9])"
)
# Base64 data (an image, a file) is left whole: two images never match for being two images.
_BASE64 = re.compile(r"[A-Za-z0-9+/]{100,}=*")
# Lines tools and agents print that carry a fresh value each run: (pattern, replacement).
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # Codex's exec tool output
    (re.compile(r"Chunk ID: \w+"), "Chunk ID: <id>"),
    (re.compile(r"Wall time: [\d.]+ seconds"), "Wall time: <n> seconds"),
    # the OS line of Claude Code's environment block, Codex's time zone
    (re.compile(r"OS Version: [^\n]*"), "OS Version: <os>"),
    (re.compile(r"<timezone>[^<]*</timezone>"), "<timezone><tz></timezone>"),
)
# An absolute path of two or more components, not part of a URL: its directory is set aside
# (HOME, the working directory), its last component kept.
_PATH = re.compile(r"(?<![\w:/.~%-])(?:/[\w.@+~-]+)+?/([\w.@+~-]+/?)(?![\w.@+~/-])")
_NUMBER_KEYS = re.compile(r"(?:^|_)(?:at|ts|ms|date)$|time", re.IGNORECASE)
_EPOCH = ((1.0e9, 2.2e9), (1.0e12, 2.2e12))  # seconds, milliseconds: 2001 … 2039

_COMPILED = tuple((kind, re.compile(pattern), numbered) for kind, pattern, numbered in _ID_PATTERNS)


def dialect_fields(route: str) -> tuple[str, ...]:
    """The fields of `route`'s API that its clients fill with their own ids."""
    path = route.partition("?")[0].rstrip("/")
    return next((fields for suffix, fields in DIALECT_FIELDS if path.endswith(suffix)), ())


def masked(route: str, value: Any) -> Any:
    """`value` (a JSON body) with what its client generates replaced by placeholders."""
    value = mcp.set_aside(value)  # an MCP client's `_meta`, a server's `requestState`
    for path in dialect_fields(route):
        value = drop(value, path)
    return _Masker().value(value, "")


def masked_route(route: str) -> str:
    """The route with the ids in its path and query replaced (`/v1/threads/<id:1>/runs`);
    its path itself is kept."""
    return _Masker().text(route, paths=False)


class _Masker:
    """One body's masking: its numbering of ids is shared by every string in it."""

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str], int] = {}

    def value(self, value: Any, key: str) -> Any:
        if key == DIGEST:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(item, key) for item in value]
        if isinstance(value, int | float) and not isinstance(value, bool) and _is_time(key, value):
            return "<time>"
        return value

    def text(self, text: str, *, paths: bool = True) -> str:
        inner = json_inside(text)
        if inner is not None:  # JSON carried in a string: masked field by field
            try:
                return orjson.dumps(self.value(inner, ""), option=orjson.OPT_SORT_KEYS).decode()
            except (TypeError, RecursionError):  # nested deeper than it writes back: as text
                pass
        pieces, at = [], 0
        for data in _BASE64.finditer(text):
            pieces += [self._piece(text[at : data.start()], paths), data.group()]
            at = data.end()
        pieces.append(self._piece(text[at:], paths))
        return "".join(pieces)

    def _piece(self, text: str, paths: bool) -> str:
        for kind, pattern, numbered in _COMPILED:
            text = pattern.sub(self._placeholder(kind, numbered), text)
        text = _TOKEN.sub(self._placeholder("id", True), text)
        for pattern, replacement in _TEXT_PATTERNS:
            text = pattern.sub(replacement, text)
        return _PATH.sub(r"<dir>/\1", text) if paths else text

    def _placeholder(self, kind: str, numbered: bool) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            if not numbered:
                return f"<{kind}>"
            number = self._numbers.setdefault((kind, match.group()), len(self._numbers) + 1)
            return f"<{kind}:{number}>"

        return replace


def _is_time(key: str, number: float) -> bool:
    """A number under a time-named key that reads as a Unix time in seconds or milliseconds."""
    return bool(_NUMBER_KEYS.search(key)) and any(lo <= number <= hi for lo, hi in _EPOCH)
