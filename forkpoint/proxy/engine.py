"""The engine decides, the front doors act: sans-io replay and record logic.

Given a session and a request, `decide` returns one action — forward it upstream, serve a
recorded exchange, or fail with a divergence report — together with the exchange record the
front door completes and hands to the recorder. It imports no aiohttp, mitmproxy or sqlite, so
every rule here is tested with plain data.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from forkpoint.cassettes.models import Exchange, Headers, Mode, Origin, Run, RunStatus
from forkpoint.proxy import matching
from forkpoint.proxy.dialects import dialect_for
from forkpoint.proxy.encoding import header
from forkpoint.proxy.matching import MatchConfig
from forkpoint.proxy.redaction import (
    CREDENTIAL_HEADERS,
    CREDENTIAL_QUERY,
    end_to_end,
    redact_headers,
    redact_route,
)

RUN_HEADER = "x-forkpoint-run"
# Headers the gateway owns: never forwarded upstream.
GATEWAY_HEADERS = frozenset({RUN_HEADER, "host", "content-length"})
DIVERGENCE_STATUS = 400


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the agent sent it, with the run prefix (`/r/<id>`) already removed."""

    method: str
    route: str
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class Routes:
    """Where requests go: by first path segment (`/anthropic/...`), else to `default`."""

    default: str | None = None
    prefixes: dict[str, str] = field(default_factory=dict)

    def resolve(self, route: str) -> str | None:
        """The upstream URL for a route, or None when no upstream serves it."""
        segment, _, rest = route.lstrip("/").partition("/")
        if segment in self.prefixes:
            return _join(self.prefixes[segment], "/" + rest)
        if self.default is None:
            return None
        return _join(self.default, route)


def _join(base: str, route: str) -> str:
    return base.rstrip("/") + (route if route.startswith("/") else "/" + route)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    routes: Routes = Routes()
    match: MatchConfig = MatchConfig()
    redact_headers: frozenset[str] = CREDENTIAL_HEADERS
    redact_query: frozenset[str] = CREDENTIAL_QUERY


@dataclass(frozen=True, slots=True)
class Forward:
    url: str
    headers: Headers
    body: bytes
    record: Exchange


@dataclass(frozen=True, slots=True)
class Serve:
    recorded: Exchange
    record: Exchange


@dataclass(frozen=True, slots=True)
class Divergence:
    run_id: str
    source_run_id: str
    step: int
    method: str
    route: str
    nearest_step: int | None
    diff: tuple[str, ...]

    def message(self) -> str:
        lines = [
            f"forkpoint divergence: run {self.run_id} replaying {self.source_run_id}, "
            f"step {self.step}: no recorded exchange matches {self.method} {self.route}."
        ]
        if self.nearest_step is None:
            lines.append(f"The recording has no unserved {self.method} request to any route.")
        else:
            lines.append(
                f"Nearest recorded exchange: step {self.nearest_step}. Body differences "
                "(recorded → this request):"
            )
            lines += [f"  {line}" for line in self.diff] or ["  (bodies equal; route differs)"]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Fail:
    status: int
    headers: Headers
    body: bytes
    record: Exchange
    divergence: Divergence | None = None


Action = Forward | Serve | Fail


@dataclass(eq=False)
class Session:
    """The proxy's live view of one run: its mode, next step and what is left to replay."""

    run: Run
    source: list[Exchange] = field(default_factory=list)
    next_step: int = 0
    _unserved: dict[str, deque[Exchange]] = field(default_factory=dict)

    @property
    def mode(self) -> Mode:
        return self.run.mode

    def load(self, source: list[Exchange], config: EngineConfig) -> None:
        """Index a recorded run for replay; fingerprints are recomputed under today's config."""
        self.source = source
        self._unserved.clear()
        for exchange in source:
            key = _fingerprint(
                exchange.method,
                exchange.route,
                exchange.request_body,
                exchange.request_headers,
                config,
            )
            self._unserved.setdefault(key, deque()).append(exchange)

    def take(self, key: str) -> Exchange | None:
        queue = self._unserved.get(key)
        return queue.popleft() if queue else None

    def unserved(self) -> list[Exchange]:
        return sorted((e for q in self._unserved.values() for e in q), key=lambda e: e.step)

    def diverge(self) -> None:
        self.run.status = RunStatus.DIVERGED


