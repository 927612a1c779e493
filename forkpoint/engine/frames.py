"""WebSocket messages as exchanges: how a connection is kept in the cassette.

A websocket is a run of exchanges, with no new table: its upgrade request is one exchange
(`GET`, status 101, the server's messages sent before the agent's first one as its chunks);
then each message from the agent is one exchange of method `WS` on the same route (status 101
too: it travels on the switched connection), its message as the request body and the
server's messages that came after it, up to the agent's next one, as its chunks, one chunk per
message, each at its offset. Headers say what the
wire did that the bytes do not: whether a message was text or binary, and whether the server
closed the connection after them (with its code and reason).

So matching, the similar tier, divergence reports, redaction and `forkpoint show` read a
message like any request, and a replay answers each agent message with the server messages
that answered it when recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from forkpoint.engine.encoding import header
from forkpoint.models import Chunk, Exchange, Headers

WS = "WS"  # the method of an agent's websocket message
FRAME_HEADER = "websocket-message"  # request: "text" or "binary"
FRAMES_HEADER = "websocket-messages"  # response: each server message's kind, e.g. "text,text"
CLOSE_HEADER = "websocket-close"  # response: the server closed after them: "CODE reason"
# The handshake is each hop's own: the door makes its own key, version and extensions.
HANDSHAKE = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
     "sec-websocket-accept", "sec-websocket-protocol"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Frame:
    """One websocket message, whole (ping, pong and fragmentation are each hop's own)."""

    data: bytes
    binary: bool = False

    @property
    def kind(self) -> str:
        return "binary" if self.binary else "text"


def is_upgrade(headers: Headers) -> bool:
    """Whether a request asks to open a websocket."""
    return (header(headers, "upgrade") or "").lower() == "websocket"


def protocols(headers: Headers) -> tuple[str, ...]:
    """The subprotocols a handshake offers (or, in a response, the one it chose)."""
    offered = header(headers, "sec-websocket-protocol") or ""
    return tuple(p.strip() for p in offered.split(",") if p.strip())


def message_headers(frame: Frame) -> Headers:
    return ((FRAME_HEADER, frame.kind),)


def frames_of(exchange: Exchange) -> list[tuple[float, Frame]]:
    """The server messages a recorded exchange holds, each with its offset in ms."""
    chunks = exchange.chunks or []
    kinds = (header(exchange.response_headers, FRAMES_HEADER) or "").split(",")
    return [
        (chunk.offset_ms, Frame(chunk.data, binary=index < len(kinds) and kinds[index] == "binary"))
        for index, chunk in enumerate(chunks)
    ]


def closed_with(exchange: Exchange) -> tuple[int, str] | None:
    """The close code and reason the server sent after this exchange's messages, if it did."""
    value = header(exchange.response_headers, CLOSE_HEADER)
    if value is None:
        return None
    code, _, reason = value.partition(" ")
    return (int(code), reason) if code.isdigit() else (1000, reason)


def answered(record: Exchange, frames: list[tuple[float, Frame]], *, at: float) -> None:
    """Fill in a record with the server messages it got (offsets in ms) and when the last
    came (`at`, ms)."""
    kinds = ",".join(frame.kind for _, frame in frames)
    extra = tuple(
        (k, v) for k, v in record.response_headers if k.lower() not in {FRAMES_HEADER, CLOSE_HEADER}
    )
    record.response_headers = (*extra, (FRAMES_HEADER, kinds)) if frames else extra
    record.chunks = [Chunk(offset, frame.data) for offset, frame in frames]
    record.response_body = b"".join(frame.data for _, frame in frames)
    record.ttfb_ms = frames[0][0] if frames else record.ttfb_ms
    record.duration_ms = at


def mark_closed(record: Exchange, code: int, reason: str) -> None:
    record.response_headers = (*record.response_headers, (CLOSE_HEADER, f"{code} {reason}".strip()))


def sse_of(exchange: Exchange) -> bytes:
    """A websocket exchange's server messages as an event stream, for the dialects that read
    the same events over SSE (the Responses API)."""
    return b"".join(b"data: " + chunk.data + b"\n\n" for chunk in exchange.chunks or [])
