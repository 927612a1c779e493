"""The engine decides, the front doors act: what to do with one request of a session.

`decide` returns one action — forward the request upstream (the fork's change applied), serve
a recorded or mocked exchange, run a mock callable, fail with forkpoint's own error (a
divergence report), or send nothing and await an answer (a park rule's request) — carrying
the exchange record the response will complete (see `lifecycle`). It imports no aiohttp,
mitmproxy or sqlite, so every rule is tested with plain data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from forkpoint.engine import changes, matching, mcp, mcp_sessions, optional, parking
from forkpoint.engine.config import DIVERGENCE_STATUS, GATEWAY_HEADERS, EngineConfig, OnDivergence
from forkpoint.engine.dialects import dialect_for, is_model_api
from forkpoint.engine.dialects.mcp import error_for, is_mcp, tool_name
from forkpoint.engine.divergence import Divergence, find_divergence
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.mocks import MockKind, MockRule, first_match
from forkpoint.engine.redaction import DEFAULT, Redaction, end_to_end
from forkpoint.engine.session import Session
from forkpoint.engine.tiers import Asked
from forkpoint.engine.uploads import Upload
from forkpoint.engine.urls import without_userinfo
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Headers, Mode, Origin, RunStatus, Snapshot


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the agent sent it, with the run prefix (`/r/<id>`) already removed.

    `upload`: a body too large to hold, read in pieces as it passes (`engine.uploads`); `body`
    is then as much of it as the door read before deciding (all of it, when its session needs
    it whole). A session that replays decides on one that has ended (its fingerprint known);
    a live one at once.
    """

    method: str
    route: str
    headers: Headers
    body: bytes
    upload: Upload | None = None


@dataclass(frozen=True, slots=True)
class Forward:
    """Send `body` to `url`; `llm` marks a model request (a step boundary for snapshots);
    `handshake`, an MCP session the live server must open first (`engine.mcp_sessions`)."""

    url: str
    headers: Headers
    body: bytes
    record: Exchange
    llm: bool = False
    redaction: Redaction = DEFAULT  # the exchange's: what its response is masked by
    handshake: mcp_sessions.Handshake | None = None


@dataclass(frozen=True, slots=True)
class Serve:
    """Answer with `recorded` (a recorded exchange, or a mock's static response); `keep` is
    False when the run already holds it (a resume serving its own steps)."""

    recorded: Exchange
    record: Exchange
    keep: bool = True
    redaction: Redaction = DEFAULT


@dataclass(frozen=True, slots=True)
class Mock:
    """Answer with what the rule's callable returns for the request."""

    rule: MockRule
    request: Request
    record: Exchange
    redaction: Redaction = DEFAULT


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer with forkpoint's own error, in the dialect's shape."""

    status: int
    headers: Headers
    body: bytes
    record: Exchange
    divergence: Divergence | None = None
    redaction: Redaction = DEFAULT


@dataclass(frozen=True, slots=True)
class Await:
    """Send nothing: the request matches a park rule (`engine.parking`), so its run parks and
    it waits for an answer delivered to forkpoint (a person's, a deadline's); `record` is the
    pending step's exchange, with no response yet."""

    record: Exchange
    waits_on: str
    redaction: Redaction = DEFAULT


Action = Forward | Serve | Mock | Fail | Await


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
    session: Session, request: Request, config: EngineConfig, *, step: int | None = None,
    known: tuple[bytes, ...] = (),
) -> Action:  # fmt: skip
    """What to do with `request`, which takes step `step` (the store allocated it: other
    proxies serve the run too), or else the session's next step. One at a time per session,
    from any thread. The action carries the exchange's redaction: the rules, knowing the
    secrets the request sent (and `known`: a websocket message's, its upgrade's), which mask
    them wherever else the exchange holds them."""
    rules = config.redaction.knowing(known)
    # What the next hop gets; recorded too, with credentials masked (host and length are the
    # proxy's own, not the agent's). The secrets it sends are those its headers carry: what
    # the gateway keeps (its own headers) never leaves it, to be echoed.
    passed = end_to_end(request.headers, drop=GATEWAY_HEADERS)
    redaction, body = rules.request(request.route, passed, request.body)
    with session.deciding:
        action = _decided(session, request, config, step, redaction, body, passed)
    if action.redaction is not redaction:  # a forward is made with it
        action = dataclasses.replace(action, redaction=redaction)
    return action


