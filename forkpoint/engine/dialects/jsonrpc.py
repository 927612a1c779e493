"""JSON-RPC 2.0 framing, in one place: what a message is, and how it is carried.

MCP speaks JSON-RPC over two transports. Over stdio each message is one line of JSON; over
streamable HTTP a POST carries one message and its answer is one JSON object or a stream of
server-sent events, one message per event. forkpoint's MCP door (stdio) and its dialect (HTTP)
read and write messages through these functions only, so a message is framed the same way
wherever it travels, and a served answer can take the ids the client sent this time.

A message is read leniently: anything that is not one JSON-RPC 2.0 object is None, never an
exception (bodies come from agents, servers and broken connections). A batch (an array, which
MCP dropped in 2025-06-18) is not a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from forkpoint.engine.dialects.sse import parse_events
from forkpoint.models import Chunk

# Standard JSON-RPC error codes, and the one forkpoint answers with (an internal error: the
# request could not be answered, which is what a divergence or a missing upstream is).
INTERNAL_ERROR = -32603
# The longest stdio line forkpoint reads: a message past it is a broken peer, not a message.
MAX_LINE = 64 * 1024 * 1024
_SSE_EVENT_ENDS = (b"\r\n\r\n", b"\n\n", b"\r\r")
_OBJECT = re.compile(rb"\s*\{")
# Where a body's `"jsonrpc"` member is looked for: in its first and last 4 KiB (the Python SDK
# writes it first, the TypeScript SDK after `params`), so a model API's request (megabytes,
# perhaps) is not read through to learn it is none.
_MEMBER = b'"jsonrpc"'
_LOOK = 4096


class Kind(StrEnum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"  # a result or an error


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message: its kind, id (requests and responses), method (requests and
    notifications) and params; `value` is the whole object as read."""

    kind: Kind
    value: dict[str, Any]

    @property
    def id(self) -> Any:
        return self.value.get("id")

    @property
    def method(self) -> str | None:
        method = self.value.get("method")
        return method if isinstance(method, str) else None

    @property
    def params(self) -> dict[str, Any]:
        params = self.value.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def result(self) -> Any:
        return self.value.get("result")

    @property
    def error(self) -> dict[str, Any] | None:
        error = self.value.get("error")
        return error if isinstance(error, dict) else None

    @property
    def progress_token(self) -> Any:
        """The token a request's progress notifications will name (in its `_meta`)."""
        meta = self.params.get("_meta")
        return meta.get("progressToken") if isinstance(meta, dict) else None


def looks_like(body: bytes) -> bool:
    """A cheap first look: whether `body` may be a JSON-RPC message (no parsing, no copy)."""
    if _OBJECT.match(body) is None:
        return False
    if len(body) <= 2 * _LOOK:  # the two ends overlap: one pass over the body
        return _MEMBER in body
    return body.find(_MEMBER, 0, _LOOK) >= 0 or body.find(_MEMBER, len(body) - _LOOK) >= 0


def read(value: Any) -> Message | None:
    """The message a parsed JSON value is, or None."""
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return None
    if isinstance(value.get("method"), str):
        return Message(Kind.REQUEST if "id" in value else Kind.NOTIFICATION, value)
    if "id" in value and ("result" in value or "error" in value):
        return Message(Kind.RESPONSE, value)
    return None


