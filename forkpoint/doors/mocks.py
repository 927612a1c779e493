"""Running a mock's callable: sync ones on a worker thread, so the event loop never waits."""

from __future__ import annotations

import asyncio
import inspect

from forkpoint.engine.mcp import tool_answer
from forkpoint.engine.mocks import MockRequest, MockResponse, MockRule, as_response


async def run_mock(rule: MockRule, request: MockRequest) -> MockResponse:
    """Call the rule's handler for `request` and normalize what it returns: for an MCP tool's
    rule, into the server's JSON-RPC response, the value returned as the tool's result."""
    assert rule.handler is not None
    if inspect.iscoroutinefunction(rule.handler):
        result = await rule.handler(request)
    else:
        result = await asyncio.to_thread(rule.handler, request)
        if inspect.isawaitable(result):
            result = await result
    response = as_response(result)
    return response if rule.tool is None else tool_answer(response, request.body)
