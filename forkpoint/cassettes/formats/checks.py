"""What a value read from a cassette file must be before it is stored: what HTTP allows and a
store can hold.

A file may come from anyone (a HAR from a browser, a hand edit, an attacker), and what it
holds is replayed to an agent byte for byte: a status of -200 would go out as `HTTP/1.1 -200`,
a header value with a line break would add a header. Each check takes the value and where it
sits (`Where`) and gives the value back, or raises `Invalid` naming the field.
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from forkpoint.models import Headers

Where = tuple[str | int, ...]  # where in a document a value sits: ("interactions", 3, "request")

# RFC 9110 5.6.2: a method or a header name is a token.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 5.5: a field value holds no control character but a tab (obs-text is allowed).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# A route or URL as a request line carries it: no control character and no space.
_NOT_IN_TARGET = re.compile(r"[\x00-\x20\x7f]")
URL_SCHEMES = ("http", "https", "ws", "wss")
MAX_METHOD = 64
# A start time a date can hold (before the year 10000), so exports and `show` can print it.
LATEST = 253_402_300_799.0
# Steps and statuses are 32-bit integers in PostgreSQL.
MAX_INT32 = 2**31 - 1
# How deeply a run's `change` may nest: JSON a fork wrote is shallow.
MAX_DEPTH = 64


class Invalid(ValueError):
    """A value in a cassette file that cannot be read; `path` says where it sits, and `line`
    on which line of the file, where the reader knows it."""

    def __init__(self, path: Where, message: str, *, line: int | None = None):
        super().__init__(message)
        self.path = path
        self.line = line


def status(value: int | None, path: Where) -> int | None:
    """An HTTP status (100 to 599), or None for an exchange that got no answer."""
    if value is not None and not 100 <= value <= 599:
        raise Invalid(path, f"status {shown(value)} is not an HTTP status (100 to 599)")
    return value


def method(value: str, path: Where) -> str:
    if len(value) > MAX_METHOD or not _TOKEN.fullmatch(value):
        raise Invalid(
            path,
            f"{shown(value)} is not an HTTP method (a token: letters, digits, !#$%&'*+-.^_`|~)",
        )
    return value


def headers(pairs: Iterable[tuple[str, str]], path: Where) -> Headers:
    """Header pairs whose names are tokens and whose values hold no line break or control
    character, as HTTP allows them on the wire."""
    checked = []
    for index, (name, text) in enumerate(pairs):
        if not _TOKEN.fullmatch(name):
            raise Invalid((*path, index), f"header name {shown(name)} is not a token")
        if _CONTROL.search(text):
            message = f"header {name}'s value holds a control character or line break"
            raise Invalid((*path, index), message)
        checked.append((name, text))
    return tuple(checked)


def route(value: str, path: Where) -> str:
    """A gateway route: a path (and query) from `/`, as a request line carries it."""
    if not value.startswith("/") or _NOT_IN_TARGET.search(value):
        raise Invalid(
            path, f"route {shown(value)} is not a path from / without spaces or control characters"
        )
    return value


def url(value: str, path: Where) -> str:
    """An absolute http(s) or ws(s) URL."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as error:
        raise Invalid(path, f"{shown(value)} is not a URL ({error})") from None
    if parts.scheme not in URL_SCHEMES or not parts.netloc or _NOT_IN_TARGET.search(value):
        raise Invalid(path, f"{shown(value)} is not an absolute http(s) or ws(s) URL")
    return value


def millis(value: float | None, path: Where) -> float | None:
    """A duration or an offset in milliseconds: finite, not negative."""
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise Invalid(path, f"{shown(value)} is not a time in ms (finite, at least 0)")
    return None if value is None else float(value)


def timestamp(value: float | None, path: Where) -> float | None:
    """A moment in seconds since the epoch that a date can hold."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= LATEST):
        raise Invalid(path, f"{shown(value)} is not a time (seconds since 1970, before 10000)")
    return None if value is None else float(value)


def count(value: int | None, path: Where) -> int | None:
    """A step or a size: at least 0 and within a 32-bit integer."""
    if value is not None and not 0 <= value <= MAX_INT32:
        raise Invalid(path, f"{shown(value)} is out of range (0 to {MAX_INT32})")
    return value


def json_value(value: Any, path: Where, depth: int = 0) -> Any:
    """A value JSON can hold (a run's `change`): text keys, finite numbers, no dates or bytes."""
    if depth > MAX_DEPTH:
        raise Invalid(path, f"nested more than {MAX_DEPTH} deep")
    if isinstance(value, dict):
        for key, member in value.items():
            if not isinstance(key, str):
                raise Invalid(path, f"key {shown(key)} is not text")
            json_value(member, (*path, key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            json_value(item, (*path, index), depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise Invalid(path, f"{value} is not a number JSON holds")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise Invalid(path, f"{shown(value)} is out of range (a 64-bit integer)")
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise Invalid(path, f"a {type(value).__name__} is not a value JSON holds")
    return value


def shown(value: object) -> str:
    """The value as a message shows it: short (an integer of thousands of digits by its size,
    which even `repr` refuses to write out)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        return _SHORT.repr(value)
    except ValueError:
        return f"a {type(value).__name__} too large to show"


_SHORT = reprlib.Repr(maxlevel=2, maxstring=60, maxother=60, maxlist=4, maxdict=4)