def _decided(
    session: Session, request: Request, config: EngineConfig, step: int | None,
    redaction: Redaction, masked_body: bytes, passed: Headers,
) -> Action:  # fmt: skip
    if step is None:
        step = session.next_step
    session.next_step = max(session.next_step, step + 1)
    route = redaction.route(request.route)
    upload = request.upload
    record = Exchange(
        run_id=session.run.id,
        step=step,
        method=request.method,
        route=route,
        request_headers=redaction.headers(passed),
        # secrets masked in what is recorded; the upstream gets the body as sent
        request_body=masked_body if upload is None else upload.held,
        fingerprint="",
    )  # fmt: skip
    if upload is not None:  # its fingerprint is the whole body's: the door's as it ends
        if upload.ended:
            record.fingerprint, record.request_pieces = upload.fingerprint, upload.pieces
    # Matching needs the fingerprint now; a live request's is left to the recorder.
    elif not session.live or session.change.mocks:
        record.fingerprint = matching.fingerprint(
            request.method, route, record.request_body, request.headers, config.match,
            masked=True,
        )  # fmt: skip
    if not session.live:
        if (session.fork_step is not None and step - session.early >= session.fork_step) or (
            session.mode is Mode.RESUME and session.exhausted
        ):
            session.go_live(step)
        elif (recorded := _recorded(session, record, config, before=session.fork_step)) is not None:
            record.origin = Origin.REPLAYED
            session.served[step] = recorded
            return _serve(recorded, record, request, keep=session.keeps_served)
        elif optional.is_optional(request.method, route, config.match.optional_routes):
            return _empty_success(session, request, record)
        elif (stream := mcp.unrecorded_stream(request.method, route, request.headers)) is not None:
            return _empty_success(session, request, record, stream)
        elif session.made_after_fork(_asked(record, config)):
            session.early += 1  # made sooner than in the parent (a side call): live
        elif session.on_divergence is OnDivergence.LIVE:
            session.go_live(step)
        elif session.on_divergence is not OnDivergence.NEW_EPISODES:
            record.step = session.written_step(step)
            return _diverge(session, request, record, config)
    record.step = session.written_step(step)
    return _live(session, request, passed, record, config, redaction)


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
    value = matching.comparable_exchange(record, config.match)
    return Asked(record.method, record.route, record.fingerprint, value)


def _empty_success(
    session: Session, request: Request, record: Exchange, answer: mcp.Answer | None = None
) -> Serve:
    """An optional request the recording lacks (telemetry), or an MCP session's stream:
    answered, never a divergence."""
    if answer is None:
        note = "optional route the recording lacks: answered with an empty success"
        answer = mcp.Answer(*optional.empty_success(request.headers), note)
    status, headers, body, note = answer
    record.origin = Origin.MOCKED
    record.note = note
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


def _serve(recorded: Exchange, record: Exchange, request: Request, *, keep: bool = True) -> Serve:
    record.upstream, record.summary = recorded.upstream, recorded.summary
    if is_mcp(request.method, record.route.partition("?")[0], request.body):  # this time's ids
        recorded = mcp.answered(recorded, request.body)
    return Serve(recorded, record, keep=keep)


