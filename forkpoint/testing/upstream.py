"""A scripted, wire-faithful stand-in for the model APIs agents call.

forkpoint's tests, its demo and users' tests point real SDK clients (through the proxy or not)
at this server. It answers OpenAI Chat Completions (also at an Azure deployment's path and
Groq's), OpenAI Responses, Anthropic Messages, Gemini's generateContent, Ollama's chat and
generate and Cohere's v2 chat, streaming or not, with the providers' exact shapes; what it says
comes from a script, so a test controls the content while the bytes stay realistic. Ids and
timestamps are fresh on every call, as upstream, so a replay that returns recorded ones is
visibly a replay.

    upstream = ScriptedUpstream(lambda prompt: Reply(text="hi"))
    base_url = await upstream.start()            # "http://127.0.0.1:PORT"
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key="test")
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiohttp import web

from forkpoint.testing import wire_cohere, wire_ollama
from forkpoint.testing.script import (
    ErrorReply,
    Message,
    Prompt,
    Reply,
    Script,
    ToolCallSpec,
    count_usage,
    echo_script,
    parse_prompt,
)
from forkpoint.testing.threads import ThreadError, Threads
from forkpoint.testing.wire import Event, Wire, random_id
from forkpoint.testing.wire_anthropic import MESSAGES, streamed_message
from forkpoint.testing.wire_gemini import GEMINI, stream_path
from forkpoint.testing.wire_openai import CHAT, RESPONSES

__all__ = [
    "ErrorReply",
    "Message",
    "Prompt",
    "ReceivedRequest",
    "Reply",
    "Script",
    "ScriptedUpstream",
    "ToolCallSpec",
    "echo_script",
]

# Each dialect is served at its `/v1` route and without the prefix, for clients whose base
# URL already ends in `/v1` and clients that add it themselves.
_ROUTES: dict[str, tuple[str, Wire]] = {
    "/chat/completions": ("openai_chat", CHAT),
    "/responses": ("openai_responses", RESPONSES),
    "/messages": ("anthropic_messages", MESSAGES),
}
# Served at these paths alone. The model of Gemini and of an Azure deployment is in the path.
_OTHER_ROUTES: dict[str, tuple[str, Wire]] = {
    "/openai/v1/chat/completions": ("openai_chat", CHAT),  # Groq's
    "/openai/deployments/{model}/chat/completions": ("openai_chat", CHAT),  # Azure OpenAI's
    "/{version}/models/{model}:{verb}": ("gemini", GEMINI),
    "/api/chat": ("ollama_chat", wire_ollama.CHAT),
    "/api/generate": ("ollama_generate", wire_ollama.GENERATE),
    "/v2/chat": ("cohere_chat", wire_cohere.CHAT),
}
_MODELS = ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o4-mini")
_MODELS_CREATED = 1_715_367_049  # a model's `created` is fixed: when it was published
_BAD_JSON = "We could not parse the JSON body of your request."

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ReceivedRequest:
    """A request as the upstream received it, for tests to assert on what the proxy sent."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any


