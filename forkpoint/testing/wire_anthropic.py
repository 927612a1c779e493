"""Anthropic Messages on the wire, as api.anthropic.com sends it and the `anthropic` SDK parses it.

Anthropic counts `input_tokens` without the cached part (reported apart as
`cache_read_input_tokens`), unlike OpenAI; the usage here follows that.
"""

from __future__ import annotations

import json
from typing import Any

from forkpoint.testing.script import Prompt, Reply, Usage, split_words
from forkpoint.testing.wire import Event, Wire, fragments, random_id

__all__ = ["MESSAGES", "streamed_message"]

_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _error(status: int, message: str, type_: str) -> dict[str, Any]:
    if type_ == "server_error":
        type_ = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": type_, "message": message}}


def _stop_reason(reply: Reply) -> str:
    reason = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return _STOP_REASONS.get(reason, reason)


def _usage(usage: Usage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens - usage.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text is not None or not reply.tool_calls:
        blocks.append({"type": "text", "text": reply.text or ""})
    blocks += [
        {"type": "tool_use", "id": random_id("toolu_01", 22), "name": c.name, "input": c.arguments}
        for c in reply.tool_calls
    ]
    return blocks


def _message(prompt: Prompt, content: list[Any], stop_reason: str | None) -> dict[str, Any]:
    return {
        "id": random_id("msg_01", 22),
        "type": "message",
        "role": "assistant",
        "model": prompt.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
    }


def _body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    message = _message(prompt, _blocks(reply), _stop_reason(reply))
    return {**message, "usage": _usage(usage, usage.output_tokens)}


def _events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    start = {**_message(prompt, [], None), "usage": _usage(usage, 1)}
    events: list[Event] = [("message_start", {"type": "message_start", "message": start})]

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, **fields}))

    for index, block in enumerate(_blocks(reply)):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            deltas = [{"type": "text_delta", "text": word} for word in split_words(block["text"])]
        else:
            emit("content_block_start", index=index, content_block={**block, "input": {}})
            pieces = ["", *fragments(json.dumps(block["input"]))]
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        if index == 0:
            events.append(("ping", '{"type": "ping"}'))  # sent verbatim, spaced as Anthropic does
        for delta in deltas:
            emit("content_block_delta", index=index, delta=delta)
        emit("content_block_stop", index=index)
    stop = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
    emit("message_delta", delta=stop, usage={"output_tokens": usage.output_tokens})
    emit("message_stop")
    return events


MESSAGES = Wire(_body, _events, _error, "request-id")


def streamed_message(events: list[Event]) -> dict[str, Any]:
    """The message a stream's events add up to (its content blocks with their ids), as the
    SDK accumulates it: what a thread holds as the reply."""
    message: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    partial_json: dict[int, str] = {}
    for _, data in events:
        if not isinstance(data, dict):  # ping
            continue
        if data["type"] == "message_start":
            message = dict(data["message"])
        elif data["type"] == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif data["type"] == "content_block_delta":
            delta, index = data["delta"], data["index"]
            if delta["type"] == "text_delta":
                blocks[index]["text"] += delta["text"]
            else:
                partial_json[index] = partial_json.get(index, "") + delta["partial_json"]
    for index, text in partial_json.items():
        blocks[index]["input"] = json.loads(text) if text else {}
    return {**message, "content": blocks}
