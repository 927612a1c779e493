"""The engine decides, the front doors act: what to do with one request of a session.

`decide` returns one action — forward the request upstream (the fork's change applied), serve
a recorded or mocked exchange, run a mock callable, or fail with forkpoint's own error (a
divergence report) — carrying the exchange record the response will complete (see
`lifecycle`). It imports no aiohttp, mitmproxy or sqlite, so every rule is tested with plain
data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from forkpoint.engine import changes, matching, optional
from forkpoint.engine.config import DIVERGENCE_STATUS, GATEWAY_HEADERS, EngineConfig, OnDivergence
from forkpoint.engine.dialects import GENERIC, dialect_for
from forkpoint.engine.divergence import Divergence, find_divergence
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.mocks import MockKind, MockRule, first_match
from forkpoint.engine.redaction import end_to_end
from forkpoint.engine.session import Session
from forkpoint.engine.tiers import Asked
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Headers, Mode, Origin, RunStatus, Snapshot


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the agent sent it, with the run prefix (`/r/<id>`) already removed."""

    method: str
    route: str
    headers: Headers
    body: bytes


@dataclass(frozen=True, slots=True)
class Forward:
    """Send `body` to `url`; `llm` marks a model request (a step boundary for snapshots)."""

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
    """Answer with forkpoint's own error, in the dialect's shape."""

    status: int
    headers: Headers
    body: bytes
    record: Exchange
    divergence: Divergence | None = None


Action = Forward | Serve | Mock | Fail


def snapshot_point(action: Action) -> bool | None:
    """Whether agent state may be pulled while this action is carried out: None where the
    agent gets no live answer (served, failed), else whether it is a model request."""
    match action:
        case Forward():
            return action.llm
        case Mock():
            return False
    return None


def decide(
    session: Session, request: Request, config: EngineConfig, *, step: int | None = None
) -> Action:
    """What to do with `request`, which takes step `step` (the store allocated it: other
    proxies serve the run too), or else the session's next step. One at a time per session,
    from any thread."""
    with session.deciding:
        return _decided(session, request, config, step)


def _decided(session: Session, request: Request, config: EngineConfig, step: int | None) -> Action:
    if step is None:
        step = session.next_step
    session.next_step = max(session.next_step, step + 1)
    redaction = config.redaction
    route = redaction.route(request.route)
    # What the next hop gets; recorded too, with credentials masked (host and length are the
    # proxy's own, not the agent's).
    passed = end_to_end(request.headers, drop=GATEWAY_HEADERS)
    record = Exchange(
        run_id=session.run.id,
        step=step,
        method=request.method,
        route=route,
        request_headers=redaction.headers(passed),
        # secrets masked in what is recorded; the upstream gets the body as sent
        request_body=redaction.body(request.body, request.headers),
        fingerprint="",
    )
    # Matching needs the fingerprint now; a live request's is left to the recorder.
    if not session.live or session.change.mocks:
        record.fingerprint = matching.fingerprint(
            request.method, route, record.request_body, request.headers, config.match,
            masked=True,
        )  # fmt: skip
    if not session.live:
        if (session.fork_step is not None and step >= session.fork_step) or (
            session.mode is Mode.RESUME and session.exhausted
        ):
            session.go_live(step)
        elif (recorded := _recorded(session, record, config, before=session.fork_step)) is not None:
            record.origin = Origin.REPLAYED
            session.served[step] = recorded
            return _serve(recorded, record, keep=session.keeps_served)
        elif optional.is_optional(request.method, route, config.match.optional_routes):
            return _empty_success(session, request, record)
        elif session.made_after_fork(_asked(record, config)):
            pass  # made sooner than in the parent (a concurrent side call): past the fork, live
        elif session.on_divergence is OnDivergence.LIVE:
            session.go_live(step)
        elif session.on_divergence is not OnDivergence.NEW_EPISODES:
            record.step = session.written_step(step)
            return _diverge(session, request, record, config)
    record.step = session.written_step(step)
    return _live(session, request, passed, record, config)


def _recorded(
    session: Session, record: Exchange, config: EngineConfig, *, before: int | None = None
) -> Exchange | None:
    """The recorded exchange that answers a request: by its exact fingerprint, else one that
    differs only in what its client generates, which the record's note then names."""
    recorded = session.take(record.fingerprint, before=before)
    if recorded is not None:
        return recorded
    similar = session.take_similar(_asked(record, config), before=before)
    if similar is None:
        return None
    record.note = similar.note
    return similar.exchange


def _asked(record: Exchange, config: EngineConfig) -> Asked:
    value = matching.comparable(
        record.method, record.route, record.request_body, record.request_headers, config.match
    )
    return Asked(record.method, record.route, record.fingerprint, value)


