"""The base-URL front door: an aiohttp server that turns requests into engine actions.

It translates an aiohttp request into the engine's `Request`, asks `decide`, and carries out
the action: stream the upstream's response to the agent chunk by chunk while teeing it into an
exchange, serve a recorded exchange, or answer with the engine's error. It holds no replay
logic of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import assert_never

from aiohttp import web

from forkpoint.doors.control import PREFIX as CONTROL_PREFIX
from forkpoint.doors.control import Control
from forkpoint.engine.decide import (
    DEFAULT_MAX_BODY,
    RUN_HEADER,
    EngineConfig,
    Fail,
    Forward,
    Mock,
    Request,
    Serve,
    decide,
)
from forkpoint.engine.dialects import dialect_for
from forkpoint.engine.encoding import decode_headers, header
from forkpoint.engine.mocks import MockRequest, run_mock
from forkpoint.engine.pace import Pace
from forkpoint.engine.redaction import REDACTED, end_to_end, redact_headers
from forkpoint.errors import ConfigError, UpstreamError
from forkpoint.models import Chunk, Exchange, Headers
from forkpoint.runtime.recording.recorder import Recorder
from forkpoint.runtime.sessions import Sessions
from forkpoint.runtime.snapshots import Snapshotter
from forkpoint.runtime.upstream import Sender

log = logging.getLogger(__name__)

RUN_PREFIX = "/r/"


class Gateway:
    def __init__(
        self,
        *,
        sessions: Sessions,
        config: EngineConfig,
        sender: Sender,
        recorder: Recorder,
        snapshotter: Snapshotter,
        pace: Pace = Pace(),
        max_body: int = DEFAULT_MAX_BODY,
    ):
        self.sessions = sessions
        self.snapshotter = snapshotter
        self.control = Control(snapshotter, recorder)
        self.config = config
        self.sender = sender
        self.recorder = recorder
        self.pace = pace
        self.max_body = max_body
        self.app = web.Application(client_max_size=max_body)
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        run_id, route = split_run(request.raw_path, request.headers.get(RUN_HEADER))
        try:
            session = self.sessions.get(run_id)
        except ConfigError as error:
            return web.json_response({"error": {"message": str(error)}}, status=400)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            message = f"forkpoint: request body over the {self.max_body} byte limit (--max-body)"
            return web.json_response({"error": {"message": message}}, status=413)
        if route.startswith(CONTROL_PREFIX):
            return await self.control.handle(request, session, route)
        ours = Request(request.method, route, decode_headers(request.raw_headers), body)
        action = decide(session, ours, self.config)
        match action:
            case Forward():
                pulls = self.snapshotter.on_request(
                    session.run.id, action.record.step, llm=action.llm
                )
                return await self._forward(request, action, pulls)
            case Serve():
                return await self._serve(request, action)
            case Mock():
                pulls = self.snapshotter.on_request(session.run.id, action.record.step, llm=False)
                return await self._mock(request, action, pulls)
            case Fail():
                self.recorder.submit(action.record)
                return web.Response(status=action.status, headers=action.headers, body=action.body)
            case _:
                assert_never(action)

    async def _forward(
        self, request: web.Request, action: Forward, pulls: list[asyncio.Task[None]]
    ) -> web.StreamResponse:
        record = action.record
        started = time.perf_counter()
        try:
            upstream = await self.sender.send(
                request.method, action.url, action.headers, action.body
            )
        except UpstreamError as error:
            return self._upstream_failed(record, error, started)
        record.ttfb_ms = _ms_since(started)
        if pulls:  # the agent's state must be read before it sees the answer
            await asyncio.gather(*pulls)
        record.status = upstream.status
        passed = end_to_end(upstream.headers)
        record.response_headers = redact_headers(passed, self.config.redact_headers)
        response = web.StreamResponse(status=upstream.status, headers=passed)
        streamed = _is_stream(upstream.headers)
        chunks: list[Chunk] = []
        received_all = submitted = False

        def submit() -> None:
            nonlocal submitted
            if not submitted:
                submitted = True
                upstream.release()
                record.duration_ms = _ms_since(started)
                record.response_body = b"".join(c.data for c in chunks)
                record.chunks = chunks if streamed else None
                self.recorder.submit(record)

        try:
            await response.prepare(request)
            async for data in upstream.chunks():
                chunks.append(Chunk(_ms_since(started), data))
                await response.write(data)
            received_all = True
            submit()  # before the body's end: once the agent has its answer, it is on record
            await response.write_eof()
        except UpstreamError as error:
            record.complete, record.error = False, str(error)
            _abort(request)
        except ConnectionError as error:
            # SDKs hang up as soon as they read `[DONE]`, before the body's end marker: the
            # exchange is complete if the upstream's whole response was passed on.
            if not received_all:
                record.complete, record.error = False, f"client disconnected: {error}"
        finally:
            submit()
        return response

    def _upstream_failed(
        self, record: Exchange, error: UpstreamError, started: float
    ) -> web.Response:
        status, headers, body = upstream_failed(
            record, f"forkpoint: {error}", timeout=error.timeout
        )
        record.duration_ms = _ms_since(started)
        self.recorder.submit(record)
        return web.Response(status=status, headers=headers, body=body)

    async def _serve(self, request: web.Request, action: Serve) -> web.StreamResponse:
        recorded, record = action.recorded, action.record
        started = time.perf_counter()
        headers = take_recorded(record, recorded)
        response = web.StreamResponse(status=recorded.status or 502, headers=headers)
        sent_all = False
        submitted = not action.keep  # a resume's own steps are on record already

        def submit() -> None:
            nonlocal submitted
            if not submitted:
                submitted = True
                record.duration_ms = _ms_since(started)
                self.recorder.submit(record)

        try:
            await response.prepare(request)
            record.ttfb_ms = _ms_since(started)
            if recorded.chunks is None:
                await response.write(recorded.response_body)
            else:
                record.chunks = []
                for chunk in recorded.chunks:
                    await self._wait_for(chunk.offset_ms, started)
                    record.chunks.append(Chunk(_ms_since(started), chunk.data))
                    await response.write(chunk.data)
            sent_all = True
            submit()
            if recorded.complete:
                await response.write_eof()
            else:  # it was cut when recorded: cut it again, so the agent sees what it saw
                _abort(request)
        except ConnectionError as error:
            if not sent_all:
                record.complete, record.error = False, f"client disconnected: {error}"
        finally:
            submit()
        return response

    async def _mock(
        self, request: web.Request, action: Mock, pulls: list[asyncio.Task[None]]
    ) -> web.Response:
        status, headers, body = await answer_mock(action)
        if pulls:
            await asyncio.gather(*pulls)
        self.recorder.submit(action.record)
        return web.Response(status=status, headers=headers, body=body)

    async def _wait_for(self, offset_ms: float, started: float) -> None:
        if self.pace.factor is None:
            return
        delay = offset_ms / 1000 / self.pace.factor - (time.perf_counter() - started)
        if delay > 0:
            await asyncio.sleep(delay)


# What a front door answers, and records, for an action: shared with the interceptor.


def upstream_failed(
    record: Exchange, message: str, *, timeout: bool = False
) -> tuple[int, Headers, bytes]:
    """Record an upstream that sent no response as the dialect's 502 (504 when it timed out)."""
    status = 504 if timeout else 502
    dialect = dialect_for(record.method, record.route.partition("?")[0])
    headers, body = dialect.error_response(status, message, error_type="forkpoint_upstream")
    record.status, record.response_headers, record.response_body = status, headers, body
    record.error, record.complete = message, False
    return status, headers, body


