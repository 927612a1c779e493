"""How the gateway's answers reach an agent: the `Reply` protocol every door carries the tee's
commands out over, its aiohttp implementation, and forkpoint's own errors before a decision.

`WebReply` holds a response's head back until its first body bytes (`_Response`), so a whole
answer goes out in one write, as aiohttp's `web.Response` does.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp import web

from forkpoint.engine.decide import error_reply
from forkpoint.models import Headers


class Reply(Protocol):
    """How a door carries out the tee's commands for its agent. `response` is what an
    aiohttp handler returns, when the answer is aiohttp's own (control, websockets)."""

    response: web.StreamResponse | None

    async def head(self, status: int, headers: Headers) -> None: ...

    async def body(self, data: bytes) -> None:
        """Raises ConnectionError when the agent is gone."""
        ...

    async def end(self) -> None: ...

    def drop(self) -> None:
        """Break the connection: the head sent (if any) reaches the agent, then the cut."""
        ...

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        """forkpoint's own answer, before any decision (a bad run id, a body too large)."""
        ...


class _Response(web.StreamResponse):
    """A response whose head goes out in one write with its first body bytes when they are at
    hand (a whole answer usually is), as aiohttp's `web.Response` does: one send, not two."""

    _send_headers_immediately = False


class WebReply:
    """The reply over an aiohttp connection."""

    def __init__(self, request: web.Request):
        self._request = request
        self.response: web.StreamResponse | None = None

    async def head(self, status: int, headers: Headers) -> None:
        self.response = _Response(status=status, headers=headers)
        await self.response.prepare(self._request)
        # no later than the loop's next pass, if no body bytes carry it before
        asyncio.get_running_loop().call_soon(_send_head, self._request)

    async def body(self, data: bytes) -> None:
        assert self.response is not None
        await self.response.write(data)

    async def end(self) -> None:
        assert self.response is not None
        await self.response.write_eof()

    def drop(self) -> None:
        _send_head(self._request)  # a head the source sent reaches the agent before the cut
        if self._request.transport is not None:
            self._request.transport.abort()

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        self.response = web.Response(status=status, headers=headers, body=body)


def _send_head(request: web.Request) -> None:
    """Send a response head still held back (see `_Response`)."""
    send = getattr(request.writer, "send_headers", None)  # aiohttp >= 3.12
    if send is None:
        return
    try:  # noqa: SIM105 (a `suppress` is an object and two calls more, each response)
        send()
    except ConnectionError:  # the agent is gone: the tee's loop finds out
        pass


async def refuse(
    reply: Reply, method: str, route: str, status: int, message: str, error_type: str
) -> None:
    """forkpoint's own error before any decision, over a door's reply."""
    headers, body = error_reply(method, route, status, message, error_type=error_type)
    await reply.whole(status, headers, body)


def error_response(
    method: str, route: str, status: int, message: str, error_type: str
) -> web.Response:
    """forkpoint's own error before any decision (a bad run id, a body too large), in the shape
    of the API the request was for."""
    headers, body = error_reply(method, route, status, message, error_type=error_type)
    return web.Response(status=status, headers=headers, body=body)
