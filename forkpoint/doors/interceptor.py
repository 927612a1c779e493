"""The HTTPS_PROXY front door: a mitmproxy addon that turns intercepted flows into engine actions.

Agents reach tool endpoints (search, CRM, payments) at hosts they do not let you configure; run
with `HTTPS_PROXY` pointed here, all of that traffic reaches the same engine, cassette, replay,
fork and mock logic as the gateway's. Like the gateway, the addon translates and carries out:
a flow becomes the engine's `Request`, and the action comes back as mitmproxy's — let it go
upstream (the response streamed to the agent and teed chunk by chunk into the exchange, never
buffered), or answer it here with a recorded, mocked or error response.

Routes. An intercepted request's route is `/{host[:port]}{path}`, e.g.
`/api.search.example/v1/query?q=x`, and its upstream is the flow's own origin: the interceptor
hands the engine a `Routes` whose one prefix is that host. So `forkpoint show` names the host,
fingerprints tell hosts apart (replay serves each host its own answers, offline), mocks match a
host by glob (`api.search.example/*` against the upstream, `*/v1/query` against either), and
dialects still find `/v1/chat/completions` at the end of the path. A fork's `--upstream` moves
LLM requests as it does in the gateway. The scheme is not in the route: http and https
requests to one host are the same endpoint.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import assert_never
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

import orjson
from mitmproxy import connection, http, tcp, tls

from forkpoint.doors.gateway import (
    _is_stream,
    _ms_since,
    answer_mock,
    take_recorded,
    upstream_failed,
)
from forkpoint.engine.decide import (
    RUN_HEADER,
    EngineConfig,
    Fail,
    Forward,
    Mock,
    Request,
    Routes,
    Serve,
    decide,
)
from forkpoint.engine.encoding import decode_headers
from forkpoint.engine.redaction import end_to_end, redact_headers
from forkpoint.errors import ConfigError
from forkpoint.models import Chunk, Exchange, Headers
from forkpoint.runtime.recording.recorder import Recorder
from forkpoint.runtime.sessions import Sessions
from forkpoint.runtime.snapshots import Snapshotter

log = logging.getLogger(__name__)

_PENDING = "forkpoint"  # flow.metadata key of a forwarded flow's `_Forwarding`
_JSON = (("content-type", "application/json"),)


@dataclass(eq=False, slots=True)
class _Forwarding:
    """A forwarded flow's exchange, completed as its response passes through."""

    record: Exchange
    started: float
    pulls: list[asyncio.Task[None]]
    submit: Callable[[Exchange], None]
    chunks: list[Chunk] = field(default_factory=list)
    streamed: bool = False
    length: int | None = None  # the body's content-length, when it has one
    received: int = 0
    done: bool = False

    def tee(self, data: bytes) -> bytes:
        """mitmproxy's `response.stream` callable: each chunk is kept and passed on as is."""
        if data:  # b"" marks the end of the body
            self.chunks.append(Chunk(_ms_since(self.started), data))
            self.received += len(data)
            if self.received == self.length:
                # The agent has the whole body once this goes out, before mitmproxy's response
                # hook runs: the exchange is handed over first. (A chunked body's end marker
                # goes out after the hook.)
                self.finish()
        return data

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        record = self.record
        record.duration_ms = _ms_since(self.started)
        record.response_body = b"".join(c.data for c in self.chunks)
        record.chunks = self.chunks if self.streamed else None
        self.submit(record)


