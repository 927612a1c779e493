"""Opening a live MCP session for a fork (`engine.mcp_sessions`): the recorded handshake sent
to the live server before the request that needs it."""

from __future__ import annotations

from forkpoint.doors.ports import Sender
from forkpoint.engine.encoding import header
from forkpoint.engine.mcp_sessions import SESSION_HEADER, Handshake, with_session
from forkpoint.models import Headers


async def opened(sender: Sender, url: str, handshake: Handshake, forward: Headers) -> Headers:
    """Send the handshake to `url`; the headers to forward the request with (the live
    session's id). Raises UpstreamError, as a forward does, when the server does not answer."""
    live = await _sent(sender, url, handshake.headers, handshake.initialize)
    if live is not None and handshake.initialized is not None:
        await _sent(sender, url, with_session(handshake.headers, live), handshake.initialized)
    return handshake.opened(live, forward)


async def _sent(sender: Sender, url: str, headers: Headers, body: bytes) -> str | None:
    """One message of the handshake; the session id its answer gives. The answer itself was
    the agent's long ago, from the recording: read and let go."""
    response = await sender.send("POST", url, headers, body)
    try:
        async for _ in response.chunks():
            pass
    finally:
        response.release()
    return header(response.headers, SESSION_HEADER)
