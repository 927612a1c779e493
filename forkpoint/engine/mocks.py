"""Tool mocks for forks: rules matched per request, and what a mock's answer may be.

A rule's ROUTE is `[METHOD ]GLOB`; the glob is tried against the request's path
(`/tools/refund-policy`) and against the upstream's host and path (`api.example.com/v1/search`).
Its answer is a static response, a callable (sync or async, given a `MockRequest`), `recorded`
(the parent run's response to the same request) or `live` (exempt from the mocks after it).
Rules are built from text or Python values by `forkpoint.api.mocks`; the front door runs the
callables.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import orjson

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


def split_route(text: str) -> tuple[str | None, str]:
    """`[METHOD ]GLOB` as (METHOD or None, GLOB)."""
    method_text, _, pattern = text.strip().rpartition(" ")
    return method_text.strip().upper() or None, pattern


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
