"""JSON bodies shown pretty in a text cassette without losing a byte.

A cassette is read by reviewers, so a JSON body is best shown indented; but an agent may pass
a tool's raw bytes to its model, so replay must serve them exactly as recorded. A body is
shown pretty only when one of the usual serializers turns its value back into exactly its
bytes; the file names that serializer (its "form"), and reading applies it again. A body no
serializer reproduces is written as it came.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_FORMS: dict[str, Callable[[Any], str]] = {
    # httpx and the openai/anthropic SDKs: no spaces, UTF-8 as is
    "compact": lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False),
    # Python's json.dumps defaults, as requests and aiohttp send them
    "python": lambda value: json.dumps(value),
    "python-utf8": lambda value: json.dumps(value, ensure_ascii=False),
    "compact-ascii": lambda value: json.dumps(value, separators=(",", ":")),
}


def exact_form(body: bytes) -> str | None:
    """The name of the serializer that gives back exactly `body` from its JSON value."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        text = body.decode("utf-8")
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    for name, dump in _FORMS.items():
        try:
            if dump(value) == text:
                return name
        except (ValueError, RecursionError):
            return None
    return None


def pretty(body: bytes) -> str:
    """The body laid out for reading (call only for a body `exact_form` recognized): a member
    of the top object per line, and a list's items one per line (a conversation shows one
    message a line, so a review's diff names the message that changed), the rest compact."""
    value = json.loads(body)
    if not isinstance(value, dict) or not value:
        return _compact(value)
    lines = []
    for index, (key, member) in enumerate(value.items()):
        comma = "," if index < len(value) - 1 else ""
        if isinstance(member, list) and member:
            items = ",\n".join(f"    {_compact(item)}" for item in member)
            lines.append(f"  {_compact(key)}: [\n{items}\n  ]{comma}")
        else:
            lines.append(f"  {_compact(key)}: {_compact(member)}{comma}")
    return "{\n" + "\n".join(lines) + "\n}"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def restore(shown: str, form: str) -> bytes:
    """The exact bytes of a body shown pretty in `form`; raises ValueError for text that is not
    JSON (a hand edit gone wrong) or a form this forkpoint does not know."""
    dump = _FORMS.get(form)
    if dump is None:
        raise ValueError(f"unknown JSON form {form!r} (known: {', '.join(_FORMS)})")
    return dump(json.loads(shown)).encode("utf-8")