def take_recorded(record: Exchange, recorded: Exchange) -> Headers:
    """Record the recorded response served; the headers to send, redacted ones left out."""
    record.status, record.response_headers = recorded.status, recorded.response_headers
    record.response_body, record.error = recorded.response_body, recorded.error
    record.complete, record.upstream = recorded.complete, recorded.upstream
    record.summary = recorded.summary
    return tuple((k, v) for k, v in recorded.response_headers if v != REDACTED)


async def answer_mock(action: Mock) -> tuple[int, Headers, bytes]:
    """Run the mock's callable for the request and record its answer."""
    record, ours = action.record, action.request
    started = time.perf_counter()
    try:
        answer = await run_mock(
            action.rule, MockRequest(ours.method, ours.route, ours.headers, ours.body)
        )
        status, headers, body = answer.status, answer.headers, answer.body
    except Exception as error:  # the user's code: any failure becomes a clear 500
        message = f"forkpoint: mock {action.rule.text!r} raised {type(error).__name__}: {error}"
        log.warning("%s (run %s, step %d)", message, record.run_id, record.step)
        dialect = dialect_for(record.method, record.route.partition("?")[0])
        headers, body = dialect.error_response(500, message, error_type="forkpoint_mock")
        status, record.error = 500, message
    record.status, record.response_headers, record.response_body = status, headers, body
    record.ttfb_ms = record.duration_ms = _ms_since(started)
    return status, headers, body


def split_run(raw_path: str, run_header: str | None) -> tuple[str | None, str]:
    """The run id named by a `/r/<id>/` prefix (or the run header) and the route after it."""
    if raw_path.startswith(RUN_PREFIX):
        run_id, _, rest = raw_path[len(RUN_PREFIX) :].partition("/")
        return run_id, "/" + rest
    return run_header, raw_path


def _is_stream(headers: Headers) -> bool:
    content_type = header(headers, "content-type") or ""
    return content_type.startswith("text/event-stream") or header(headers, "content-length") is None


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
