"""Running a mock's callable: sync ones on a worker thread, so the event loop never waits."""

from __future__ import annotations

import asyncio
import inspect

from forkpoint.engine.mocks import MockRequest, MockResponse, MockRule, as_response


async def run_mock(rule: MockRule, request: MockRequest) -> MockResponse:
    """Call the rule's handler for `request` and normalize what it returns."""
    assert rule.handler is not None
    if inspect.iscoroutinefunction(rule.handler):
        result = await rule.handler(request)
    else:
        result = await asyncio.to_thread(rule.handler, request)
        if inspect.isawaitable(result):
            result = await result
    return as_response(result)
