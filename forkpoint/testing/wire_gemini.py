"""Google's Gemini API on the wire (`…/models/MODEL:generateContent`, and
`:streamGenerateContent?alt=sse`), as generativelanguage.googleapis.com sends it and the
google-genai SDK parses it.

The model is in the path, not the body; the answer names it again as `modelVersion`. A stream is
SSE of whole response objects, `data:` lines only, ended by CRLF pairs, each with the usage so
far; a function call comes whole in one of them. Errors are Google's: `{"error": {"code",
"message", "status"}}`.
"""

from __future__ import annotations

from typing import Any

from forkpoint.testing.script import Prompt, Reply, Usage, split_words
from forkpoint.testing.wire import Event, Wire, compact, random_id

__all__ = ["GEMINI"]

_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}


def _error(status: int, message: str, type_: str) -> dict[str, Any]:
    name = _STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": status, "message": message, "status": name}}


def _usage(usage: Usage, output_tokens: int | None) -> dict[str, Any]:
    counted: dict[str, Any] = {"promptTokenCount": usage.input_tokens}
    if output_tokens is not None:
        counted["candidatesTokenCount"] = output_tokens
    counted["totalTokenCount"] = usage.input_tokens + (output_tokens or 0)
    if usage.cached_tokens:
        counted["cachedContentTokenCount"] = usage.cached_tokens
    counted["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": usage.input_tokens}]
    return counted


def _parts(reply: Reply) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if reply.text is not None or not reply.tool_calls:
        parts.append({"text": reply.text or ""})
    parts += [
        {"functionCall": {"name": call.name, "args": call.arguments}} for call in reply.tool_calls
    ]
    return parts


def _response(
    prompt: Prompt, parts: list[dict[str, Any]], finish: str | None, usage: dict[str, Any], rid: str
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": prompt.model,
        "responseId": rid,
    }


def _finish(reply: Reply) -> str:
    return _FINISH.get(reply.finish_reason or "stop", (reply.finish_reason or "STOP").upper())


def _body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    rid = random_id("", 22)
    return _response(prompt, _parts(reply), _finish(reply), _usage(usage, usage.output_tokens), rid)


def _events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    rid = random_id("", 22)
    words = split_words(reply.text or "") if reply.text is not None else []
    pieces: list[list[dict[str, Any]]] = [[{"text": word}] for word in words]
    calls = [p for p in _parts(reply) if "functionCall" in p]
    if calls:
        pieces.append(calls)
    if not pieces:
        pieces.append([{"text": ""}])
    events: list[Event] = []
    for index, parts in enumerate(pieces):
        last = index == len(pieces) - 1
        finish = _finish(reply) if last else None
        counted = _usage(usage, usage.output_tokens if last else None)
        events.append((None, _response(prompt, parts, finish, counted, rid)))
    return events


def _frame(event: Event) -> bytes:
    """Google ends each event with a CRLF pair, and names none."""
    return f"data: {compact(event[1])}\r\n\r\n".encode()


def stream_path(path: str) -> bool:
    """Whether a request's path asks for a stream (the verb after the model)."""
    return path.endswith(":streamGenerateContent")


GEMINI = Wire(_body, _events, _error, None, frame=_frame)
