"""OpenAI's two dialects on the wire: Chat Completions and Responses.

The shapes follow what api.openai.com sends (field order included) and what the `openai`
SDK's models parse; `tests/testing/test_upstream.py` drives them with the real SDK.
"""

from __future__ import annotations

import hashlib
import json
import string
import time
from typing import Any

from forkpoint.testing.script import Prompt, Reply, ToolCallSpec, Usage, split_words
from forkpoint.testing.wire import Event, Wire, fragments, random_id

__all__ = ["CHAT", "RESPONSES"]

_HEX = string.hexdigits[:16]
_DEFAULT_TYPES = {429: ("requests", "rate_limit_exceeded")}
_FROM_ANTHROPIC = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


def _error(status: int, message: str, type_: str) -> dict[str, Any]:
    code = None
    if type_ == "server_error" and status < 500:
        type_, code = _DEFAULT_TYPES.get(status, ("invalid_request_error", None))
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _finish_reason(reply: Reply) -> str:
    reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return _FROM_ANTHROPIC.get(reason, reason)


def _arguments(call: ToolCallSpec) -> str:
    return json.dumps(call.arguments, separators=(",", ":"))


def _fingerprint(model: str) -> str:
    """Stable per model, like a deployment's `system_fingerprint`."""
    return "fp_" + hashlib.sha256(model.encode()).hexdigest()[:10]


# --- Chat Completions -------------------------------------------------------------------------


def _chat_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_head(prompt: Prompt, kind: str) -> dict[str, Any]:
    return {
        "id": random_id("chatcmpl-", 29),
        "object": kind,
        "created": int(time.time()),
        "model": prompt.model,
    }


def _chat_tail(prompt: Prompt) -> dict[str, Any]:
    return {"service_tier": "default", "system_fingerprint": _fingerprint(prompt.model)}


def _chat_body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    content = reply.text if reply.text is not None or reply.tool_calls else ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": random_id("call_", 24),
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call)},
            }
            for call in reply.tool_calls
        ]
    message.update(refusal=None, annotations=[])
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _finish_reason(reply),
    }
    return {
        **_chat_head(prompt, "chat.completion"),
        "choices": [choice],
        "usage": _chat_usage(usage),
        **_chat_tail(prompt),
    }


def _chat_events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    head, tail = _chat_head(prompt, "chat.completion.chunk"), _chat_tail(prompt)
    include_usage = bool((prompt.body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> Event:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        data = {**head, **tail, "choices": [choice]}
        if include_usage:
            data["usage"] = None  # OpenAI sends the key on every chunk once usage is asked for
        return (None, data)

    deltas: list[dict[str, Any]] = []
    if reply.text is not None or not reply.tool_calls:
        deltas.append({"role": "assistant", "content": "", "refusal": None})
        deltas += [{"content": word} for word in split_words(reply.text or "")]
    for index, call in enumerate(reply.tool_calls):
        opening = {
            "index": index,
            "id": random_id("call_", 24),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        if deltas:
            deltas.append({"tool_calls": [opening]})
        else:
            first = {"role": "assistant", "content": None, "tool_calls": [opening], "refusal": None}
            deltas.append(first)
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            for fragment in fragments(_arguments(call))
        ]
    events = [chunk(delta) for delta in deltas]
    events.append(chunk({}, _finish_reason(reply)))
    if include_usage:
        events.append((None, {**head, **tail, "choices": [], "usage": _chat_usage(usage)}))
    events.append((None, "[DONE]"))
    return events


CHAT = Wire(_chat_body, _chat_events, _error, "x-request-id")


# --- Responses --------------------------------------------------------------------------------


def _responses_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def _output_items(reply: Reply) -> list[dict[str, Any]]:
    """The finished output items, ids included; the stream announces the same items."""
    items: list[dict[str, Any]] = []
    if reply.text is not None or not reply.tool_calls:
        items.append(
            {
                "id": random_id("msg_", 48, _HEX),
                "type": "message",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "annotations": [],
                        "logprobs": [],
                        "text": reply.text or "",
                    }
                ],
                "role": "assistant",
            }
        )
    items += [
        {
            "id": random_id("fc_", 48, _HEX),
            "type": "function_call",
            "status": "completed",
            "arguments": _arguments(call),
            "call_id": random_id("call_", 24),
            "name": call.name,
        }
        for call in reply.tool_calls
    ]
    return items


def _response(prompt: Prompt, created_at: int, rid: str) -> dict[str, Any]:
    """A response object in progress; the caller fills in output, status and usage."""
    body = prompt.body
    return {
        "id": rid,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": prompt.model,
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        # The request's `text` (a structured output's format) is echoed, with the defaults.
        "text": {"format": {"type": "text"}, "verbosity": "medium", **(body.get("text") or {})},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _finish(response: dict[str, Any], reply: Reply, usage: Usage, output: list[Any]) -> None:
    incomplete = _finish_reason(reply) == "length"
    response["status"] = "incomplete" if incomplete else "completed"
    if incomplete:
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    response["output"] = output
    response["usage"] = _responses_usage(usage)


def _responses_body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    response = _response(prompt, int(time.time()), random_id("resp_", 48, _HEX))
    _finish(response, reply, usage, _output_items(reply))
    return response


def _responses_events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    response = _response(prompt, int(time.time()), random_id("resp_", 48, _HEX))
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    emit("response.created", response=dict(response))
    emit("response.in_progress", response=dict(response))
    items = _output_items(reply)
    for index, item in enumerate(items):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "annotations": [], "logprobs": []}
            added = {**item, "status": "in_progress", "content": []}
            emit("response.output_item.added", output_index=index, item=added)
            emit("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
            for word in split_words(text):
                emit(
                    "response.output_text.delta", **where, content_index=0, delta=word, logprobs=[]
                )
            emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            emit(
                "response.content_part.done", **where, content_index=0, part={**part, "text": text}
            )
        else:
            added = {**item, "status": "in_progress", "arguments": ""}
            emit("response.output_item.added", output_index=index, item=added)
            for fragment in fragments(item["arguments"]):
                emit("response.function_call_arguments.delta", **where, delta=fragment)
            emit("response.function_call_arguments.done", **where, arguments=item["arguments"])
        emit("response.output_item.done", output_index=index, item=item)
    _finish(response, reply, usage, items)
    emit(f"response.{response['status']}", response=response)
    return events


RESPONSES = Wire(_responses_body, _responses_events, _error, "x-request-id")
