"""Carrying out a decided action: its events (from the upstream, a serve plan over the
cassette, a mock or forkpoint's own error) fed to the tee, and the tee's commands carried out
over the agent's `Reply` and into the recorder.

Every rule of a response's life (end, cut, hang-up, pacing, re-cutting, failures) is the
engine's `Tee`; this module only does the I/O it commands. `Carrier.carry` is the loop every
streamed chunk passes through: a body chunk is sent in line, anything else carried out by
`_carry_out`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import assert_never

from forkpoint.doors.mcp_sessions import opened
from forkpoint.doors.mocks import run_mock
from forkpoint.doors.pieces import Spilling, served
from forkpoint.doors.ports import Pieces, Recorder, Sender
from forkpoint.doors.replies import Reply
from forkpoint.doors.uploads import Arriving
from forkpoint.engine.config import FINISH_BYTES, FINISH_FOR, EngineConfig, OnHangup
from forkpoint.engine.decide import Action, Await, Fail, Forward, Mock, Serve, error_reply
from forkpoint.engine.lifecycle import (
    Body,
    Command,
    Commit,
    Cut,
    Drop,
    End,
    Event,
    HangUp,
    Head,
    Load,
    NoAnswer,
    SendBody,
    SendEnd,
    SendHead,
    Spill,
    Tee,
    Warn,
    answer,
    serve_plan,
)
from forkpoint.engine.mocks import MockRequest
from forkpoint.engine.pace import Pace
from forkpoint.errors import UpstreamError
from forkpoint.models import Origin

log = logging.getLogger(__name__)

# The largest served body a client's own thread works out whole (`Carrier.served_here`), bytes.
SERVED_HERE = 1 << 20


class Carrier:
    """Carries out the gateway's decided actions: `events` gives an action's, `carry` feeds
    them through its tee to the agent and the recorder."""

    def __init__(
        self, *, sender: Sender, recorder: Recorder, spilling: Spilling, pieces: Pieces, pace: Pace
    ):
        self.sender = sender
        self.recorder = recorder
        self._spilling = spilling
        self.pieces = pieces
        self.pace = pace

    def served_here(
        self, action: Action, config: EngineConfig, started: float
    ) -> list[Command] | None:
        """The tee's commands for the whole answer to `action`, worked out on the calling
        thread, when it serves a recorded answer with nothing to wait for: no pace, no piece
        to read, at most SERVED_HERE bytes. None: `Gateway.respond` carries it out, on the
        loop."""
        if not isinstance(action, Serve) or self.pace.factor is not None:
            return None
        recorded = action.recorded
        if recorded.pieces or len(recorded.response_body) > SERVED_HERE:
            return None
        tee = tee_for(action, config, started)
        now = time.perf_counter()
        commands: list[Command] = []
        for _, event in serve_plan(recorded):
            assert not isinstance(event, Load)  # a body with no pieces
            commands += tee.feed(event, now)
        return commands

    async def carry(
        self,
        reply: Reply,
        tee: Tee,
        events: AsyncIterator[Event],
        pulls: list[asyncio.Task[None]],
        arriving: Arriving | None,
    ) -> None:
        """Feed the action's events to the tee and carry out its commands, until the response
        ends or the agent leaves."""
        feed, send, clock = tee.feed, reply.body, time.perf_counter
        try:
            async for event in events:
                if pulls and isinstance(event, Head):
                    await asyncio.gather(*pulls)  # the agent's state is read before it is answered
                for command in feed(event, clock()):
                    if type(command) is SendBody:  # most of a stream's: sent in line
                        await send(command.data)
                    else:
                        await self._carry_out(command, reply, arriving)
        except (ConnectionError, asyncio.CancelledError) as error:
            # the agent hung up (aiohttp cancels the handler of a closed connection)
            await self._feed(tee, HangUp(str(error) or type(error).__name__), reply, arriving)
            if isinstance(error, asyncio.CancelledError):
                raise
            if tee.finishing:
                await self._read_on(tee, events, reply, arriving)
        finally:
            await events.aclose()  # type: ignore[attr-defined]

    async def _read_on(
        self, tee: Tee, events: AsyncIterator[Event], reply: Reply, arriving: Arriving | None
    ) -> None:
        """The rest of an answer whose agent hung up, recorded and sent nowhere, for at most
        FINISH_FOR seconds (the tee bounds its bytes)."""
        try:
            async with asyncio.timeout(FINISH_FOR):
                async for event in events:
                    await self._feed(tee, event, reply, arriving)
                    if tee.done:
                        return
        except TimeoutError:
            await self._feed(tee, HangUp(f"no end within {FINISH_FOR:g} s"), reply, arriving)
        except asyncio.CancelledError:  # the proxy stops: what came is kept, cut
            await self._feed(tee, HangUp("the proxy stopped"), reply, arriving)
            raise

    async def _feed(
        self, tee: Tee, event: Event, reply: Reply, arriving: Arriving | None = None
    ) -> None:
        for command in tee.feed(event, time.perf_counter()):
            await self._carry_out(command, reply, arriving)

    async def _carry_out(
        self, command: Command, reply: Reply, arriving: Arriving | None = None
    ) -> None:
        match command:
            case SendHead(status, headers):
                await reply.head(status, headers)
            case SendBody(data):
                await reply.body(data)
            case SendEnd():
                await reply.end()
            case Drop():
                reply.drop()
            case Commit(exchange):
                # an upload is named on its exchange once read to its end (doors/uploads.py)
                answered = exchange.status is not None
                if arriving is None or await arriving.settle(exchange, answered=answered):
                    self.recorder.submit(exchange)
            case Spill(blob):  # journaled before the bytes after it go out
                await self._spilling.spill(blob)
            case Warn(message):
                log.warning("forkpoint: %s", message)
            case _:
                assert_never(command)

    def events(
        self, action: Action, started: float, arriving: Arriving | None = None
    ) -> AsyncIterator[Event]:
        """The response events of `action` (`arriving`: the rest of the request's body in
        pieces, sent to the upstream as it comes)."""
        match action:
            case Forward():
                return self._forwarded(action, arriving)
            case Serve():
                return served(action.recorded, self.pace, started, self.pieces)
            case Mock():
                return self._mocked(action)
            case Fail():
                return listed(answer(action.status, action.headers, action.body))
            case Await():
                raise AssertionError("a parked request has no events (Parker.hold)")
            case _:
                assert_never(action)

    async def _forwarded(
        self, action: Forward, arriving: Arriving | None = None
    ) -> AsyncIterator[Event]:
        request = action.record
        body: bytes | AsyncIterable[bytes] = action.body
        headers = action.headers
        if arriving is not None and arriving.streams:  # its rest as it comes, or as kept
            body = arriving.sent()
            if arriving.length is not None:  # framed as the agent framed it
                headers = (*headers, ("Content-Length", str(arriving.length)))
        try:
            if action.handshake is not None:  # a fork's MCP session, opened live first
                headers = await opened(self.sender, action.url, action.handshake, headers)
            upstream = await self.sender.send(request.method, action.url, headers, body)
        except UpstreamError as error:
            refused = None if arriving is None else arriving.refused
            if refused is not None:  # the agent's body failed, not the upstream: not recorded
                log.warning("forkpoint: run %s step %d is not recorded: %s",
                            request.run_id, request.step, refused.message)  # fmt: skip
                raise refused from None
            yield NoAnswer(f"forkpoint: {error}")
            return
        try:
            yield Head(upstream.status, upstream.headers)
            try:
                async for data in upstream.chunks():
                    yield Body(data)
            except UpstreamError as error:
                yield Cut(str(error))
                return
            yield End()
        finally:
            upstream.release()

    async def _mocked(self, action: Mock) -> AsyncIterator[Event]:
        ours, record = action.request, action.record
        try:
            mocked = await run_mock(
                action.rule, MockRequest(ours.method, ours.route, ours.headers, ours.body)
            )
        except Exception as error:  # the user's code: any failure becomes a clear 500
            message = f"forkpoint: mock {action.rule.text!r} raised {type(error).__name__}: {error}"
            log.warning("%s (run %s, step %d)", message, record.run_id, record.step)
            record.error = message
            headers, body = error_reply(
                record.method, record.route, 500, message, error_type="forkpoint_mock"
            )
            events = answer(500, headers, body)
        else:
            events = answer(mocked.status, mocked.headers, mocked.body)
        for event in events:
            yield event


def tee_for(action: Action, config: EngineConfig, started: float) -> Tee:
    """The tee an action's answer goes through: what it keeps, masks and reads on."""
    keep = not isinstance(action, Serve) or action.keep
    # a cassette's answer was masked when recorded: recorded again as served
    masked = isinstance(action, Serve) and action.record.origin is Origin.REPLAYED
    # a live answer its agent leaves is read on, for a resume (`OnHangup`)
    live = isinstance(action, Forward) and config.on_hangup is OnHangup.FINISH
    return Tee(
        action.record, started, keep=keep, redaction=action.redaction,
        limit=config.max_record_body, masked=masked, finish=FINISH_BYTES if live else None,
    )  # fmt: skip


async def listed(events: list[Event]) -> AsyncIterator[Event]:
    """Events at hand, as the async iterator `Carrier.carry` reads."""
    for event in events:
        yield event