class ScriptedUpstream:
    """An aiohttp server that answers LLM API calls from a script.

    `script` may be swapped between requests. `chunk_delay` is slept between SSE events;
    `compress` gzips JSON bodies for clients that accept gzip, as the real APIs do.
    """

    def __init__(
        self, script: Script = echo_script, *, chunk_delay: float = 0.0, compress: bool = False
    ) -> None:
        self.script = script
        self.chunk_delay = chunk_delay
        self.compress = compress
        self.requests: list[ReceivedRequest] = []
        self.finished = 0  # requests whose answer is done (sent, cut, or hung up on)
        self.threads = Threads()  # Anthropic's server-held conversations
        self.app = web.Application(middlewares=[self._record])
        for route, (dialect, wire) in _ROUTES.items():
            handler = partial(self._answer, dialect, wire)
            self.app.router.add_post("/v1" + route, handler)
            self.app.router.add_post(route, handler)
        for route, (dialect, wire) in _OTHER_ROUTES.items():
            self.app.router.add_post(route, partial(self._answer, dialect, wire))
        self.app.router.add_get("/v1/models", self._models)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen (port 0 picks a free one) and return the base URL, without `/v1`."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        return f"http://{bound_host}:{bound_port}"

    async def close(self) -> None:
        """Stop listening and drop open connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def request_count(self) -> int:
        return len(self.requests)

    def reset(self) -> None:
        """Forget the requests received so far."""
        self.requests.clear()

    @web.middleware
    async def _record(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        body = await request.read()  # aiohttp caches it, so the handler reads it again
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        headers = dict(request.headers)
        self.requests.append(ReceivedRequest(request.method, request.path, headers, body, parsed))
        try:
            return await handler(request)
        finally:
            self.finished += 1

    async def _answer(self, dialect: str, wire: Wire, request: web.Request) -> web.StreamResponse:
        headers = {}
        if wire.request_id_header is not None:
            headers[wire.request_id_header] = random_id("req_", 32, string.hexdigits[:16])
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self._json(request, 400, wire.error(400, _BAD_JSON, "server_error"), headers)
        body = _as_asked(dialect, request, body)
        if not body.get("model"):
            error = wire.error(400, "you must provide a model parameter", "server_error")
            return self._json(request, 400, error, headers)
        threaded = dialect == "anthropic_messages"
        if threaded:
            resolved = self.threads.resolve(body)
            if isinstance(resolved, ThreadError):
                error = wire.error(resolved.status, resolved.message, "server_error")
                error["error"]["details"] = {"error_code": resolved.code}
                return self._json(request, resolved.status, error, headers)
            body = resolved
        prompt = parse_prompt(dialect, body)
        reply = self.script(prompt)
        if isinstance(reply, ErrorReply):
            error = wire.error(reply.status, reply.message, reply.type)
            return self._json(request, reply.status, error, headers)
        if reply.stall_s:
            await asyncio.sleep(reply.stall_s)
        usage = count_usage(body, reply)
        if prompt.stream:
            events = wire.events(prompt, reply, usage)
            if threaded:
                self.threads.remember(body, streamed_message(events))
            return await self._stream(request, wire, events, reply.cut_after, headers)
        payload = wire.body(prompt, reply, usage)
        if threaded:
            self.threads.remember(body, payload)
        return self._json(request, 200, payload, headers)

    def _json(
        self, request: web.Request, status: int, payload: Any, headers: dict[str, str]
    ) -> web.Response:
        data = json.dumps(payload).encode()
        headers = {**headers, "Content-Type": "application/json"}
        if self.compress and "gzip" in request.headers.get("Accept-Encoding", ""):
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
        return web.Response(status=status, body=data, headers=headers)

    async def _stream(
        self,
        request: web.Request,
        wire: Wire,
        events: list[Event],
        cut_after: int | None,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        """Write each event on its own, so a proxy sees the chunks as they come."""
        response = web.StreamResponse(
            headers={**headers, "Content-Type": wire.stream_type, "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        # A client that hangs up mid-stream just ends the stream, as it does upstream.
        with contextlib.suppress(ConnectionResetError):
            for sent, event in enumerate(events):
                if sent and self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
                if cut_after is not None and sent >= cut_after:
                    # Closing the socket mid-body leaves the chunked body unterminated, as a
                    # dropped upstream connection does; aiohttp then skips its end of body.
                    if request.transport is not None:
                        request.transport.close()
                    return response
                await response.write(wire.frame(event))
            await response.write_eof()
        return response

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": _MODELS_CREATED, "owned_by": "system"}
            for m in _MODELS
        ]
        return self._json(request, 200, {"object": "list", "data": data}, {})


def _as_asked(dialect: str, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
    """The request body with what the path says in it: the model of Gemini and of an Azure
    deployment (which route by it, whatever the body's), whether Gemini streams; Ollama streams
    unless told not to."""
    model, verb = request.match_info.get("model"), request.match_info.get("verb", "")
    if dialect == "gemini":
        return {**body, "model": model, "stream": stream_path(":" + verb)}
    if model is not None:
        return {**body, "model": model}
    if dialect.startswith("ollama"):
        return {"stream": True, **body}
    return body
