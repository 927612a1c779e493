"""Reading a request body off the agent's connection: whole when it is small (most are), else
in pieces as it arrives (an upload), in time and within --max-body either way.

Time. The agent has `--client-timeout` to send its body, counted while forkpoint waits on it
(`Budget`), never restarted by a byte: a body trickled a byte at a time is cut there, with a
408. Waiting on a slow upstream to take a body does not count: that is --read-timeout's.
(Its head is bounded by aiohttp's keep-alive timer, which runs from the moment the connection
waits for a request, and is not restarted by a byte either.)

Size. A body held whole (`engine.pieces.hold_limit`: JSON up to 32 MiB, any other up to
4 MiB) is read as today, into one `bytes`. Past that an `Arriving` reads the rest as it
comes: each byte goes to the engine's `Upload` (held part, pieces spilled to the recorder as
they fill, fingerprint) and, for a live session, on to the upstream as it is read, so memory
stays flat whatever the body's size. A replay reads it to its end before it decides (it
matches a body whole); one that may go live on it keeps a copy aside in a temporary file.

A body that never arrives whole (too large, too slow, its agent gone) is not recorded: the
agent gets forkpoint's error (413, 408) if it is still there, as for a small body, and once
its step was numbered the log names it. One the
upstream answered before it had read it all (a 413 of its own) is read on to its end, unless
its agent stops sending once answered (curl does): then the exchange is recorded with the body
as far as it came, and a note saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, TypeVar

from aiohttp import StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError

from forkpoint.doors.pieces import Spilling
from forkpoint.engine.config import EngineConfig
from forkpoint.engine.decide import error_reply
from forkpoint.engine.encoding import (
    TooLargeToDecode,
    UnknownEncoding,
    decode_body,
    decode_headers,
)
from forkpoint.engine.pieces import REQUEST_HOLD, hold_limit
from forkpoint.engine.session import Session
from forkpoint.engine.uploads import Reading, Upload, reading
from forkpoint.models import Blob, Exchange, Headers

__all__ = ["ANSWERED_STALL", "Arriving", "Budget", "Refused", "check_start", "read_body"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a body the upstream already answered is waited on without a byte (s): an agent
# that stops sending once answered (curl, on an error status) is not held for its timeout.
ANSWERED_STALL = 1.0
# How much of a spooled body is written to its file at once, and read back at once (bytes).
SPOOL_WRITE = 1 << 20


# A control request's body is small JSON, never an upload: its refusal (a 413).
CONTROL_BODY = ("forkpoint: a control request's body is small JSON, not an upload",
                "forkpoint_body_too_large")  # fmt: skip


class Refused(Exception):
    """A request body forkpoint will not take: its answer (in the API's shape), no record."""

    def __init__(self, status: int, message: str, error_type: str):
        super().__init__(message)
        self.status, self.message, self.error_type = status, message, error_type

    async def answer(self, request: web.Request, route: str) -> web.Response:
        """The answer over aiohttp, then the connection closed, since the rest of the body
        will not be read. Too large: aiohttp reads (and drops) what the agent is still sending
        for a while first, so the answer is not lost to a reset. Too slow: at once, or a
        trickling agent would hold its connection that while longer."""
        headers, body = error_reply(
            request.method, route, self.status, self.message, error_type=self.error_type
        )
        response = web.Response(status=self.status, headers=headers, body=body)
        response.force_close()
        if self.status == 408 and request.transport is not None:
            await response.prepare(request)
            await response.write_eof()
            request.protocol.force_close()  # the answer is flushed, then the connection closed
        return response


def too_large(max_body: int) -> Refused:
    message = f"forkpoint: request body over the {max_body} byte limit (--max-body)"
    return Refused(413, message, "forkpoint_body_too_large")


def too_slow(timeout: float) -> Refused:
    message = f"forkpoint: the request body did not arrive within {timeout:g} s (--client-timeout)"
    return Refused(408, message, "forkpoint_client_timeout")


class Budget:
    """The time an agent may still take to send its request, spent while forkpoint waits on
    it (s); TimeoutError once none is left."""

    def __init__(self, seconds: float):
        self.total = self.left = seconds

    async def wait(self, waiting: Awaitable[T], *, cap: float | None = None) -> T:
        """`waiting`, given at most what is left (and at most `cap`)."""
        allowed = self.left if cap is None else min(self.left, cap)
        if allowed <= 0:
            raise TimeoutError
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            async with asyncio.timeout(None if allowed == math.inf else allowed):
                return await waiting
        finally:
            self.left -= loop.time() - began


async def read_body(request: web.Request, *, max_body: int, timeout: float) -> bytes | Arriving:
    """The request's body whole, or once past its hold limit, an `Arriving` for the rest.
    Raises Refused."""
    content = request.content
    if content.is_eof():  # it came whole with the head (most do): nothing to wait for
        data = content.read_nowait()
        if len(data) > max_body:
            raise too_large(max_body)
        return data
    length = request.content_length
    if length is not None and length > max_body:
        raise too_large(max_body)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    parts: list[bytes] = []
    size, limit = 0, REQUEST_HOLD
    try:
        async with asyncio.timeout_at(deadline):
            while data := await content.readany():
                size += len(data)
                if size > max_body:
                    raise too_large(max_body)
                parts.append(data)
                if size > limit and limit == REQUEST_HOLD:  # JSON is held longer
                    limit = hold_limit(decode_headers(request.raw_headers), parts[0])
                if size > limit:
                    budget = Budget(timeout)
                    budget.left = deadline - loop.time()
                    source = _Connection(content, length)
                    return Arriving(source, parts, budget=budget, max_body=max_body)
    except TimeoutError:
        raise too_slow(timeout) from None
    return b"".join(parts)


def check_start(start: bytes, content_encoding: str | None) -> None:
    """Raise UndecodableBody when the start of a body in pieces is not what its encoding says
    (the rest is the upstream's to judge: it is not held to be decoded whole)."""
    with contextlib.suppress(UnknownEncoding, TooLargeToDecode):
        decode_body(start, content_encoding, partial=True)


class _Connection:
    """An upload's bytes from the agent's connection; a copy kept aside in a temporary file
    when asked (`keep`), read back in the order it came."""

    def __init__(self, content: StreamReader, length: int | None):
        self._content = content
        self.length = length  # the Content-Length the agent gave, if any
        self._spool: IO[bytes] | None = None
        self._pending = bytearray()

    async def read(self) -> bytes:
        return await self._content.readany()

    async def keep(self, data: bytes) -> None:
        self._pending += data
        if len(self._pending) >= SPOOL_WRITE:
            await self._write()

    async def kept(self) -> AsyncIterator[bytes]:
        await self._write()
        spool = self._spool
        if spool is None:
            return
        await asyncio.to_thread(spool.seek, 0)
        while data := await asyncio.to_thread(spool.read, SPOOL_WRITE):
            yield data

    async def _write(self) -> None:
        if not self._pending:
            return
        data, self._pending = bytes(self._pending), bytearray()
        if self._spool is None:
            self._spool = await asyncio.to_thread(_spool_file)
        await asyncio.to_thread(self._spool.write, data)

    def discard(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        self._pending = bytearray()


def _spool_file() -> IO[bytes]:
    """A file no other process can open (unlinked at once), gone when closed."""
    return tempfile.TemporaryFile(prefix="forkpoint-upload-")


class _Whole:
    """An upload a door already holds whole (the in-process door's): read a window at a time,
    so it is recorded as one read off a socket would be, and kept as it is."""

    def __init__(self, body: bytes, at: int):
        self._body, self._at = body, at
        self.length: int | None = len(body)

    async def read(self) -> bytes:
        data = self._body[self._at : self._at + SPOOL_WRITE]
        self._at += len(data)
        return data

    async def keep(self, data: bytes) -> None:
        pass

    async def kept(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self._body), SPOOL_WRITE):
            yield self._body[start : start + SPOOL_WRITE]

    def discard(self) -> None:
        pass


class Arriving:
    """A request body past its hold limit: its first parts read, the rest still to come."""

    def __init__(
        self,
        source: _Connection | _Whole,
        first: list[bytes],
        *,
        budget: Budget,
        max_body: int,
    ):
        self._source = source
        self.start = first[0] if len(first) == 1 else b"".join(first)  # read before the limit
        self._budget = budget
        self._max_body = max_body
        self._size = len(self.start)
        self._lock = asyncio.Lock()  # one reader at a time: the upstream's, or the door's
        self._upload: Upload | None = None
        self._spill: Callable[[list[Blob]], Awaitable[None]] | None = None
        self._started = 0.0
        self._reading = Reading.STREAM
        self._sending = True  # the upstream still takes what is read
        self.whole = False  # read to its end
        self.refused: Refused | None = None  # why it will not be

    @classmethod
    def of(cls, body: bytes, limit: int, *, max_body: int) -> Arriving:
        """A body a door holds whole, read as one arriving past `limit`."""
        first = body[: limit + 1]
        source = _Whole(body, len(first))
        return cls(source, [first], budget=Budget(math.inf), max_body=max_body)

    @property
    def streams(self) -> bool:
        """Whether the upstream gets it from `sent` (not whole in the decided request)."""
        return self._reading is not Reading.HOLD

    @property
    def length(self) -> int | None:
        """The body's length as its agent gave it (Content-Length), if it did."""
        return self._source.length

    async def begin(
        self,
        session: Session,
        request: tuple[str, str, Headers],
        config: EngineConfig,
        spilling: Spilling,
        started: float,
    ) -> tuple[bytes, Upload]:
        """Start recording it, read as its session needs it (`engine.uploads.reading`): the
        body the engine decides on (its start, or held whole all of it) and its upload.
        `request`: its method, route and headers. Raises Refused."""
        method, route, headers = request
        upload = Upload(method, config.redaction.route(route), headers, config.redaction)
        how = reading(session, method, route, config)
        self._upload, self._spill, self._started = upload, spilling.spill_all, started
        self._reading = how
        return await self._begin(how), upload

    async def _begin(self, how: Reading) -> bytes:
        await self._take(self.start)
        if how is Reading.STREAM:
            return self.start
        if how is Reading.SPOOL:
            await self._source.keep(self.start)
        held = [self.start] if how is Reading.HOLD else []
        self._sending = False
        while data := await self._read():
            if how is Reading.SPOOL:
                await self._source.keep(data)
            elif how is Reading.HOLD:
                held.append(data)
        return b"".join(held) if how is Reading.HOLD else self.start

    async def sent(self) -> AsyncIterator[bytes]:
        """The body for the upstream: as it arrives (streaming), or as it was kept (a replay
        that went live on it)."""
        assert self._reading is not Reading.DRAIN, "a replay that never goes live drained it"
        if self._reading is Reading.SPOOL:
            async for data in self._source.kept():
                yield data
            return
        yield self.start
        while self._sending and (data := await self._read()):
            if not self._sending:
                return
            yield data

    async def settle(self, exchange: Exchange, *, answered: bool) -> bool:
        """Before `exchange` is committed: its body read to the end (what the upstream did not
        take too), then named on it (pieces, fingerprint). False when it did not arrive whole
        and the agent got no answer: it is not recorded."""
        self._sending = False
        if not self.whole and self.refused is None:
            with contextlib.suppress(Refused):
                while await self._read(cap=ANSWERED_STALL if answered else None):
                    pass
        upload = self._upload
        assert upload is not None
        if not upload.ended:  # broke off: what came is all there is
            await self._spilled(upload.close())
        exchange.request_pieces, exchange.fingerprint = upload.pieces, upload.fingerprint
        if self.whole:
            return True
        why = self.refused.message if self.refused is not None else "its agent stopped sending"
        if not answered:
            log.warning("forkpoint: run %s step %d is not recorded: %s",
                        exchange.run_id, exchange.step, why)  # fmt: skip
            return False
        exchange.note = (
            f"the request body is recorded as far as it came ({upload.size} bytes): the "
            f"upstream answered before its end, then {why.removeprefix('forkpoint: ')}"
        )
        return True

    def discard(self) -> None:
        """Let go of a copy kept aside."""
        self._source.discard()

    async def _read(self, *, cap: float | None = None) -> bytes:
        """The next bytes of the body, taken into the record; b"" at its end, or when the
        agent sent nothing for `cap` s. Raises Refused (kept in `refused`)."""
        async with self._lock:
            if self.whole or self.refused is not None:
                if self.refused is not None:
                    raise self.refused
                return b""
            try:
                data = await self._budget.wait(self._source.read(), cap=cap)
            except TimeoutError:
                if cap is not None and self._budget.left > 0:
                    return b""  # stopped sending: not a refusal
                self.refused = too_slow(self._budget.total)
                raise self.refused from None
            except (OSError, HttpProcessingError) as error:  # gone, or its framing broke
                self.refused = Refused(400, f"forkpoint: the agent's body broke off: {error}",
                                       "forkpoint_body")  # fmt: skip
                raise self.refused from None
            if not data:
                self.whole = True
                assert self._upload is not None
                await self._spilled(self._upload.close())
                return b""
            self._size += len(data)
            if self._size > self._max_body:
                self.refused = too_large(self._max_body)
                raise self.refused
            await self._take(data)
            return data

    async def _take(self, data: bytes) -> None:
        assert self._upload is not None
        at = round((time.perf_counter() - self._started) * 1000, 3)
        await self._spilled(self._upload.add(data, at))

    async def _spilled(self, blobs: list[Blob]) -> None:
        if blobs:
            assert self._spill is not None
            await self._spill(blobs)
