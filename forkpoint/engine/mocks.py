"""Tool mocks for forks: `--mock 'ROUTE=SPEC'` rules, parsed once, matched and run per request.

ROUTE is `[METHOD ]GLOB`; the glob is tried against the request's path (`/tools/refund-policy`)
and against the upstream's host and path (`api.example.com/v1/search`). SPEC is a response file
(`@policy.json`), a callable (`package.module:function`, sync or async), `recorded` (the parent
run's response to the same request) or `live` (exempt from the mocks after it).
"""

from __future__ import annotations

import asyncio
import fnmatch
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from forkpoint.errors import ConfigError
from forkpoint.models import Headers

JSON = (("content-type", "application/json"),)


class MockKind(StrEnum):
    STATIC = "static"
    CALLABLE = "callable"
    RECORDED = "recorded"
    LIVE = "live"


@dataclass(frozen=True, slots=True)
class MockRequest:
    """What a mock callable receives."""

    method: str
    route: str
    headers: Headers
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


@dataclass(frozen=True, slots=True)
class MockResponse:
    status: int = 200
    headers: Headers = JSON
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class MockRule:
    text: str
    method: str | None
    pattern: str
    kind: MockKind
    static: MockResponse | None = None
    handler: Callable[[MockRequest], Any] | None = None

    def matches(self, method: str, route: str, upstream_url: str | None) -> bool:
        if self.method and self.method != method.upper():
            return False
        path = urlsplit(route).path
        if fnmatch.fnmatchcase(path, self.pattern):
            return True
        if upstream_url:
            parts = urlsplit(upstream_url)
            return fnmatch.fnmatchcase(f"{parts.netloc}{parts.path}", self.pattern)
        return False


def first_match(
    rules: tuple[MockRule, ...], method: str, route: str, upstream_url: str | None
) -> MockRule | None:
    return next((rule for rule in rules if rule.matches(method, route, upstream_url)), None)


def parse_mock(text: str, *, base_dir: Path = Path()) -> MockRule:
    """A rule from `ROUTE=SPEC`; files are read and callables imported now, not per request."""
    route, sep, spec = text.partition("=")
    route, spec = route.strip(), spec.strip()
    if not sep or not route or not spec:
        raise ConfigError(f"--mock {text!r}: expected ROUTE=SPEC, e.g. 'GET /tools/x*=@reply.json'")
    method_text, _, pattern = route.rpartition(" ")
    method = method_text.strip().upper() or None
    if spec in (MockKind.RECORDED, MockKind.LIVE):
        return MockRule(text, method, pattern, MockKind(spec))
    if spec.startswith("@") or not _looks_like_callable(spec):
        path = base_dir / spec.removeprefix("@")
        return MockRule(text, method, pattern, MockKind.STATIC, static=_load_static(path, text))
    return MockRule(text, method, pattern, MockKind.CALLABLE, handler=_load_callable(spec, text))


def _looks_like_callable(spec: str) -> bool:
    module, sep, name = spec.partition(":")
    return bool(sep) and name.isidentifier() and all(p.isidentifier() for p in module.split("."))


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


def _load_callable(spec: str, text: str) -> Callable[[MockRequest], Any]:
    module_name, _, name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"--mock {text!r}: cannot load {spec}: {error}") from error
    if not callable(function):
        raise ConfigError(f"--mock {text!r}: {spec} is not callable")
    return function  # type: ignore[no-any-return]


async def run_mock(rule: MockRule, request: MockRequest) -> MockResponse:
    """Call a mock's handler (sync ones on a worker thread) and normalize what it returns."""
    assert rule.handler is not None
    if inspect.iscoroutinefunction(rule.handler):
        result = await rule.handler(request)
    else:
        result = await asyncio.to_thread(rule.handler, request)
        if inspect.isawaitable(result):
            result = await result
    return as_response(result)


def as_response(result: Any) -> MockResponse:
    """MockResponse as is; (status, body[, headers]); bytes; str; anything else as JSON."""
    if isinstance(result, MockResponse):
        return result
    if isinstance(result, tuple) and result and isinstance(result[0], int):
        status, body, *rest = result
        response = as_response(body)
        headers = tuple(rest[0].items()) if rest else response.headers
        return MockResponse(status, headers, response.body)
    if isinstance(result, bytes):
        return MockResponse(200, (("content-type", "application/octet-stream"),), result)
    if isinstance(result, str):
        return MockResponse(200, (("content-type", "text/plain; charset=utf-8"),), result.encode())
    return MockResponse(200, JSON, orjson.dumps(result))
