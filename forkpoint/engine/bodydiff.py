"""The difference of two request bodies, as a divergence report or a match's note shows it.

Each difference is one line, `path: recorded → got`. JSON carried in a string (Claude Code's
`metadata.user_id`, Codex's turn metadata) is compared field by field, its fields' paths
written after the string's (`$.metadata.user_id(json).session_id`). Where two long strings
differ, the line shows the part that differs, whole, with some context either side, one line
per changed region (a system prompt that differs in its date and in a path gives two).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import orjson

from forkpoint.engine.fields import json_inside

CONTEXT = 40  # characters of context either side of a differing part
SHOWN = 500  # characters of a value that is only on one side, before "… (N more)"
# Levels walked; past them two values are compared whole and, if they differ, count as one
# difference, so a body of a thousand levels is reported, not a RecursionError.
WALK_DEPTH = 100
_ABSENT = object()


def json_diff(
    recorded: Any, got: Any, *, limit: int = 20, set_aside: Collection[str] = ()
) -> list[str]:
    """Readable differences as `path: recorded → got` lines, the first `limit` of them. The
    differences at `set_aside` paths (values the client generates) are not shown one by one:
    a last line names them."""
    lines: list[str] = []
    aside: list[str] = []
    shown = 0
    for path, a, b in _differences(recorded, got, "$"):
        if path in set_aside:
            aside.append(path)
        elif shown < limit:
            lines += _render(path, a, b)
            shown += 1
        else:
            shown += 1
    if shown > limit:
        lines.append(f"… and {shown - limit} more differences")
    if aside:
        named = ", ".join(aside[:5]) + (f" and {len(aside) - 5} more" if len(aside) > 5 else "")
        lines.append(f"(besides values the client generates, which matching sets aside: {named})")
    return lines


def differing_paths(recorded: Any, got: Any) -> list[str]:
    """The path of every leaf that differs."""
    return [path for path, _, _ in _differences(recorded, got, "$")]


def distance(recorded: Any, got: Any, *, cap: int = 1000) -> int:
    """How many leaves differ (capped): the measure for 'nearest recorded exchange'."""
    count = 0
    for _ in _differences(recorded, got, "$"):
        count += 1
        if count >= cap:
            break
    return count


def nearest(got: Any, candidates: Sequence[tuple[int, Any]]) -> tuple[int, Any] | None:
    """The candidate (step, body) closest to `got`; ties go to the earliest step."""
    best: tuple[int, int, Any] | None = None
    for step, body in candidates:
        score = distance(body, got)
        if best is None or (score, step) < (best[0], best[1]):
            best = (score, step, body)
    return None if best is None else (best[1], best[2])


def _differences(a: Any, b: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any, Any]]:
    """(path, recorded, got) of each leaf that differs; an absent side is `_ABSENT`."""
    if depth >= WALK_DEPTH and isinstance(a, dict | list) and isinstance(b, dict | list):
        try:
            same = a == b
        except RecursionError:  # deeper than even `==` goes: taken as differing
            same = False
        if not same:
            yield path, a, b
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}"
            if key not in b:
                yield sub, a[key], _ABSENT
            elif key not in a:
                yield sub, _ABSENT, b[key]
            else:
                yield from _differences(a[key], b[key], sub, depth + 1)
    elif isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            sub = f"{path}[{index}]"
            if index >= len(b):
                yield sub, a[index], _ABSENT
            elif index >= len(a):
                yield sub, _ABSENT, b[index]
            else:
                yield from _differences(a[index], b[index], sub, depth + 1)
    elif isinstance(a, str) and isinstance(b, str) and a != b:
        inner_a, inner_b = json_inside(a), json_inside(b)
        if inner_a is not None and inner_b is not None:
            yield from _differences(inner_a, inner_b, f"{path}(json)", depth + 1)
        else:
            yield path, a, b
    elif a != b or type(a) is not type(b):
        yield path, a, b


def _render(path: str, a: Any, b: Any) -> list[str]:
    if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > 2 * CONTEXT:
        return [f"{path}{where}: {old} → {new}" for where, old, new in _regions(a, b)]
    return [f"{path}: {_shown(a)} → {_shown(b)}"]


def _regions(a: str, b: str) -> list[tuple[str, str, str]]:
    """Each changed region of two long strings: where (a line number, for text of several
    lines), and the recorded and new parts with context."""
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    if len(lines_a) < 2 and len(lines_b) < 2:
        return [("", *_excerpts(a, b))]
    regions = []
    matcher = difflib.SequenceMatcher(None, lines_a, lines_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        where = f" (line {i1 + 1})" if i2 - i1 <= 1 else f" (lines {i1 + 1}-{i2})"
        regions.append((where, *_excerpts("".join(lines_a[i1:i2]), "".join(lines_b[j1:j2]))))
    return regions


def _excerpts(a: str, b: str) -> tuple[str, str]:
    """The part where `a` and `b` differ, whole, with up to CONTEXT characters either side."""
    limit = min(len(a), len(b))
    start = next((i for i in range(limit) if a[i] != b[i]), limit)
    end = 0
    while end < limit - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    return _excerpt(a, start, len(a) - end), _excerpt(b, start, len(b) - end)


def _excerpt(text: str, start: int, end: int) -> str:
    left, right = max(0, start - CONTEXT), min(len(text), end + CONTEXT)
    inner = orjson.dumps(text[left:right]).decode()[1:-1]
    return f'"{"…" if left else ""}{inner}{"…" if right < len(text) else ""}"'


def _shown(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError:  # past orjson's 254 levels
        return "(nested too deep to show)"
    if len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN]}… ({len(text) - SHOWN} more characters)"
