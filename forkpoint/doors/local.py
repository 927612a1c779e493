"""The in-process door: a request handed to the gateway by a client in the same process, on
another thread, and answered with no socket under it.

The pytest plugin's httpx transports (`forkpoint.testing.httpx_door`) send through it, so a
cassette test pays no connection, no HTTP framing and no parsing on either side. The gateway
answers exactly as over aiohttp (`Gateway.answer`: the same session, action and tee), and the
answer crosses back on a line, item by item: the head, as aiohttp would write it (its Date,
Server and chunked framing), each body chunk as the tee sends it, then the end or a cut. A
client that leaves early hangs up as over a socket. The gateway waits while more than
`WINDOW` bytes are unread, so a large answer is held a window at a time, not whole.

A replayed answer with nothing to wait for (its session open and numbering its own steps, no
pace, no piece to read) is worked out on the client's own thread, under the lock the loop
decides under too, and recorded there (`write_here`, for a store in memory): the client then
waits on no other thread. Handing a request to the loop's thread and the answer back costs
two wake-ups of a sleeping thread, about a millisecond a call on a shared machine.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiohttp import web
from aiohttp.helpers import must_be_empty_body, rfc822_formatted_time, should_remove_content_length
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.web_response import REASON_PHRASES

from forkpoint.doors.gateway import Decided, Gateway, Incoming
from forkpoint.engine.config import EngineConfig
from forkpoint.engine.encoding import header
from forkpoint.engine.lifecycle import (
    Command,
    Commit,
    Drop,
    SendBody,
    SendEnd,
    SendHead,
    Spill,
    Warn,
)
from forkpoint.models import Blob, Exchange, Headers

__all__ = ["WINDOW", "Answer", "AsyncAnswer", "Cut", "LocalDoor", "Routed", "WireHead"]

log = logging.getLogger(__name__)

WINDOW = 1 << 20  # bytes an answer may have unread before the gateway waits for its client


@dataclass(frozen=True, slots=True)
class WireHead:
    """A response head as it reaches the client: status, reason phrase, headers."""

    status: int
    reason: str
    headers: Headers


class Cut(ConnectionError):
    """The answer broke off, as the connection would have: `before_head` when nothing came."""

    def __init__(self, *, before_head: bool):
        super().__init__("the answer was cut" + (" before its head" if before_head else ""))
        self.before_head = before_head


_END = object()  # the body is complete
_CUT = object()  # the connection is dropped


class Routed(NamedTuple):
    """Where a request this door takes goes: its engine config, run id and route."""

    config: EngineConfig
    run_id: str | None
    route: str


class LocalDoor:
    """Hands requests to `gateway`, which runs on `loop` (another thread's). With `write_here`
    (the recorder's, when it may write from any thread), a replayed answer with nothing to
    wait for is worked out and recorded on the client's thread."""

    def __init__(
        self,
        gateway: Gateway,
        loop: asyncio.AbstractEventLoop,
        *,
        write_here: Callable[[Exchange | Blob], None] | None = None,
    ):
        self._gateway = gateway
        self._loop = loop
        self._write_here = write_here
        self._under_way: dict[Future[None], _Reply] = {}

    def close(self) -> None:
        """Hang up on every answer still under way (a client that neither read nor closed
        one), as a stopping server closes its connections: each is recorded as cut."""
        for answering, reply in list(self._under_way.items()):
            _hang_up(reply, answering)

    def routed(self, raw_path: str, headers: Headers) -> Routed | None:
        """Where the request goes, when this door can answer it; None for one that needs the
        socket (a websocket upgrade, a control endpoint)."""
        routed = Routed(*self._gateway.target(raw_path, headers))
        return routed if self._gateway.takes_without_socket(routed.route, headers) else None

    def send(self, method: str, routed: Routed, headers: Headers, body: bytes) -> Answer:
        """Start answering; the client reads the answer on its own thread."""
        line: queue.SimpleQueue[object] = queue.SimpleQueue()
        reply = _Reply(method, headers, line.put, self._loop)
        return Answer(reply, line, self._answering(reply, method, routed, headers, body))

    def send_async(self, method: str, routed: Routed, headers: Headers, body: bytes) -> AsyncAnswer:
        """Start answering; the client reads the answer on its own running loop."""
        client, here = asyncio.get_running_loop(), threading.get_ident()
        line: asyncio.Queue[object] = asyncio.Queue()

        def put(item: object) -> None:
            if threading.get_ident() == here:  # answered on the client's own loop
                line.put_nowait(item)
            else:
                client.call_soon_threadsafe(line.put_nowait, item)

        reply = _Reply(method, headers, put, self._loop)
        return AsyncAnswer(reply, line, self._answering(reply, method, routed, headers, body))

    def _answering(
        self, reply: _Reply, method: str, routed: Routed, headers: Headers, body: bytes
    ) -> Future[None]:
        """The answer under way: worked out here when nothing need wait (a replay from
        memory), else on the loop, decided here when its session allows."""
        started = time.perf_counter()
        decided = None
        if self._write_here is not None:
            incoming = Incoming(method, routed.route, headers, body)
            decided = self._gateway.decided_here(incoming, routed.config, routed.run_id)
        if decided is not None:
            commands = self._gateway.carrier.served_here(decided.action, routed.config, started)
            if commands is not None:
                return self._carried_out(commands, reply)
        return self._start(reply, method, routed, headers, body, started, decided)

    def _start(
        self,
        reply: _Reply,
        method: str,
        routed: Routed,
        headers: Headers,
        body: bytes,
        started: float,
        decided: Decided | None = None,
    ) -> Future[None]:
        answering: Coroutine[Any, Any, None]
        if decided is None:
            incoming = Incoming(method, routed.route, headers, body)
            answering = self._gateway.answer(
                incoming, reply, routed.config, routed.run_id, started=started
            )
        else:  # decided on the client's thread, carried out on the loop
            answering = self._gateway.respond(decided, reply, routed.config, started=started)
        future = asyncio.run_coroutine_threadsafe(_finished(answering, reply), self._loop)
        self._under_way[future] = reply
        future.add_done_callback(self._ended)
        return future

    def _ended(self, future: Future[None]) -> None:
        self._under_way.pop(future, None)

    def _carried_out(self, commands: list[Command], reply: _Reply) -> Future[None]:
        """Carry out a whole answer's commands here: onto the client's line, and into the
        record before its last bytes, as the gateway would. Returns it done."""
        assert self._write_here is not None
        for command in commands:
            match command:
                case SendHead(status, headers):
                    reply.put_head(status, headers)
                case SendBody(data):
                    reply.put_body(data)
                case SendEnd():
                    reply.end_now()
                case Drop():
                    reply.drop()
                case Commit(item) | Spill(item):
                    self._write_here(item)
                case Warn(message):
                    log.warning("forkpoint: %s", message)
        reply.drop()  # after its end, nothing: a client is never left waiting
        done: Future[None] = Future()
        done.set_result(None)
        return done


async def _finished(answering: Coroutine[Any, Any, None], reply: _Reply) -> None:
    """Run the gateway's answer; whatever ends it (a failure of ours included), the client
    is told, never left waiting."""
    try:
        await answering
    except asyncio.CancelledError:
        raise
    except Exception as error:  # ours: one line in the log, the client sees a cut
        log.error("forkpoint: the in-process door failed to answer: %s: %s",
                  type(error).__name__, error)  # fmt: skip
    finally:
        reply.drop()  # after its end, nothing: a client is never left waiting


class _Reply:
    """The gateway's side of the line: the tee's commands as items for the client."""

    def __init__(
        self,
        method: str,
        request_headers: Headers,
        put: Callable[[object], None],
        loop: asyncio.AbstractEventLoop,
    ):
        # never aiohttp's own: this door takes no control endpoint and no websocket
        self.response: web.StreamResponse | None = None
        self._method = method
        self._close = (header(request_headers, "connection") or "").lower() == "close"
        self._put = put
        self._loop = loop
        self._lock = threading.Lock()
        self._unread = 0
        self._room: asyncio.Event | None = None
        self._ended = False
        self.gone = False  # the client left; set from its thread

    async def head(self, status: int, headers: Headers) -> None:
        self.put_head(status, headers)

    def put_head(self, status: int, headers: Headers) -> None:
        self._put(wire_head(self._method, status, headers, close=self._close))

    def put_body(self, data: bytes) -> None:
        """Body bytes put on the line at once (an answer worked out whole, at most a window)."""
        if data:
            with self._lock:
                self._unread += len(data)
            self._put(data)

    def end_now(self) -> None:
        self._finish(_END)

    async def body(self, data: bytes) -> None:
        if self.gone:
            raise ConnectionResetError("the client closed the answer")
        if not data:
            return
        with self._lock:
            self._unread += len(data)
            room = self._room = asyncio.Event() if self._unread > WINDOW else None
        self._put(data)
        if room is not None:
            await room.wait()
            if self.gone:
                raise ConnectionResetError("the client closed the answer")

    async def end(self) -> None:
        self.end_now()

    def drop(self) -> None:
        self._finish(_CUT)

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        await self.head(status, headers)
        await self.body(body)
        await self.end()

    def _finish(self, item: object) -> None:
        if not self._ended:
            self._ended = True
            self._put(item)

    # the client's thread

    def taken(self, size: int) -> None:
        """The client read `size` bytes: room for more once the unread fall to the window."""
        with self._lock:
            self._unread -= size
            room = self._room if self._unread <= WINDOW else None
            if room is not None:
                self._room = None
        if room is not None:
            self._loop.call_soon_threadsafe(room.set)

    def leave(self) -> None:
        self.gone = True
        with self._lock:
            room, self._room = self._room, None
        if room is not None:
            self._loop.call_soon_threadsafe(room.set)


class _Reading:
    """What an answer's items mean to its client, read on a thread or on a loop."""

    def __init__(self, reply: _Reply, answering: Future[None]):
        self._reply, self._answering = reply, answering
        self._done = False

    def _head(self, item: object) -> WireHead:
        if not isinstance(item, WireHead):
            self._done = True
            raise Cut(before_head=True)
        return item

    def _chunk(self, item: object) -> bytes:
        if item is _END:
            self._done = True
            return b""
        if item is _CUT:
            self._done = True
            raise Cut(before_head=False)
        assert isinstance(item, bytes)
        self._reply.taken(len(item))
        return item

    def close(self) -> None:
        """Leave: an answer not read to its end is hung up on, as a closed connection is."""
        if not self._done:
            self._done = True
            _hang_up(self._reply, self._answering)

    def _timed_out(self, timeout: float | None) -> TimeoutError:
        self.close()
        return TimeoutError(f"no answer within {timeout:g} s")


class Answer(_Reading):
    """An answer read on the client's thread; each wait up to the client's read timeout."""

    def __init__(self, reply: _Reply, line: queue.SimpleQueue[object], answering: Future[None]):
        super().__init__(reply, answering)
        self._line = line

    def head(self, timeout: float | None) -> WireHead:
        return self._head(self._next(timeout))

    def read(self, timeout: float | None) -> bytes:
        """The next chunk of the body; b"" at its end. Raises Cut or TimeoutError."""
        return b"" if self._done else self._chunk(self._next(timeout))

    def _next(self, timeout: float | None) -> object:
        try:
            return self._line.get(timeout=timeout)
        except queue.Empty:
            raise self._timed_out(timeout) from None


class AsyncAnswer(_Reading):
    """An answer read on the client's loop; each wait up to the client's read timeout."""

    def __init__(self, reply: _Reply, line: asyncio.Queue[object], answering: Future[None]):
        super().__init__(reply, answering)
        self._line = line

    async def head(self, timeout: float | None) -> WireHead:
        return self._head(await self._next(timeout))

    async def read(self, timeout: float | None) -> bytes:
        """The next chunk of the body; b"" at its end. Raises Cut or TimeoutError."""
        return b"" if self._done else self._chunk(await self._next(timeout))

    async def _next(self, timeout: float | None) -> object:
        try:
            async with asyncio.timeout(timeout):
                return await self._line.get()
        except TimeoutError:
            raise self._timed_out(timeout) from None
        except asyncio.CancelledError:  # the client's task was cancelled: it left
            self.close()
            raise


def _hang_up(reply: _Reply, answering: Future[None]) -> None:
    """What a closed connection does to an aiohttp handler: the gateway's answer cancelled."""
    reply.leave()
    answering.cancel()  # thread-safe: a future of run_coroutine_threadsafe


def wire_head(method: str, status: int, headers: Headers, *, close: bool = False) -> WireHead:
    """The head aiohttp's server writes for a `StreamResponse` with these headers over
    HTTP/1.1 (`StreamResponse._prepare_headers`), so a client of this door reads what it
    would over the gateway's socket."""
    pairs = list(headers)
    names = {name.lower() for name, _ in pairs}
    if must_be_empty_body(method, status):
        drop = {"transfer-encoding"}
        if should_remove_content_length(method, status):
            drop.add("content-length")
        pairs = [(name, value) for name, value in pairs if name.lower() not in drop]
    else:
        if "content-length" not in names:
            pairs.append(("Transfer-Encoding", "chunked"))
        if "content-type" not in names and header(headers, "content-length") != "0":
            pairs.append(("Content-Type", "application/octet-stream"))
    if "date" not in names:
        pairs.append(("Date", rfc822_formatted_time()))
    if "server" not in names:
        pairs.append(("Server", SERVER_SOFTWARE))
    if close and "connection" not in names:
        pairs.append(("Connection", "close"))
    return WireHead(status, REASON_PHRASES.get(status, ""), tuple(pairs))
