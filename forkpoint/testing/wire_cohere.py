"""Cohere Chat version 2 on the wire (`POST /v2/chat`), as api.cohere.com sends it and the
cohere SDK's `ClientV2` parses it.

The answer names no model. Before tool calls the model writes a `tool_plan`, and gives no
content. A stream is SSE, each event named by its `type` (in its data too): `message-start`,
`content-start/delta/end` or `tool-plan-delta` and `tool-call-start/delta/end`, then
`message-end` with the finish reason and the usage. Errors are `{"id", "message"}`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from forkpoint.testing.script import Prompt, Reply, Usage, split_words
from forkpoint.testing.wire import Event, Wire, fragments, random_id

__all__ = ["CHAT"]

_FINISH = {"stop": "COMPLETE", "length": "MAX_TOKENS", "tool_calls": "TOOL_CALL"}


def _error(status: int, message: str, type_: str) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "message": message}


def _finish(reply: Reply) -> str:
    reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return _FINISH.get(reason, reason.upper())


def _usage(usage: Usage) -> dict[str, Any]:
    billed = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    preamble = 480  # Cohere's own preamble: counted as tokens, not billed
    tokens = {"input_tokens": usage.input_tokens + preamble, "output_tokens": usage.output_tokens}
    return {"billed_units": billed, "tokens": tokens, "cached_tokens": usage.cached_tokens}


def _plan(reply: Reply) -> str:
    return "I will " + " then ".join(f"call {c.name}" for c in reply.tool_calls) + "."


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {
            "id": random_id(f"{call.name}_", 12).lower(),
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
        }
        for call in reply.tool_calls
    ]


def _body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    if reply.tool_calls:
        message["tool_plan"] = _plan(reply)
        message["tool_calls"] = _calls(reply)
    if reply.text is not None or not reply.tool_calls:
        message["content"] = [{"type": "text", "text": reply.text or ""}]
    return {
        "id": str(uuid.uuid4()),
        "message": message,
        "finish_reason": _finish(reply),
        "usage": _usage(usage),
    }


def _events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, **fields}))

    def message(**fields: Any) -> dict[str, Any]:
        return {"message": fields}

    emit("message-start", id=str(uuid.uuid4()), delta=message(
        role="assistant", content=[], tool_plan="", tool_calls=[], citations=[],
    ))  # fmt: skip
    if reply.tool_calls:
        for word in split_words(_plan(reply)):
            emit("tool-plan-delta", delta=message(tool_plan=word))
        for index, call in enumerate(_calls(reply)):
            opening = {**call, "function": {**call["function"], "arguments": ""}}
            emit("tool-call-start", index=index, delta=message(tool_calls=opening))
            for piece in fragments(call["function"]["arguments"]):
                part = {"function": {"arguments": piece}}
                emit("tool-call-delta", index=index, delta=message(tool_calls=part))
            emit("tool-call-end", index=index)
    if reply.text is not None or not reply.tool_calls:
        emit("content-start", index=0, delta=message(content={"type": "text", "text": ""}))
        for word in split_words(reply.text or ""):
            emit("content-delta", index=0, delta=message(content={"text": word}))
        emit("content-end", index=0)
    emit("message-end", delta={"finish_reason": _finish(reply), "usage": _usage(usage)})
    return events


CHAT = Wire(_body, _events, _error, "x-debug-trace-id")
