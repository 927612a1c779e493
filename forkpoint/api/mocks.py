"""Mock rules from text (`--mock 'ROUTE=SPEC'`) or from Python values (`forkpoint.mock`).

SPEC is a response file (`@policy.json`), a callable (`package.module:function`, sync or
async), `recorded` or `live`. From Python, the answer is the callable itself, a
`MockResponse`, or a value returned as JSON (text and bytes as they are). Files are read and
callables imported once, when the rule is made, never per request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from forkpoint.engine.mocks import (
    JSON,
    MockKind,
    MockRequest,
    MockResponse,
    MockRule,
    as_response,
    split_route,
)
from forkpoint.errors import ConfigError
from forkpoint.importing import load_function, looks_like_ref

__all__ = ["mock", "parse_mock"]


def mock(route: str, answer: Callable[[MockRequest], Any] | MockResponse | object) -> MockRule:
    """A rule for requests matching `route` (`[METHOD ]GLOB`): `answer` is called with each
    `MockRequest` (a callable, sync or async), or is the response itself; the strings
    `"recorded"` and `"live"` mean what they mean on the command line."""
    method, pattern = split_route(route)
    text = f"{route}=<python>"
    if answer in (MockKind.RECORDED, MockKind.LIVE):
        return MockRule(f"{route}={answer}", method, pattern, MockKind(str(answer)))
    if callable(answer):
        name = getattr(answer, "__qualname__", type(answer).__name__)
        return MockRule(f"{route}=<{name}>", method, pattern, MockKind.CALLABLE, handler=answer)
    return MockRule(text, method, pattern, MockKind.STATIC, static=as_response(answer))


def parse_mock(text: str, *, base_dir: Path = Path()) -> MockRule:
    """A rule from `ROUTE=SPEC`."""
    route, sep, spec = text.partition("=")
    route, spec = route.strip(), spec.strip()
    if not sep or not route or not spec:
        raise ConfigError(f"--mock {text!r}: expected ROUTE=SPEC, e.g. 'GET /tools/x*=@reply.json'")
    method, pattern = split_route(route)
    if spec in (MockKind.RECORDED, MockKind.LIVE):
        return MockRule(text, method, pattern, MockKind(spec))
    if spec.startswith("@") or not looks_like_ref(spec):
        path = base_dir / spec.removeprefix("@")
        return MockRule(text, method, pattern, MockKind.STATIC, static=_load_static(path, text))
    handler = load_function(spec, what=f"--mock {text!r}")
    return MockRule(text, method, pattern, MockKind.CALLABLE, handler=handler)


def _load_static(path: Path, text: str) -> MockResponse:
    """A response file: `{"status", "headers", "body"}`, any other JSON (the body), or raw bytes."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ConfigError(f"--mock {text!r}: cannot read {path}: {error.strerror}") from error
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return MockResponse(200, (("content-type", "application/octet-stream"),), raw)
    if isinstance(value, dict) and "body" in value and set(value) <= {"status", "headers", "body"}:
        headers = tuple((str(k), str(v)) for k, v in (value.get("headers") or {}).items())
        body = value["body"]
        if isinstance(body, str):
            return MockResponse(
                int(value.get("status", 200)),
                headers or (("content-type", "text/plain"),),
                body.encode(),
            )
        return MockResponse(int(value.get("status", 200)), headers or JSON, orjson.dumps(body))
    return MockResponse(200, JSON, orjson.dumps(value))
