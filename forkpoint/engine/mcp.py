"""What the engine does for MCP beyond reading it (`engine.dialects.mcp`): what matching sets
aside, how a served answer takes this run's ids, and a mocked tool's answer.

Two runs of the same agent send the same MCP requests but for values made per run: JSON-RPC
ids (each client numbers its own requests), progress tokens and trace context in `_meta`, the
id a cancellation names. Those are no part of what is asked, so the exact fingerprint drops
them (`comparable`). The similar tier sets aside more (`SET_ASIDE`): the whole `_meta` (the
client's name, version and capabilities in revision 2026-07-28) and `requestState` (the
server's opaque token of a multi round-trip request).

A served answer is the recorded one with the recorded request's id replaced by the one the
client sent this time, in its response and in the progress notifications it names
(`answered`), so the client can match it to its request. Its bytes change, so its length
header is the served body's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import orjson

from forkpoint.engine.dialects import jsonrpc
from forkpoint.engine.dialects.mcp import MCP, result_value
from forkpoint.engine.encoding import header
from forkpoint.engine.fields import drop
from forkpoint.engine.mocks import JSON, MockResponse
from forkpoint.models import Exchange, Headers

_META = "_meta"
# Values made per run, dropped before the exact fingerprint: ids and correlation tokens.
PER_RUN = (
    ("id",),
    ("params", _META, "progressToken"),
    ("params", _META, "traceparent"),
    ("params", _META, "tracestate"),
    ("params", _META, "baggage"),
)
CANCELLED = "notifications/cancelled"
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
# Set aside by the similar tier: what the client says about itself, the server's state token.
SET_ASIDE = ("params._meta", "params.requestState")


def comparable(value: Any) -> Any:
    """A JSON-RPC body without the values made per run; any other body as it is."""
    found = jsonrpc.read(value)
    if found is None:
        return value
    for path in PER_RUN:
        value = drop(value, path)
    if found.method == CANCELLED:  # names a request by its id: made per run too
        value = drop(value, ("params", "requestId"))
    return value


def set_aside(value: Any) -> Any:
    """A JSON-RPC body without what the similar tier sets aside; any other as it is."""
    if jsonrpc.read(value) is None:
        return value
    for path in SET_ASIDE:
        value = drop(value, path)
    return value


def answered(recorded: Exchange, request_body: bytes) -> Exchange:
    """The recorded answer to an MCP request, as served to `request_body`: the recorded id and
    progress token renamed to this request's (a copy; the recording stays as it is)."""
    renames = _renames(recorded.request_body, request_body)
    if not renames or recorded.pieces:
        return recorded
    if recorded.chunks is not None:
        chunks = jsonrpc.renamed_stream(recorded.chunks, renames)
        body = b"".join(chunk.data for chunk in chunks)
        if body == recorded.response_body:
            return recorded
        return dataclasses.replace(
            recorded, chunks=chunks, response_body=body,
            response_headers=_fit(recorded.response_headers, body),
        )  # fmt: skip
    body = jsonrpc.renamed(recorded.response_body, renames)
    if body == recorded.response_body:
        return recorded
    headers = _fit(recorded.response_headers, body)
    return dataclasses.replace(recorded, response_body=body, response_headers=headers)


def _renames(recorded_request: bytes, request_body: bytes) -> jsonrpc.Renames:
    was, now = jsonrpc.parse(recorded_request), jsonrpc.parse(request_body)
    if was is None or now is None or was.kind is not jsonrpc.Kind.REQUEST:
        return {}
    renames: jsonrpc.Renames = {}
    if now.kind is jsonrpc.Kind.REQUEST and not jsonrpc.same_id(was.id, now.id):
        renames["id"] = (was.id, now.id)
    old, new = was.progress_token, now.progress_token
    if old is not None and new is not None and not jsonrpc.same_id(old, new):
        renames["progress"] = (old, new)
    return renames


def _fit(headers: tuple[tuple[str, str], ...], body: bytes) -> tuple[tuple[str, str], ...]:
    """The headers of a served body whose bytes changed: a length, where there was one, that
    is the new body's."""
    if header(headers, "content-length") is None:
        return headers
    return tuple((k, str(len(body)) if k.lower() == "content-length" else v) for k, v in headers)


def tool_answer(response: MockResponse, request_body: bytes) -> MockResponse:
    """A mock's answer to a `tools/call`, as the server's JSON-RPC response to it: the mock's
    JSON (or text) as the tool's result (`dialects.mcp.result_value`)."""
    asked = jsonrpc.parse(request_body)
    message_id = None if asked is None else asked.id
    if response.status >= 400:  # a failing tool: its text, as the tool's error
        text = response.body.decode(errors="replace")
        result = {"content": [{"type": "text", "text": text}], "isError": True}
    else:
        try:
            answer: Any = orjson.loads(response.body) if response.body else ""
        except orjson.JSONDecodeError:
            answer = response.body
        result = result_value(answer)
    if asked is not None and _modern(asked):  # revision 2026-07-28 requires it of results
        result = {"resultType": "complete", **result}
    return MockResponse(200, JSON, jsonrpc.result(message_id, result))


def _modern(asked: jsonrpc.Message) -> bool:
    """Whether a request speaks revision 2026-07-28 or later: its version is in its `_meta`."""
    meta = asked.params.get(_META)
    return isinstance(meta, dict) and PROTOCOL_VERSION in meta


class Answer(NamedTuple):
    """forkpoint's own answer to a request the recording lacks, and the note it leaves."""

    status: int
    headers: Headers
    body: bytes
    note: str


def unrecorded_stream(method: str, route: str, headers: Headers) -> Answer | None:
    """The answer to an MCP session's GET stream or DELETE that a replay's recording lacks
    (revision 2025-11-25 and before; a client opens the stream again when it ends, and a
    replay ends it at once): 405, as a server without them answers, which the client takes
    in its stride; never a divergence. None for any other request."""
    if method.upper() not in ("GET", "DELETE"):
        return None
    if header(headers, "mcp-session-id") is None and not MCP.claims(
        method, route.partition("?")[0]
    ):
        return None
    note = f"an MCP session's {method.upper()} the recording lacks: answered 405"
    return Answer(405, (("allow", "POST"), ("content-length", "0")), b"", note)


# A DELETE of a recorded MCP session the live server never had (`engine.mcp_sessions`).
ENDED_HERE = Answer(
    200, (("content-length", "0"),), b"",
    "an MCP session the live server never had: its DELETE answered here",
)  # fmt: skip
