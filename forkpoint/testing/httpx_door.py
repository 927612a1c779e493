"""httpx clients in a test sent through the in-process door, not over the proxy's socket.

Most agents reach their models through httpx or its fork httpx2 (the openai and anthropic
SDKs use httpx2; LiteLLM and LangChain's clients httpx). While a test's proxy runs, `route`
has each installed module's own transports hand every request addressed to the proxy to
`forkpoint.doors.local` instead of opening a connection, so a cassette test costs what an
in-process cassette library costs. Nothing else changes: the request is the one the client
would have sent, the answer is the head and bytes the gateway would have written (a cut is
the client's `RemoteProtocolError`, a stall its `ReadTimeout`, each as over the socket), and
any other address, or another HTTP client, goes over the network as before.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import pytest

from forkpoint.doors.local import Answer, AsyncAnswer, Cut, LocalDoor, Routed, WireHead
from forkpoint.engine.encoding import decode_headers
from forkpoint.models import Headers

__all__ = ["MODULES", "route"]

MODULES = ("httpx", "httpx2")  # the same API, two packages


def route(monkeypatch: pytest.MonkeyPatch, door: LocalDoor, origin: tuple[str, int]) -> None:
    """Until `monkeypatch` undoes it, requests to `origin` (host, port) from each httpx-family
    module already imported take `door`. One the test imports later goes over the socket: the
    door is a shortcut, and importing httpx for a test that never uses it costs more than it
    saves (a tenth of a second: its command line imports rich)."""
    for name in MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _route(monkeypatch, module, door, origin)


def _route(
    monkeypatch: pytest.MonkeyPatch, httpx: ModuleType, door: LocalDoor, origin: tuple[str, int]
) -> None:
    sync_send = httpx.HTTPTransport.handle_request
    async_send = httpx.AsyncHTTPTransport.handle_async_request
    sync_body, async_body = _bodies(httpx)

    def handle_request(transport: Any, request: Any) -> Any:
        ours = _ours(request, origin, door)
        if ours is None:
            return sync_send(transport, request)
        answer = door.send(request.method, *ours, request.read())
        timeout = _read_timeout(request)
        try:
            head = answer.head(timeout)
        except (Cut, TimeoutError) as error:
            raise _error(httpx, error, request) from None
        return _response(httpx, head, sync_body(answer, timeout, request))

    async def handle_async_request(transport: Any, request: Any) -> Any:
        ours = _ours(request, origin, door)
        if ours is None or not _on_asyncio():  # trio's clients take the socket
            return await async_send(transport, request)
        answer = door.send_async(request.method, *ours, await request.aread())
        timeout = _read_timeout(request)
        try:
            head = await answer.head(timeout)
        except (Cut, TimeoutError) as error:
            raise _error(httpx, error, request) from None
        return _response(httpx, head, async_body(answer, timeout, request))

    monkeypatch.setattr(httpx.HTTPTransport, "handle_request", handle_request)
    monkeypatch.setattr(httpx.AsyncHTTPTransport, "handle_async_request", handle_async_request)


def _ours(request: Any, origin: tuple[str, int], door: LocalDoor) -> tuple[Routed, Headers] | None:
    """Where the request goes and its headers as sent, when it is for this door; else None."""
    url = request.url
    if url.scheme != "http" or (url.host, url.port) != origin:
        return None
    headers = decode_headers(request.headers.raw)
    routed = door.routed(url.raw_path.decode("ascii"), headers)
    return None if routed is None else (routed, headers)


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _read_timeout(request: Any) -> float | None:
    timeout: dict[str, Any] = request.extensions.get("timeout", {})
    read = timeout.get("read")
    return None if read is None else float(read)


def _response(httpx: ModuleType, head: WireHead, stream: Any) -> Any:
    return httpx.Response(
        head.status,
        headers=[(name.encode("latin-1"), value.encode("latin-1")) for name, value in head.headers],
        stream=stream,
        extensions={"http_version": b"HTTP/1.1", "reason_phrase": head.reason.encode("latin-1")},
    )


def _error(httpx: ModuleType, error: Exception, request: Any) -> Exception:
    """What the client raises over a socket for the same end of an answer."""
    if isinstance(error, TimeoutError):
        return httpx.ReadTimeout("timed out", request=request)  # type: ignore[no-any-return]
    if isinstance(error, Cut) and error.before_head:
        message = "Server disconnected without sending a response."
    else:
        message = "peer closed connection without sending complete message body"
    return httpx.RemoteProtocolError(message, request=request)  # type: ignore[no-any-return]


_BODIES: dict[str, tuple[Any, Any]] = {}


def _bodies(httpx: ModuleType) -> tuple[Any, Any]:
    """The module's byte-stream classes for an answer (its Response checks their type)."""
    if httpx.__name__ in _BODIES:
        return _BODIES[httpx.__name__]

    class SyncBody(httpx.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, answer: Answer, timeout: float | None, request: Any):
            self._answer, self._timeout, self._request = answer, timeout, request

        def __iter__(self) -> Iterator[bytes]:
            while True:
                try:
                    data = self._answer.read(self._timeout)
                except (Cut, TimeoutError) as error:
                    raise _error(httpx, error, self._request) from None
                if not data:
                    return
                yield data

        def close(self) -> None:
            self._answer.close()

    class AsyncBody(httpx.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, answer: AsyncAnswer, timeout: float | None, request: Any):
            self._answer, self._timeout, self._request = answer, timeout, request

        async def __aiter__(self) -> AsyncIterator[bytes]:
            while True:
                try:
                    data = await self._answer.read(self._timeout)
                except (Cut, TimeoutError) as error:
                    raise _error(httpx, error, self._request) from None
                if not data:
                    return
                yield data

        async def aclose(self) -> None:
            self._answer.close()

    _BODIES[httpx.__name__] = SyncBody, AsyncBody
    return SyncBody, AsyncBody
