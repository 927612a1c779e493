"""Tool mocks for forks: rules matched per request, and what a mock's answer may be.

A rule's ROUTE is `[METHOD ]GLOB`; the glob is tried against the request's path
(`/tools/refund-policy`) and against the upstream's host and path (`api.example.com/v1/search`).
`mcp:GLOB` names MCP tools instead: the glob is tried against the name a `tools/call` calls,
over HTTP or stdio, and the answer is the tool's result (`engine.mcp.tool_answer`).
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
MCP_TOOL = "mcp:"  # a ROUTE that names MCP tools


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

    @property
    def tool(self) -> str | None:
        """The MCP tool a `tools/call` calls (None for any other request)."""
        params = _params(self.body)
        name = params.get("name")
        return name if isinstance(name, str) else None

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments of an MCP `tools/call` (empty for any other request)."""
        arguments = _params(self.body).get("arguments")
        return arguments if isinstance(arguments, dict) else {}


def _params(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return {}
    params = value.get("params") if isinstance(value, dict) else None
    return params if isinstance(params, dict) else {}


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

    @property
    def tool(self) -> str | None:
        """The glob of MCP tool names an `mcp:GLOB` rule mocks; None for a route's rule."""
        return self.pattern.removeprefix(MCP_TOOL) if self.pattern.startswith(MCP_TOOL) else None

    def matches(
        self, method: str, route: str, upstream_url: str | None, *, tool: str | None = None
    ) -> bool:
        """Whether the rule takes a request; `tool` is the MCP tool it calls, if any."""
        if self.tool is not None:
            return tool is not None and fnmatch.fnmatchcase(tool, self.tool)
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
    rules: tuple[MockRule, ...],
    method: str,
    route: str,
    upstream_url: str | None,
    *,
    tool: str | None = None,
) -> MockRule | None:
    if not rules:  # most sessions: no mocks
        return None
    return next(
        (rule for rule in rules if rule.matches(method, route, upstream_url, tool=tool)), None
    )


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