def decide(session: Session, request: Request, config: EngineConfig) -> Action:
    step = session.next_step
    session.next_step += 1
    route = redact_route(request.route, config.redact_query)
    stored_headers = redact_headers(
        end_to_end(request.headers, drop=frozenset({RUN_HEADER})), config.redact_headers
    )
    key = _fingerprint(request.method, route, request.body, request.headers, config)
    record = Exchange(
        run_id=session.run.id,
        step=step,
        method=request.method,
        route=route,
        request_headers=stored_headers,
        request_body=request.body,
        fingerprint=key,
    )
    if session.mode is Mode.REPLAY:
        recorded = session.take(key)
        if recorded is not None:
            record.origin = Origin.REPLAYED
            return Serve(recorded, record)
        return _diverge(session, request, route, record, config)
    url = config.routes.resolve(request.route)
    if url is None:
        return _fail(
            record,
            502,
            f"forkpoint has no upstream for {request.route}; "
            "start it with --upstream URL or --route NAME=URL",
            "forkpoint_no_upstream",
        )
    forward_headers = end_to_end(request.headers, drop=GATEWAY_HEADERS)
    record.upstream = redact_route(url, config.redact_query)
    return Forward(url, forward_headers, request.body, record)


def _fingerprint(
    method: str, route: str, body: bytes, headers: Headers, config: EngineConfig
) -> str:
    encoding = header(headers, "content-encoding")
    return matching.fingerprint(method, route, body, encoding, config.match)


def _diverge(
    session: Session, request: Request, route: str, record: Exchange, config: EngineConfig
) -> Fail:
    session.diverge()
    got = _comparable(request.method, route, request.body, request.headers, config)
    path = urlsplit(route).path
    same_route = [e for e in session.unserved() if e.method == request.method]
    same_route.sort(key=lambda e: (urlsplit(e.route).path != path, e.step))
    candidates = [
        (e.step, _comparable(e.method, e.route, e.request_body, e.request_headers, config))
        for e in same_route[:50]
    ]
    best = matching.nearest(got, candidates)
    divergence = Divergence(
        run_id=session.run.id,
        source_run_id=session.run.parent_id or session.run.id,
        step=record.step,
        method=request.method,
        route=route,
        nearest_step=None if best is None else best[0],
        diff=() if best is None else tuple(matching.json_diff(best[1], got)),
    )
    fail = _fail(record, DIVERGENCE_STATUS, divergence.message(), "forkpoint_divergence")
    return Fail(fail.status, fail.headers, fail.body, fail.record, divergence)


def _comparable(
    method: str, route: str, body: bytes, headers: Headers, config: EngineConfig
) -> Any:
    value = matching.parse_json(body, header(headers, "content-encoding"))
    if value is None:
        return {"route": matching.normalized_route(route), "body (not JSON)": body[:200].hex()}
    return matching.normalized_body(method, route, value, config.match)


def _fail(record: Exchange, status: int, message: str, error_type: str) -> Fail:
    dialect = dialect_for(record.method, urlsplit(record.route).path)
    # The dialect's error carries `x-should-retry: false`: a divergence never heals by retrying.
    headers, body = dialect.error_response(status, message, error_type=error_type)
    record.origin = Origin.DIVERGED if error_type == "forkpoint_divergence" else Origin.LIVE
    record.status, record.response_headers, record.response_body = status, headers, body
    record.error = message
    return Fail(status, headers, body, record)
