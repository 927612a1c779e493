"""Dialects: how forkpoint reads the bodies of each API it sees, and speaks its errors.

A dialect claims requests by method and path, reads a recorded exchange into a `Summary`
(kind, model, usage, tool calls, text) and builds errors in the API's own shape so the agent's
SDK raises them. The model APIs are tried in order; `generic` takes everything else.
"""

from __future__ import annotations

import functools
from typing import Protocol
from urllib.parse import urlsplit

from forkpoint.engine.dialects import _read
from forkpoint.engine.dialects.anthropic_messages import AnthropicMessages
from forkpoint.engine.dialects.gemini import Gemini
from forkpoint.engine.dialects.generic import Generic
from forkpoint.engine.dialects.openai_chat import OpenAIChat
from forkpoint.engine.dialects.openai_completions import OpenAICompletions
from forkpoint.engine.dialects.openai_embeddings import OpenAIEmbeddings
from forkpoint.engine.dialects.openai_responses import OpenAIResponses
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.frames import WS, sse_of
from forkpoint.models import Exchange, Headers, Summary

__all__ = [
    "DIALECTS",
    "GENERIC",
    "AnthropicMessages",
    "Dialect",
    "Gemini",
    "Generic",
    "OpenAIChat",
    "OpenAICompletions",
    "OpenAIEmbeddings",
    "OpenAIResponses",
    "dialect_for",
    "summarize_exchange",
]


class Dialect(Protocol):
    name: str

    def claims(self, method: str, path: str) -> bool:
        """Whether this dialect reads `method path`; `path` has no query and may have a prefix."""
        ...

    def summarize(
        self,
        request_json: object | None,
        response_body: bytes,
        *,
        streamed: bool,
        status: int | None,
    ) -> Summary:
        """Read a decoded response (the whole SSE text for streams); never raises on garbage."""
        ...

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        """Headers and body of an error the API's SDK raises with `message` in its text."""
        ...

    def with_model(self, route: str, model: str) -> str:
        """The route of the same request for another model: unchanged where the model is in
        the body (a change rewrites it there), rewritten where it is in the path (Gemini)."""
        ...


GENERIC: Dialect = Generic()
DIALECTS: tuple[Dialect, ...] = (
    OpenAIChat(), OpenAIResponses(), AnthropicMessages(), Gemini(), OpenAIEmbeddings(),
    OpenAICompletions(),
)  # fmt: skip


@functools.lru_cache(maxsize=4096)  # an agent calls a handful of endpoints, over and over
def dialect_for(method: str, path: str) -> Dialect:
    """The first model-API dialect that claims the request, else `GENERIC`."""
    return next((d for d in DIALECTS if d.claims(method, path)), GENERIC)


def summarize_exchange(exchange: Exchange) -> Summary:
    """Summarize a recorded exchange; never raises.

    Bodies are decoded leniently: a cut-off compressed stream yields what arrived, and a body
    that cannot be decoded at all is read as empty, so the summary keeps what the rest tells.
    """
    dialect = dialect_for(exchange.method, urlsplit(exchange.route).path)
    request_body = _decoded(exchange.request_body, exchange.request_headers)
    request_json = _read.loads(request_body) if request_body else None
    if exchange.model_sent and isinstance(request_json, dict):
        request_json = {**request_json, "model": exchange.model_sent}
    if exchange.method == WS:  # its server messages are the events an SSE stream carries
        response, streamed = sse_of(exchange), True
    else:
        response = _decoded(exchange.response_body, exchange.response_headers)
        streamed = exchange.streamed
    return dialect.summarize(
        request_json,
        response,
        streamed=streamed,
        status=exchange.status,
    )


def _decoded(body: bytes, headers: Headers) -> bytes:
    try:
        return decode_body(body, header(headers, "content-encoding"), partial=True)
    except UndecodableBody:
        return b""
