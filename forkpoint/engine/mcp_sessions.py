"""MCP sessions across a fork (streamable HTTP up to revision 2025-11-25): the session id the
client holds, and the one the live server gave.

A replayed `initialize` hands the client the session id of the recording (`Mcp-Session-Id`),
which the client then sends with every request. A fork's live requests would carry it to a
server that never issued it, which answers 404. So the first live request that carries an id a
served exchange handed out goes after a handshake (`Handshake`): the front door sends the
recorded `initialize` (and `notifications/initialized`) to the live server with the request's
own headers (its credentials, which the recording masked), and from then on the session's live
requests carry the live server's id in place of the recorded one (`Session.mcp_sessions`). The
client keeps the id it was handed. A DELETE of a recorded session the live server never had
ends nothing there, and is answered here.

Revision 2026-07-28 has no sessions: its requests carry no id, and nothing here applies.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from forkpoint.engine.dialects import jsonrpc
from forkpoint.engine.encoding import header
from forkpoint.models import Exchange, Headers

SESSION_HEADER = "mcp-session-id"


@dataclass(frozen=True, slots=True)
class Handshake:
    """What opens a live session for recorded id `recorded`: the recorded `initialize` and
    `notifications/initialized` bodies, sent with `headers` (the live request's, no id)."""

    recorded: str
    initialize: bytes
    initialized: bytes | None
    headers: Headers
    sessions: dict[str, str]

    def opened(self, live: str | None, forward: Headers) -> Headers:
        """The live server answered with session `live`: kept for the recorded id, and the
        headers of the request to forward, carrying it."""
        if live is None:  # a server without sessions: the request goes without one
            return _without(forward)
        self.sessions[self.recorded] = live
        return with_session(forward, live)


def live_headers(
    sessions: dict[str, str], served: Iterable[Exchange], source: Iterable[Exchange],
    headers: Headers,
) -> tuple[Headers, Handshake | None]:  # fmt: skip
    """The headers a live request goes upstream with: the live id for a recorded one already
    mapped; else, for an id a served exchange handed out, the request as it is and the
    handshake that must come first; else as they are (an id the live server gave)."""
    recorded = header(headers, SESSION_HEADER)
    if recorded is None:
        return headers, None
    if recorded in sessions:
        return with_session(headers, sessions[recorded]), None
    opener = next((e for e in served if _hands_out(e, recorded)), None)
    if opener is None:
        return headers, None
    initialized = next((e.request_body for e in source if _initialized(e, recorded)), None)
    handshake = Handshake(recorded, opener.request_body, initialized, _without(headers), sessions)
    return headers, handshake


def with_session(headers: Headers, session_id: str) -> Headers:
    return (*_without(headers), (SESSION_HEADER, session_id))


def _without(headers: Headers) -> Headers:
    return tuple((k, v) for k, v in headers if k.lower() != SESSION_HEADER)


def _hands_out(exchange: Exchange, session_id: str) -> bool:
    return header(exchange.response_headers, SESSION_HEADER) == session_id


def _initialized(exchange: Exchange, session_id: str) -> bool:
    found = jsonrpc.parse(exchange.request_body)
    return (
        found is not None
        and found.method == "notifications/initialized"
        and header(exchange.request_headers, SESSION_HEADER) == session_id
    )