def _live(
    session: Session, request: Request, passed: Headers, record: Exchange, config: EngineConfig,
    redaction: Redaction,
) -> Action:  # fmt: skip
    change, upload = session.change, request.upload
    url = config.routes.resolve(request.route)
    tool = tool_name(request.body) if change.mocks else None
    rule = first_match(change.mocks, request.method, request.route, url, tool=tool)
    if rule is not None and rule.kind is not MockKind.LIVE:
        return _mock(session, rule, request, record, config)
    parks = config.parking.rule_for(request.method, request.route, url) if upload is None else None
    if parks is not None:
        return _await(record, request, url, config, redaction, parks)
    dialect = dialect_for(request.method, request.route.partition("?")[0])
    body, headers = request.body, passed
    llm = is_model_api(dialect)
    if llm:
        took: frozenset[str] = frozenset()
        if change.model or change.upstream:  # Gemini and Azure name the model in the path
            route = (
                dialect.with_model(request.route, change.model) if change.model else request.route
            )
            url = config.routes.resolve(route, default=change.upstream)
            took = frozenset({"model"}) if route != request.route else took
        if change.rewrites():
            try:
                body, took_body = changes.applied(change, dialect.name, _plain(request))
            except ConfigError as error:
                return _fail(record, 400, f"forkpoint: {error}", "forkpoint_change")
            took |= took_body
            if body != request.body:
                headers = tuple((k, v) for k, v in headers if k.lower() != "content-encoding")
            if took_body and request.upload is None:  # an upload's record is in pieces as sent
                _sent(record, request, headers, body, redaction)
        session.applied |= took
        record.model_sent = change.model if "model" in took else None
    if url is None:
        message = (
            f"forkpoint has no upstream for {request.route}; "
            "start it with --upstream URL or --route NAME=URL"
        )
        return _fail(record, 502, message, "forkpoint_no_upstream")
    headers, handshake = mcp_sessions.live_headers(
        session.mcp_sessions, session.served.values(), session.source, headers
    )
    if handshake is not None and request.method.upper() == "DELETE":
        return _empty_success(session, request, record, mcp.ENDED_HERE)
    record.upstream = redaction.route(without_userinfo(url))  # its credentials: not kept
    return Forward(url, headers, body, record, llm, redaction, handshake)


def _sent(
    record: Exchange, request: Request, headers: Headers, body: bytes, redaction: Redaction
) -> None:
    """A request the change rewrote is recorded as it went upstream, masked; the body the
    agent sent is kept beside it (`asked_body`, decoded as matching reads it), since a replay
    or a fork of this run will be asked it again by the same agent."""
    asked = Request(request.method, request.route, request.headers, record.request_body)
    record.asked_body = _plain(asked)
    record.request_headers = redaction.headers(headers)
    record.request_body = redaction.body(body, headers)
def _await(
    record: Exchange, request: Request, url: str | None, config: EngineConfig,
    redaction: Redaction, rule: parking.ParkRule,
) -> Await:  # fmt: skip
    """A park rule's request: kept whole in the park, its fingerprint known (a wake serves its
    answer by it)."""
    if url is not None:
        record.upstream = redaction.route(without_userinfo(url))
    if not record.fingerprint:
        record.fingerprint = matching.fingerprint(
            request.method, record.route, record.request_body, request.headers, config.match,
            masked=True,
        )  # fmt: skip
    return Await(record, parking.waits_on_rule(rule))


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
        return _serve(recorded, record, request)
    assert rule.static is not None
    answer = rule.static if rule.tool is None else mcp.tool_answer(rule.static, request.body)
    static = Exchange(
        run_id=session.run.id,
        step=record.step,
        method=request.method,
        route=record.route,
        request_headers=(),
        request_body=b"",
        fingerprint=record.fingerprint,
        status=answer.status,
        response_headers=_with_length(answer.headers, answer.body),
        response_body=answer.body,
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
        unserved=session.left(),
        already_served=session.already_served(asked),
        match=config.match,
    )
    fail = _fail(record, DIVERGENCE_STATUS, divergence.message(), "forkpoint_divergence")
    return dataclasses.replace(fail, divergence=divergence)


def _fail(record: Exchange, status: int, message: str, error_type: str) -> Fail:
    if is_mcp(record.method, record.route.partition("?")[0], record.request_body):
        headers, body = error_for(record.request_body, message)  # answers the request's id
    else:
        headers, body = error_reply(
            record.method, record.route, status, message, error_type=error_type
        )
    record.origin = Origin.DIVERGED if error_type == "forkpoint_divergence" else Origin.LIVE
    record.error = message
    return Fail(status, headers, body, record)
