"""Dialects: how forkpoint reads the bodies of each API it sees, and speaks its errors.

A dialect claims requests by method and path, reads a recorded exchange into a `Summary`
(kind, model, usage, tool calls, text) and builds errors in the API's own shape so the agent's
SDK raises them. The model APIs are tried in order; `generic` takes everything else.
"""

from __future__ import annotations

import functools
from typing import Protocol
from urllib.parse import urlsplit

from forkpoint.engine import multipart
from forkpoint.engine.dialects import _read
from forkpoint.engine.dialects.anthropic_messages import AnthropicMessages
from forkpoint.engine.dialects.cohere import CohereChat
from forkpoint.engine.dialects.gemini import Gemini
from forkpoint.engine.dialects.generic import Generic
from forkpoint.engine.dialects.mcp import MCP, Mcp, is_mcp
from forkpoint.engine.dialects.ollama import OllamaChat, OllamaGenerate
from forkpoint.engine.dialects.openai_audio import OpenAIAudio
from forkpoint.engine.dialects.openai_chat import OpenAIChat
from forkpoint.engine.dialects.openai_completions import OpenAICompletions
from forkpoint.engine.dialects.openai_embeddings import OpenAIEmbeddings
from forkpoint.engine.dialects.openai_responses import OpenAIResponses
from forkpoint.engine.encoding import UNREAD, UndecodableBody, decode_body, header
from forkpoint.engine.frames import WS, sse_of
from forkpoint.models import Exchange, Headers, Summary

__all__ = [
    "DIALECTS",
    "GENERIC",
    "MCP",
    "AnthropicMessages",
    "CohereChat",
    "Dialect",
    "Gemini",
    "Generic",
    "Mcp",
    "OllamaChat",
    "OllamaGenerate",
    "OpenAIAudio",
    "OpenAIChat",
    "OpenAICompletions",
    "OpenAIEmbeddings",
    "OpenAIResponses",
    "dialect_for",
    "dialect_of",
    "is_model_api",
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
        the body (a change rewrites it there), rewritten where it is in the path (Gemini, an
        Azure OpenAI deployment)."""
        ...

    def model_in_route(self, route: str) -> str | None:
        """The model the route names, or None where it names none (it is in the body)."""
        ...


GENERIC: Dialect = Generic()
DIALECTS: tuple[Dialect, ...] = (
    OpenAIChat(), OpenAIResponses(), AnthropicMessages(), Gemini(), OpenAIEmbeddings(),
    OpenAICompletions(), OllamaChat(), OllamaGenerate(), CohereChat(), OpenAIAudio(),
)  # fmt: skip


@functools.lru_cache(maxsize=4096)  # an agent calls a handful of endpoints, over and over
def dialect_for(method: str, path: str) -> Dialect:
    """MCP by its route, else the first model-API dialect that claims the request, else
    `GENERIC`."""
    if MCP.claims(method, path):
        return MCP
    return next((d for d in DIALECTS if d.claims(method, path)), GENERIC)


def dialect_of(method: str, path: str, body: bytes) -> Dialect:
    """`dialect_for`, and MCP for a JSON-RPC body at any path (an MCP server's endpoint is
    its own choice)."""
    return MCP if is_mcp(method, path, body) else dialect_for(method, path)


def is_model_api(dialect: Dialect) -> bool:
    """Whether a dialect's requests are model calls (a step boundary for snapshots, what a
    fork's model, prompt and patch rewrite): not a tool API's, generic or MCP."""
    return dialect is not GENERIC and dialect is not MCP


def summarize_exchange(exchange: Exchange, request_json: object = UNREAD) -> Summary:
    """Summarize a recorded exchange; never raises.

    Bodies are decoded leniently: a cut-off compressed stream yields what arrived, and a body
    that cannot be decoded at all is read as empty, so the summary keeps what the rest tells.
    `request_json`: the request body's JSON value (None: not JSON) where the caller has read
    it already from the body as recorded, which is then not content-encoded (`engine.derive`,
    which hands the same value to the fingerprint).
    """
    if request_json is UNREAD:
        request_body = _decoded(exchange.request_body, exchange.request_headers)
        request_json = _read.loads(request_body) if request_body else None
    else:
        request_body = exchange.request_body
    dialect = dialect_of(exchange.method, urlsplit(exchange.route).path, request_body)
    form = _form(request_body, header(exchange.request_headers, "content-type")) if (
        request_json is None and dialect is not GENERIC
    ) else None
    if form is not None:  # an upload: its form's text fields, as sent (a change rewrites JSON
        request_json = form  # bodies only, so a fork's model is not claimed for it)
    # The model asked for: a fork's, else the one the path names (Gemini, Azure), else the body's.
    model = None if form is not None else (
        exchange.model_sent or dialect.model_in_route(exchange.route)
    )
    if model and (request_json is None or isinstance(request_json, dict)):
        request_json = {**(request_json or {}), "model": model}
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


def _form(body: bytes, content_type: str | None) -> dict[str, str] | None:
    """A multipart/form-data body's text fields (`model`, `response_format`…), files left out;
    None for any other body."""
    found = multipart.boundary(content_type)
    fields = multipart.parts(body, found) if found else None
    if fields is None:
        return None
    texts = {}
    for part in fields:
        if part.name is not None and part.filename is None:
            try:
                texts[part.name] = part.data.decode()
            except UnicodeDecodeError:
                continue
    return texts


def _decoded(body: bytes, headers: Headers) -> bytes:
    try:
        return decode_body(body, header(headers, "content-encoding"), partial=True)
    except UndecodableBody:
        return b""
