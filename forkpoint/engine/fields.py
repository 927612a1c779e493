"""Fields of JSON bodies named by path, and taking them out (`--ignore PATH`).

A path is dotted (`metadata.user_id`, `input.*.id`) or written the JSONPath way
(`$.metadata.user_id`, `$.input[*].id`, `$.messages[0].content`): `*` stands for every item of
a list (or every key of an object), a number for one item. A path may go on into JSON carried
in a string (`metadata.user_id.session_id`, where `user_id` is a JSON document as text): the
string is read, the field taken out and the rest written back.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import orjson

from forkpoint.errors import ConfigError

_STEP = re.compile(r"\[(\*|\d+)\]|\[['\"]([^'\"]+)['\"]\]")


@functools.lru_cache(maxsize=1024)
def parse(path: str) -> tuple[str, ...]:
    """The steps of a path in either spelling; raises ConfigError for an empty one."""
    text = path.strip()
    if text.startswith("$"):
        text = text[1:].lstrip(".")
    text = _STEP.sub(lambda m: "." + (m.group(1) or m.group(2)), text).strip(".")
    steps = tuple(text.split(".")) if text else ()
    if not steps or any(not step for step in steps):
        raise ConfigError(f"not a JSON path: {path!r} (e.g. metadata.user_id or $.input[*].id)")
    return steps


def drop(value: Any, path: str | tuple[str, ...]) -> Any:
    """A copy of `value` without the field at `path` (the input is left untouched)."""
    return _drop(value, parse(path) if isinstance(path, str) else path)


def _drop(value: Any, path: tuple[str, ...]) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        if head == "*":
            return {k: _drop(v, rest) for k, v in value.items()} if rest else {}
        if head not in value:
            return value
        if not rest:
            return {k: v for k, v in value.items() if k != head}
        return {**value, head: _drop(value[head], rest)}
    if isinstance(value, list):
        if head == "*":
            return [_drop(item, rest) for item in value] if rest else []
        if head.isdigit() and int(head) < len(value):
            index = int(head)
            if not rest:
                return value[:index] + value[index + 1 :]
            return [*value[:index], _drop(value[index], rest), *value[index + 1 :]]
        return value
    if isinstance(value, str) and (inner := json_inside(value)) is not None:
        return orjson.dumps(_drop(inner, path), option=orjson.OPT_SORT_KEYS).decode()
    return value


def json_inside(text: str) -> dict[str, Any] | list[Any] | None:
    """The object or array a string holds as JSON text, or None."""
    if len(text) < 2 or (text[0], text[-1]) not in (("{", "}"), ("[", "]")):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict | list) else None