def _empty_success(session: Session, request: Request, record: Exchange) -> Serve:
    """An optional request the recording lacks (telemetry): answered, never a divergence."""
    status, headers, body = optional.empty_success(request.headers)
    record.origin = Origin.MOCKED
    record.note = "optional route the recording lacks: answered with an empty success"
    static = Exchange(
        run_id=session.run.id, step=record.step, method=request.method, route=record.route,
        request_headers=(), request_body=b"", fingerprint=record.fingerprint,
        status=status, response_headers=headers, response_body=body,
    )  # fmt: skip
    return Serve(static, record)


def restore(
    session: Session, adapter: str, *, now: float, moves_agent: bool = True
) -> tuple[Snapshot | None, list[Exchange]]:
    """An adapter registered: the snapshot it gets back, if any, and the source steps that
    snapshot stands for (before its step), which a fork records as replayed.

    The first adapter of the agent's own state that is restored sets where the agent goes on
    from; another gets its snapshot only if it is from no later than that step. An agent that
    has already sent a request is starting fresh: its prefix is being replayed instead. State
    the agent does not hold (`moves_agent=False`: a workspace) is put back as the snapshot
    nearest the fork left it, and moves nothing.
    """
    snapshot = session.restore_points.get(adapter)
    if snapshot is None or session.live:
        return None, []
    if not moves_agent:
        return snapshot, []
    if session.restored_step is not None:
        return (snapshot if snapshot.step <= session.restored_step else None), []
    if session.next_step > 0:
        return None, []
    skipped = session.skip_to(snapshot.step)
    if not session.keeps_served:
        return snapshot, []
    # They were not served, only stood for: on the clock they took no time, `now`, so the
    # fork's wall time is its own and not its parent's.
    replayed = [
        dataclasses.replace(
            e, run_id=session.run.id, origin=Origin.REPLAYED, started_at=now, ttfb_ms=0.0,
            duration_ms=0.0,
        )
        for e in skipped
    ]  # fmt: skip
    return snapshot, replayed


def error_reply(
    method: str, route: str, status: int, message: str, *, error_type: str
) -> tuple[Headers, bytes]:
    """forkpoint's own error for a request, in the shape its API's SDK raises; it carries
    `x-should-retry: false`, since retrying would only repeat it."""
    dialect = dialect_for(method, route.partition("?")[0])
    return dialect.error_response(status, message, error_type=error_type)


def _serve(recorded: Exchange, record: Exchange, *, keep: bool = True) -> Serve:
    record.upstream, record.summary = recorded.upstream, recorded.summary
    return Serve(recorded, record, keep=keep)


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
        if change.model or change.upstream:  # Gemini names the model in its path
            route = (
                dialect.with_model(request.route, change.model) if change.model else request.route
            )
            url = config.routes.resolve(route, default=change.upstream)
        if change.rewrites():
            try:
                body = changes.apply(change, dialect.name, _plain(request))
            except ConfigError as error:
                return _fail(record, 400, f"forkpoint: {error}", "forkpoint_change")
            if body != request.body:
                headers = tuple((k, v) for k, v in headers if k.lower() != "content-encoding")
            record.model_sent = change.model
    if url is None:
        message = (
            f"forkpoint has no upstream for {request.route}; "
            "start it with --upstream URL or --route NAME=URL"
        )
        return _fail(record, 502, message, "forkpoint_no_upstream")
    # The record keeps the body as the agent sent it: that is what a replay or a fork of this
    # run will be asked again; what went upstream is that body with the run's change applied.
    record.upstream = config.redaction.route(url)
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
        recorded = _recorded(session, record, config)
        if recorded is None:
            fail = _diverge(session, request, record, config)
            fail.record.error = f"mock {rule.text!r}: {fail.record.error}"
            return fail
        return _serve(recorded, record)
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
        response_headers=_with_length(rule.static.headers, rule.static.body),
        response_body=rule.static.body,
    )
    return Serve(static, record)


def _with_length(headers: Headers, body: bytes) -> Headers:
    if header(headers, "content-length") is not None:
        return headers
    return (*headers, ("content-length", str(len(body))))


def _diverge(session: Session, request: Request, record: Exchange, config: EngineConfig) -> Fail:
    session.run.status = RunStatus.DIVERGED
    asked = _asked(record, config)
    divergence = find_divergence(
        run_id=session.run.id,
        source_run_id=session.run.parent_id or session.run.id,
        step=record.step,
        asked=asked,
        unserved=[e for e in session.unserved() if not session.optional(e)],
        already_served=session.already_served(asked),
        match=config.match,
    )
    fail = _fail(record, DIVERGENCE_STATUS, divergence.message(), "forkpoint_divergence")
    return dataclasses.replace(fail, divergence=divergence)


def _fail(record: Exchange, status: int, message: str, error_type: str) -> Fail:
    headers, body = error_reply(record.method, record.route, status, message, error_type=error_type)
    record.origin = Origin.DIVERGED if error_type == "forkpoint_divergence" else Origin.LIVE
    record.error = message
    return Fail(status, headers, body, record)