def parse(body: bytes | str) -> Message | None:
    """The message `body` holds, or None when it holds none."""
    if isinstance(body, bytes) and not looks_like(body):
        return None
    try:
        return read(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


def dumps(value: dict[str, Any]) -> bytes:
    """A message as one line of JSON (orjson writes no newline inside a value)."""
    return orjson.dumps(value)


def error(message_id: Any, message: str, *, code: int = INTERNAL_ERROR) -> bytes:
    """An error response to request `message_id` (None: to a request that cannot be named)."""
    return dumps({"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}})


def result(message_id: Any, value: Any) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": message_id, "result": value})


# stdio: one message per line


def line(message: bytes) -> bytes:
    """A message framed for stdio: its JSON, then a newline."""
    return message.rstrip(b"\r\n") + b"\n"


class Lines:
    """Splits a byte stream into lines as it arrives; a line longer than MAX_LINE raises
    ValueError (a peer that never ends a line would otherwise grow memory without end)."""

    def __init__(self, limit: int = MAX_LINE):
        self._held = bytearray()
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        self._held += data
        *whole, rest = bytes(self._held).split(b"\n")
        self._held = bytearray(rest)
        if len(self._held) > self._limit:
            raise ValueError(f"a line longer than {self._limit} bytes")
        return [item.rstrip(b"\r") for item in whole if item.strip()]

    def rest(self) -> bytes:
        """What came after the last newline (a peer that ended without one)."""
        held, self._held = bytes(self._held).strip(), bytearray()
        return held


# streamable HTTP: one message per server-sent event


def event(message: bytes) -> bytes:
    """A message framed as a server-sent event."""
    return b"event: message\ndata: " + message.rstrip(b"\r\n") + b"\n\n"


class Events:
    """Splits an event stream into the messages its events carry, as it arrives."""

    def __init__(self, limit: int = MAX_LINE):
        self._held = b""
        self._limit = limit

    def feed(self, data: bytes) -> list[bytes]:
        self._held += data
        found: list[bytes] = []
        while (end := _event_end(self._held)) is not None:
            block, self._held = self._held[:end], self._held[end:]
            found += [e.data.encode() for e in parse_events(block) if e.event in (None, "message")]
        if len(self._held) > self._limit:
            raise ValueError(f"an event longer than {self._limit} bytes")
        return [data for data in found if data.strip()]


def _event_end(data: bytes) -> int | None:
    ends = [at + len(mark) for mark in _SSE_EVENT_ENDS if (at := data.find(mark)) >= 0]
    return min(ends) if ends else None


def messages_of(body: bytes, *, streamed: bool) -> list[Message]:
    """The messages an HTTP answer carries: one JSON object, or one per event of a stream."""
    if not streamed or body.lstrip().startswith(b"{"):
        found = parse(body)
        return [] if found is None else [found]
    return [m for e in parse_events(body) if (m := parse(e.data)) is not None]


# a served answer, with the ids of this time's request


Renames = dict[str, tuple[Any, Any]]  # what to rename: "id" / "progress" -> (recorded, now)


def renamed(data: bytes, renames: Renames) -> bytes:
    """One message with the recorded request's id (in a response) and progress token (in a
    progress notification) replaced by this time's; any other message as it is."""
    found = parse(data)
    if found is None:
        return data
    value = found.value
    if found.kind is Kind.RESPONSE and "id" in renames and same_id(found.id, renames["id"][0]):
        value = {**value, "id": renames["id"][1]}
    elif found.method == "notifications/progress" and "progress" in renames:
        params = found.params
        if same_id(params.get("progressToken"), renames["progress"][0]):
            value = {**value, "params": {**params, "progressToken": renames["progress"][1]}}
    else:
        return data
    return dumps(value)


def renamed_stream(chunks: list[Chunk], renames: Renames) -> list[Chunk]:
    """A recorded event stream with each event's message renamed: an event is rewritten whole
    and sent in the chunk its last byte came in (the bytes before it in earlier chunks move
    with it), so every chunk keeps its time and the stream its order."""
    body = b"".join(chunk.data for chunk in chunks)
    out: list[Chunk] = []
    pending, at = bytearray(), 0
    for chunk in chunks:
        pending += chunk.data
        at += len(chunk.data)
        # cut `pending` after its last whole event; the rest waits for the next chunk
        cut = _last_event_end(pending)
        if cut is None and at < len(body):
            continue
        if cut is None:
            cut = len(pending)
        ready, pending = bytes(pending[:cut]), bytearray(pending[cut:])
        out.append(Chunk(chunk.offset_ms, _renamed_events(ready, renames)))
    if pending:
        last = chunks[-1].offset_ms if chunks else 0.0
        out.append(Chunk(last, _renamed_events(bytes(pending), renames)))
    return out


def _last_event_end(data: bytearray) -> int | None:
    ends = [at + len(mark) for mark in _SSE_EVENT_ENDS if (at := data.rfind(mark)) >= 0]
    return max(ends) if ends else None


def _renamed_events(block: bytes, renames: Renames) -> bytes:
    """Each `data:` line of whole events renamed; every other byte kept."""
    lines = block.split(b"\n")
    for index, text in enumerate(lines):
        if text.startswith(b"data:"):
            value = text[5:].removeprefix(b" ")
            ending = b"\r" if value.endswith(b"\r") else b""
            fresh = renamed(value.rstrip(b"\r"), renames)
            if fresh != value.rstrip(b"\r"):
                lines[index] = b"data: " + fresh + ending
    return b"\n".join(lines)


def same_id(a: Any, b: Any) -> bool:
    """Ids compare by type and value: the string "1" is not the number 1."""
    return type(a) is type(b) and a == b
