"""Request fingerprints for replay, and the body diff a divergence report shows.

A fingerprint is method + route + normalized body: JSON keys sorted, configured volatile fields
dropped, user normalizers applied in order. Normalizers are plain functions in a tuple, so a
user adds one without subclassing anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson

from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.redaction import DEFAULT as DEFAULT_REDACTION
from forkpoint.engine.redaction import Redaction
from forkpoint.models import Exchange, Headers

# (method, route, parsed JSON body) -> the body to fingerprint
Normalizer = Callable[[str, str, Any], Any]


# Fields that change between two runs of the same agent without changing what it asks: the
# OpenAI Agents SDK sends a random `prompt_cache_key` per run when talking to api.openai.com.
DEFAULT_VOLATILE = ("prompt_cache_key",)


@dataclass(frozen=True, slots=True)
class MatchConfig:
    """`volatile_fields` are dotted paths into JSON bodies; `*` stands for every list item.
    `redaction` says which values are secrets: masked before matching, so a replay with
    another key matches a recording made with this one."""

    volatile_fields: tuple[str, ...] = DEFAULT_VOLATILE
    normalizers: tuple[Normalizer, ...] = ()
    redaction: Redaction = DEFAULT_REDACTION


def normalized_route(route: str) -> str:
    """Path plus query parameters in sorted order, so `?b=1&a=2` matches `?a=2&b=1`."""
    parts = urlsplit(route)
    if not parts.query:
        return parts.path
    return f"{parts.path}?{urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))}"


def parse_json(body: bytes, content_encoding: str | None = None) -> Any:
    """The JSON value of a body, or None when it is not JSON (or not decodable)."""
    if not body:
        return None
    try:
        return orjson.loads(decode_body(body, content_encoding))
    except (orjson.JSONDecodeError, UndecodableBody):
        return None


def normalized_body(method: str, route: str, value: Any, config: MatchConfig) -> Any:
    value = config.redaction.mask_value(value)
    for path in config.volatile_fields:
        value = _drop(value, path.split("."))
    for normalizer in config.normalizers:
        value = normalizer(method, route, value)
    return value


def fingerprint(
    method: str,
    route: str,
    body: bytes,
    content_encoding: str | None = None,
    config: MatchConfig = MatchConfig(),
) -> str:
    digest = hashlib.sha256(f"{method.upper()} {normalized_route(route)}\n".encode())
    value = parse_json(body, content_encoding)
    if value is None:
        digest.update(b"raw:" + config.redaction.body(body, _encoded(content_encoding)))
    else:
        value = normalized_body(method, route, value, config)
        digest.update(b"json:" + orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def _encoded(content_encoding: str | None) -> Headers:
    return () if content_encoding is None else (("content-encoding", content_encoding),)


def fingerprint_of(
    method: str, route: str, body: bytes, headers: Headers, config: MatchConfig
) -> str:
    """The fingerprint of a request as it came in, whatever its body's Content-Encoding."""
    return fingerprint(method, route, body, header(headers, "content-encoding"), config)


def fingerprint_exchange(exchange: Exchange, config: MatchConfig) -> str:
    """The fingerprint of a recorded exchange's request."""
    return fingerprint_of(
        exchange.method, exchange.route, exchange.request_body, exchange.request_headers, config
    )


def _drop(value: Any, path: list[str]) -> Any:
    """A copy of `value` without the field at `path` (the input is left untouched)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        if head not in value:
            return value
        if not rest:
            return {k: v for k, v in value.items() if k != head}
        return {**value, head: _drop(value[head], rest)}
    if isinstance(value, list) and head == "*":
        return [_drop(item, rest) for item in value] if rest else []
    return value


def comparable(
    method: str, route: str, body: bytes, content_encoding: str | None, config: MatchConfig
) -> Any:
    """What matching sees of a body, as a value a diff can show (secrets masked)."""
    body = config.redaction.body(body, _encoded(content_encoding))
    value = parse_json(body, content_encoding)
    if value is None:
        return {"route": normalized_route(route), "body (not JSON)": body[:200].hex()}
    return normalized_body(method, route, value, config)


# the divergence report's diff


def json_diff(recorded: Any, got: Any, *, limit: int = 20) -> list[str]:
    """Readable differences as `path: recorded → got` lines, the first `limit` of them."""
    lines: list[str] = []
    _diff(recorded, got, "$", lines, limit)
    if len(lines) > limit:
        lines = [*lines[:limit], f"… and {len(lines) - limit} more differences"]
    return lines


def _diff(a: Any, b: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) > limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            sub = f"{path}.{key}"
            if key not in b:
                out.append(f"{sub}: {_short(a[key])} → (absent)")
            elif key not in a:
                out.append(f"{sub}: (absent) → {_short(b[key])}")
            else:
                _diff(a[key], b[key], sub, out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            sub = f"{path}[{index}]"
            if index >= len(b):
                out.append(f"{sub}: {_short(a[index])} → (absent)")
            elif index >= len(a):
                out.append(f"{sub}: (absent) → {_short(b[index])}")
            else:
                _diff(a[index], b[index], sub, out, limit)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: {_short(a)} → {_short(b)}")


def _short(value: Any, width: int = 120) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def distance(recorded: Any, got: Any) -> int:
    """How many leaves differ (capped): the measure for 'nearest recorded exchange'."""
    lines: list[str] = []
    _diff(recorded, got, "$", lines, 1000)
    return len(lines)


def nearest(got: Any, candidates: Sequence[tuple[int, Any]]) -> tuple[int, Any] | None:
    """The candidate (step, body) closest to `got`; ties go to the earliest step."""
    best: tuple[int, int, Any] | None = None
    for step, body in candidates:
        score = distance(body, got)
        if best is None or (score, step) < (best[0], best[1]):
            best = (score, step, body)
    return None if best is None else (best[1], best[2])
