"""The engine decides, the front doors act: sans-io record, replay and fork logic.

Given a session and a request, `decide` returns one action — forward it upstream (with the
fork's change applied), serve a recorded or mocked exchange, run a mock callable, or fail with
a divergence report — together with the exchange record the front door completes and hands to
the recorder. It imports no aiohttp, mitmproxy or sqlite, so every rule here is tested with
plain data.

A session replays its source run while it is not live: a request is answered with the earliest
unserved recorded exchange that has its fingerprint. It goes live at its fork step (a fork),
at the first request the recording lacks when the divergence policy is `live`, or never (a
replay, where such a request fails). A recording session is live from its first step.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from forkpoint.engine import changes, matching
from forkpoint.engine.changes import Change
from forkpoint.engine.dialects import GENERIC, dialect_for
from forkpoint.engine.divergence import Divergence, find_divergence
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.matching import MatchConfig
from forkpoint.engine.mocks import MockKind, MockRule, first_match
from forkpoint.engine.redaction import (
    CREDENTIAL_HEADERS,
    CREDENTIAL_QUERY,
    end_to_end,
    redact_headers,
    redact_route,
)
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Headers, Mode, Origin, Run, RunStatus, Snapshot

RUN_HEADER = "x-forkpoint-run"
# Headers the gateway owns: never forwarded upstream.
GATEWAY_HEADERS = frozenset({RUN_HEADER, "host", "content-length"})
DIVERGENCE_STATUS = 400
# The largest request body a front door accepts (it reads a request whole, to match it).
DEFAULT_MAX_BODY = 256 * 1024 * 1024


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

    def resolve(self, route: str, *, default: str | None = None) -> str | None:
        """The upstream URL for a route, or None when no upstream serves it. `default`
        overrides every upstream (a fork's `--upstream` for its LLM requests)."""
        segment, _, rest = route.lstrip("/").partition("/")
        if segment in self.prefixes:
            return _join(default or self.prefixes[segment], "/" + rest)
        base = default or self.default
        return None if base is None else _join(base, route)


def _join(base: str, route: str) -> str:
    return base.rstrip("/") + (route if route.startswith("/") else "/" + route)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    routes: Routes = Routes()
    match: MatchConfig = MatchConfig()
    redact_headers: frozenset[str] = CREDENTIAL_HEADERS
    redact_query: frozenset[str] = CREDENTIAL_QUERY


class OnDivergence(StrEnum):
    """What a replaying session does with a request its recording lacks."""

    FAIL = "fail"
    LIVE = "live"


@dataclass(frozen=True, slots=True)
class Forward:
    url: str
    headers: Headers
    body: bytes
    record: Exchange
    llm: bool = False


@dataclass(frozen=True, slots=True)
class Serve:
    """Answer with `recorded` (a recorded exchange, or a mock's static response); `keep` is
    False when the run already holds it (a resume serving its own steps)."""

    recorded: Exchange
    record: Exchange
    keep: bool = True


@dataclass(frozen=True, slots=True)
class Mock:
    """Answer with what the rule's callable returns for the request."""

    rule: MockRule
    request: Request
    record: Exchange


@dataclass(frozen=True, slots=True)
class Fail:
    status: int
    headers: Headers
    body: bytes
    record: Exchange
    divergence: Divergence | None = None


Action = Forward | Serve | Mock | Fail


@dataclass(eq=False)
class Session:
    """The proxy's live view of one run: its mode, next step and what is left to replay."""

    run: Run
    source: list[Exchange] = field(default_factory=list)
    fork_step: int | None = None
    on_divergence: OnDivergence = OnDivergence.FAIL
    change: Change = Change()
    next_step: int = 0
    live: bool = True
    # A resume appends to its own run: served steps are not written again, live ones follow them.
    appending: bool = False
    # Per adapter, the snapshot an agent that registers gets back (fork and resume).
    restore_points: dict[str, Snapshot] = field(default_factory=dict)
    _unserved: dict[str, deque[Exchange]] = field(default_factory=dict)

    @property
    def mode(self) -> Mode:
        return self.run.mode

    def load(self, source: list[Exchange], config: EngineConfig) -> None:
        """Index a recorded run to replay; fingerprints are recomputed under today's config."""
        self.source = source
        self.live = self.fork_step == 0
        self._unserved.clear()
        for exchange in source:
            exchange.fingerprint = matching.fingerprint(
                exchange.method,
                exchange.route,
                exchange.request_body,
                exchange.content_encoding,
                config.match,
            )
            self._unserved.setdefault(exchange.fingerprint, deque()).append(exchange)

    def take(self, key: str, *, before: int | None = None) -> Exchange | None:
        """The earliest unserved recorded exchange with this fingerprint (and a step < before)."""
        queue = self._unserved.get(key)
        if not queue or (before is not None and queue[0].step >= before):
            return None
        return queue.popleft()

    def unserved(self) -> list[Exchange]:
        return sorted((e for q in self._unserved.values() for e in q), key=lambda e: e.step)

    def go_live(self, step: int) -> int:
        """Serve live from now on; the step number the live request gets."""
        self.live = True
        if self.appending:
            step = self.next_step = max(step, len(self.source))
            self.next_step += 1
            return step
        if self.fork_step is None or step < self.fork_step:
            self.fork_step = step
        self.run.fork_step = self.fork_step
        return step


def restore(session: Session, adapter: str) -> tuple[Snapshot | None, list[Exchange]]:
    """An agent's adapter registered: the snapshot it gets back, if any, and the source steps
    that snapshot stands for (before its step), which a fork records as replayed.

    The agent resumes from the snapshot's step, so the session skips ahead to it.
    """
    snapshot = session.restore_points.get(adapter)
    if snapshot is None or session.live or session.next_step > 0:
        return None, []
    session.next_step = snapshot.step
    skipped = [e for e in session.source if e.step < snapshot.step]
    for exchange in skipped:
        queue = session._unserved.get(exchange.fingerprint)
        if queue and exchange in queue:
            queue.remove(exchange)
    if session.appending:
        return snapshot, []
    return snapshot, [_replayed_copy(session, e) for e in skipped]


def decide(session: Session, request: Request, config: EngineConfig) -> Action:
    step = session.next_step
    session.next_step += 1
    route = redact_route(request.route, config.redact_query)
    # Matching needs the fingerprint now; a live request's is left to the recorder.
    key = (
        ""
        if session.live and not session.change.mocks
        else matching.fingerprint_of(
            request.method, route, request.body, request.headers, config.match
        )
    )
    # What the next hop gets; recorded too, with credentials masked (host and length are the
    # proxy's own, not the agent's).
    passed = end_to_end(request.headers, drop=GATEWAY_HEADERS)
    record = Exchange(
        run_id=session.run.id,
        step=step,
        method=request.method,
        route=route,
        request_headers=redact_headers(passed, config.redact_headers),
        request_body=request.body,
        fingerprint=key,
    )
    if not session.live:
        if session.fork_step is not None and step >= session.fork_step:
            record.step = session.go_live(step)
        elif (recorded := session.take(key, before=session.fork_step)) is not None:
            record.origin = Origin.REPLAYED
            return Serve(recorded, record, keep=not session.appending)
        elif session.on_divergence is OnDivergence.LIVE:
            record.step = session.go_live(step)
        else:
            return _diverge(session, request, record, config)
    return _live(session, request, passed, record, config)


def _replayed_copy(session: Session, exchange: Exchange) -> Exchange:
    return dataclasses.replace(exchange, run_id=session.run.id, origin=Origin.REPLAYED)


def _live(
    session: Session, request: Request, passed: Headers, record: Exchange, config: EngineConfig
) -> Action:
    change = session.change
    url = config.routes.resolve(request.route)
    rule = first_match(change.mocks, request.method, request.route, url)
    if rule is not None and rule.kind is not MockKind.LIVE:
        return _mock(session, rule, request, record, config)
    dialect = dialect_for(request.method, request.route.partition("?")[0])
    body, headers = request.body, passed
    if dialect is not GENERIC:
        if change.upstream:
            url = config.routes.resolve(request.route, default=change.upstream)
        if change.rewrites():
            try:
                body = changes.apply(change, dialect.name, _plain(request))
            except ConfigError as error:
                return _fail(record, 400, f"forkpoint: {error}", "forkpoint_change")
            if body != request.body:
                headers = tuple((k, v) for k, v in headers if k.lower() != "content-encoding")
    if url is None:
        message = (
            f"forkpoint has no upstream for {request.route}; "
            "start it with --upstream URL or --route NAME=URL"
        )
        return _fail(record, 502, message, "forkpoint_no_upstream")
    # The record keeps the body as the agent sent it: that is what a replay or a fork of this
    # run will be asked again; what went upstream is that body with the run's change applied.
    record.upstream = redact_route(url, config.redact_query)
    return Forward(url, headers, body, record, llm=dialect is not GENERIC)


def _plain(request: Request) -> bytes:
    """The request body without its content-encoding, so a change can rewrite it."""
    try:
        return decode_body(request.body, header(request.headers, "content-encoding"))
    except UndecodableBody:
        return request.body


def _mock(
    session: Session, rule: MockRule, request: Request, record: Exchange, config: EngineConfig
) -> Action:
    record.origin = Origin.MOCKED
    if rule.kind is MockKind.CALLABLE:
        return Mock(rule, request, record)
    if rule.kind is MockKind.RECORDED:
        recorded = session.take(record.fingerprint)
        if recorded is None:
            fail = _diverge(session, request, record, config)
            fail.record.error = f"mock {rule.text!r}: {fail.record.error}"
            return fail
        return Serve(recorded, record)
    assert rule.static is not None
    static = Exchange(
        run_id=session.run.id,
        step=record.step,
        method=request.method,
        route=record.route,
        request_headers=(),
        request_body=b"",
        fingerprint=record.fingerprint,
        status=rule.static.status,
        response_headers=rule.static.headers,
        response_body=rule.static.body,
    )
    return Serve(static, record)


def _diverge(session: Session, request: Request, record: Exchange, config: EngineConfig) -> Fail:
    session.run.status = RunStatus.DIVERGED
    divergence = find_divergence(
        run_id=session.run.id,
        source_run_id=session.run.parent_id or session.run.id,
        step=record.step,
        method=request.method,
        route=record.route,
        body=request.body,
        content_encoding=header(request.headers, "content-encoding"),
        unserved=session.unserved(),
        match=config.match,
    )
    fail = _fail(record, DIVERGENCE_STATUS, divergence.message(), "forkpoint_divergence")
    return Fail(fail.status, fail.headers, fail.body, fail.record, divergence)


def _fail(record: Exchange, status: int, message: str, error_type: str) -> Fail:
    dialect = dialect_for(record.method, record.route.partition("?")[0])
    # The dialect's error carries `x-should-retry: false`: a divergence never heals by retrying.
    headers, body = dialect.error_response(status, message, error_type=error_type)
    record.origin = Origin.DIVERGED if error_type == "forkpoint_divergence" else Origin.LIVE
    record.status, record.response_headers, record.response_body = status, headers, body
    record.error = message
    return Fail(status, headers, body, record)
