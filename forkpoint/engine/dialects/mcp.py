"""MCP (the Model Context Protocol): JSON-RPC to a tool server, over streamable HTTP or stdio.

A `tools/call` is a tool step: its summary names the tool with its arguments (`ToolCall`), and
gives the result's text, or the error, as `text`; `finish_reason` says how it ended when not
plainly: `error` (a JSON-RPC error or a result with `isError`) or `input_required` (revision
2026-07-28's multi round-trip: the client retries with the input asked for). Every other
message (`initialize`, `server/discover`, `tools/list`, pings, notifications, a client's answer
to a server's request) is an `other` step of this dialect.

An MCP request is known by its body (a JSON-RPC message: the endpoint's path is the server's
choice) or by the route forkpoint's stdio door gives its servers (`/mcp-stdio/NAME`), and its
answer is one JSON object or a stream of events, each a message, the response last. Errors are
JSON-RPC error responses, which MCP clients raise as the server's error.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects import jsonrpc
from forkpoint.models import Headers, Kind, Summary, ToolCall

NAME = "mcp"
# The route of a server behind `forkpoint mcp -- CMD` (the stdio door): /mcp-stdio/NAME.
STDIO_PREFIX = "/mcp-stdio/"
TOOLS_CALL = "tools/call"
_ERROR_HEADERS = (("content-type", "application/json"), ("x-should-retry", "false"))


class Mcp:
    name = NAME

    def claims(self, method: str, path: str) -> bool:
        """The stdio door's routes, and the conventional endpoint (`…/mcp`); any other path
        is claimed by its body (`is_mcp`)."""
        return path.startswith(STDIO_PREFIX) or path.rstrip("/").endswith("/mcp")

    def summarize(
        self,
        request_json: object | None,
        response_body: bytes,
        *,
        streamed: bool,
        status: int | None,
    ) -> Summary:
        asked = jsonrpc.read(request_json)
        if asked is None or asked.method != TOOLS_CALL:
            return Summary(kind=Kind.OTHER, dialect=NAME)
        name, arguments = tool_call(asked)
        answer = _response(response_body, streamed)
        text, finish = _outcome(answer, status)
        return Summary(
            kind=Kind.TOOL,
            dialect=NAME,
            tool_calls=(ToolCall(name or "", arguments),),
            finish_reason=finish,
            text=text,
        )

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        """A JSON-RPC error response; its id is the request's where forkpoint knows it
        (`error_for`), else null, as MCP allows for a request it could not read."""
        return _ERROR_HEADERS, jsonrpc.error(None, message)

    def with_model(self, route: str, model: str) -> str:
        return route

    def model_in_route(self, route: str) -> str | None:
        return None


def is_mcp(method: str, path: str, body: bytes) -> bool:
    """Whether a request is MCP: by its route, else by its body being a JSON-RPC message."""
    return MCP.claims(method, path) or (method.upper() == "POST" and jsonrpc.looks_like(body))


def error_for(request_body: bytes, message: str) -> tuple[Headers, bytes]:
    """forkpoint's error for an MCP request, answering it by its id (a client that cannot
    match an answer to its request would wait for one forever)."""
    asked = jsonrpc.parse(request_body)
    return _ERROR_HEADERS, jsonrpc.error(None if asked is None else asked.id, message)


def tool_call(asked: jsonrpc.Message) -> tuple[str | None, str]:
    """A `tools/call`'s tool name and its arguments as compact JSON."""
    params = asked.params
    arguments = params.get("arguments")
    return r.text(params.get("name")), orjson.dumps(arguments or {}).decode()


def described(value: Any) -> str | None:
    """An MCP request (a parsed body) in MCP's words, `MCP tool call lookup_order`; None for
    any other body."""
    asked = jsonrpc.read(value)
    if asked is None or asked.method is None:
        return None
    if asked.method == TOOLS_CALL:
        return f"MCP tool call {r.text(asked.params.get('name'))}"
    return f"MCP {asked.method}"


def tool_name(body: bytes) -> str | None:
    """The tool a request body calls, or None for any other body."""
    asked = jsonrpc.parse(body)
    if asked is None or asked.method != TOOLS_CALL:
        return None
    return r.text(asked.params.get("name"))


def _response(body: bytes, streamed: bool) -> jsonrpc.Message | None:
    """The response among the messages an answer carries (notifications come before it)."""
    said = jsonrpc.messages_of(body, streamed=streamed)
    found = [m for m in said if m.kind is jsonrpc.Kind.RESPONSE]
    return found[-1] if found else None


def _outcome(answer: jsonrpc.Message | None, status: int | None) -> tuple[str | None, str | None]:
    """The result's text and how the call ended (None: it gave its result)."""
    if answer is None:
        return None, None if status is None or status < 400 else "error"
    error = answer.error
    if error is not None:
        return r.text(error.get("message")), "error"
    result = r.obj(answer.result)
    texts = [
        r.text(r.dig(item, "text")) or ""
        for item in r.arr(result.get("content"))
        if r.dig(item, "type") == "text"
    ]
    text = r.joined(texts)
    if text is None and "structuredContent" in result:
        text = orjson.dumps(result["structuredContent"]).decode()
    if result.get("resultType") == "input_required":
        return text, "input_required"
    return text, "error" if result.get("isError") is True else None


def result_value(answer: Any) -> Any:
    """What a mock (a file, a callable) gives as a tool's answer, in a `CallToolResult`'s shape:
    a dict with a `content` list as it is; else the answer as text content (JSON for what is not
    text), and as `structuredContent`: an object as it is, any other value as `{"result": …}`,
    as the SDKs' servers wrap what a tool returns, so a client that checks the tool's output
    schema finds it met."""
    if isinstance(answer, dict) and isinstance(answer.get("content"), list):
        return answer
    if isinstance(answer, bytes):
        answer = answer.decode(errors="replace")
    text = answer if isinstance(answer, str) else orjson.dumps(answer).decode()
    structured = answer if isinstance(answer, dict) else {"result": answer}
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": False,
    }


MCP = Mcp()