class Interceptor:
    """The addon: each flow in, one engine decision, the action carried out through mitmproxy."""

    def __init__(
        self,
        *,
        sessions: Sessions,
        config: EngineConfig,
        recorder: Recorder,
        snapshotter: Snapshotter,
    ):
        self.sessions = sessions
        self.config = config
        self.recorder = recorder
        self.snapshotter = snapshotter
        # The run named by a CONNECT's proxy credentials holds for its whole tunnel.
        self._runs: WeakKeyDictionary[connection.Client, str] = WeakKeyDictionary()

    def http_connect(self, flow: http.HTTPFlow) -> None:
        run_id = proxy_user(flow.request.headers)
        if run_id is not None:
            self._runs[flow.client_conn] = run_id

    async def request(self, flow: http.HTTPFlow) -> None:
        headers = flow.request.headers
        if headers.get("upgrade"):  # a websocket: not an exchange, so it is not recorded
            for name in (RUN_HEADER, "proxy-authorization"):
                headers.pop(name, None)
            return
        run_id = headers.get(RUN_HEADER) or proxy_user(headers) or self._runs.get(flow.client_conn)
        try:
            session = self.sessions.get(run_id)
        except ConfigError as error:
            body = orjson.dumps({"error": {"message": f"forkpoint: {error}"}})
            flow.response = _response(400, _JSON, body)
            return
        route, routes = route_of(flow.request)
        ours = Request(
            flow.request.method,
            route,
            decode_headers(headers.fields),
            flow.request.raw_content or b"",
        )
        action = decide(session, ours, dataclasses.replace(self.config, routes=routes))
        match action:
            case Forward():
                pulls = self.snapshotter.on_request(
                    session.run.id, action.record.step, llm=action.llm
                )
                _rewrite(flow.request, action)
                started = time.perf_counter()
                pending = _Forwarding(action.record, started, pulls, self.recorder.submit)
                flow.metadata[_PENDING] = pending
            case Serve():
                self._serve(flow, action)
            case Mock():
                pulls = self.snapshotter.on_request(session.run.id, action.record.step, llm=False)
                status, answer_headers, body = await answer_mock(action)
                if pulls:
                    await asyncio.gather(*pulls)
                self.recorder.submit(action.record)
                flow.response = _response(status, answer_headers, body)
            case Fail():
                self.recorder.submit(action.record)
                flow.response = _response(action.status, action.headers, action.body)
            case _:
                assert_never(action)

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        pending = flow.metadata.get(_PENDING)
        if pending is None or flow.response is None:
            return
        record = pending.record
        record.ttfb_ms = _ms_since(pending.started)
        if pending.pulls:  # the agent's state must be read before it sees the answer
            await asyncio.gather(*pending.pulls)
        headers = decode_headers(flow.response.headers.fields)
        record.status = flow.response.status_code
        record.response_headers = redact_headers(end_to_end(headers), self.config.redact_headers)
        pending.streamed = _is_stream(headers)
        length = flow.response.headers.get("content-length", "")
        pending.length = int(length) if length.isdigit() else None
        flow.response.stream = pending.tee

    def response(self, flow: http.HTTPFlow) -> None:
        pending = flow.metadata.pop(_PENDING, None)
        if pending is not None:
            pending.finish()

    def error(self, flow: http.HTTPFlow) -> None:
        pending = flow.metadata.pop(_PENDING, None)
        if pending is None or pending.done:  # a hang-up after the whole body: complete
            return
        message = flow.error.msg if flow.error else "unknown error"
        record = pending.record
        if record.status is None:  # no response head: the upstream could not be reached
            upstream_failed(record, f"forkpoint: upstream {record.upstream}: {message}")
            record.duration_ms = _ms_since(pending.started)
            self.recorder.submit(record)
            return
        record.complete, record.error = False, message
        pending.finish()

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        log.warning("forkpoint: websocket %s passes through unrecorded", flow.request.url)

    def tcp_start(self, flow: tcp.TCPFlow) -> None:
        address = flow.server_conn.address
        target = f"{address[0]}:{address[1]}" if address else "an unknown host"
        log.warning("forkpoint: non-HTTP traffic to %s passes through unrecorded", target)

    def tls_failed_client(self, data: tls.TlsData) -> None:
        log.warning(
            "forkpoint: a client refused the interceptor's certificate for %s: it does not "
            "trust forkpoint's CA (run `forkpoint ca` to see it); nothing was recorded",
            data.conn.sni or "a host",
        )

    def _serve(self, flow: http.HTTPFlow, action: Serve) -> None:
        recorded, record = action.recorded, action.record
        started = time.perf_counter()
        headers = take_recorded(record, recorded)
        # mitmproxy sends the body at once; the chunks keep their boundaries, not their pacing.
        flow.response = _response(recorded.status or 502, headers, recorded.response_body)
        record.ttfb_ms = record.duration_ms = _ms_since(started)
        if recorded.chunks is not None:
            record.chunks = [Chunk(record.ttfb_ms, c.data) for c in recorded.chunks]
        if action.keep:
            self.recorder.submit(record)


def route_of(request: http.Request) -> tuple[str, Routes]:
    """The engine's route for an intercepted request, and routes that send it to its origin."""
    parts = urlsplit(request.url)
    return f"/{parts.netloc}{request.path}", Routes(
        prefixes={parts.netloc: f"{parts.scheme}://{parts.netloc}"}
    )


def proxy_user(headers: http.Headers) -> str | None:
    """The user name of Basic proxy credentials (`HTTPS_PROXY=http://RUN@host:port`)."""
    scheme, _, token = headers.get("proxy-authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user = base64.b64decode(token, validate=True).decode().partition(":")[0]
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user or None


def _rewrite(request: http.Request, action: Forward) -> None:
    """Send what the engine decided: its headers (hop-by-hop and forkpoint's own gone, proxy
    credentials with them), its body and URL (a fork's change applied)."""
    host, url = request.headers.get("host"), request.url
    request.headers = http.Headers(_fields(action.headers))
    if host is not None:
        request.headers.insert(0, "Host", host)
    if action.body or request.raw_content:
        request.raw_content = action.body
        request.headers["content-length"] = str(len(action.body))
    if action.url != url:
        request.url = action.url


def _response(status: int, headers: Headers, body: bytes) -> http.Response:
    """A response whose body is sent as given: recorded bodies keep their content-encoding."""
    response = http.Response.make(status, b"", _fields(headers))
    response.raw_content = body
    response.headers["content-length"] = str(len(body))
    return response


def _fields(headers: Headers) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
