"""Cohere Chat, version 2 (`POST …/v2/chat`), as the cohere SDK's `ClientV2` speaks it.

The answer names no model: the request's is the step's. Usage: `billed_units` is what Cohere
charges (the prompt without the preamble Cohere adds, which `tokens` counts), so it is read
first. A stream is SSE, each event's `type` (`content-delta`, `tool-call-delta`…) in its data;
the last, `message-end`, carries the finish reason and the usage. Text is the content items of
type `text` (not `thinking`); `tool_plan` (the model's note before its tool calls) is not the
answer. An error is `{"id": …, "message": "…"}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Headers, Kind, Summary, ToolCall, Usage

_ERROR_HEADERS = (("content-type", "application/json"), ("x-should-retry", "false"))


class CohereChat(LlmDialect):
    name = "cohere_chat"

    def claims(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and path.rstrip("/").endswith("/v2/chat")

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        stream = _Stream()
        for event in r.stream_payloads(body):
            stream.feed(event)
        calls = [stream.calls[i].done() for i in sorted(stream.calls)]
        texts = ["".join(stream.texts[i]) for i in sorted(stream.texts)]
        return _summary(request_json, stream.usage, calls, texts, stream.finish)

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        message = r.obj(r.dig(answer, "message"))
        calls = [_call(r.obj(call)) for call in r.arr(message.get("tool_calls"))]
        texts = [
            r.text(r.dig(item, "text")) or ""
            for item in r.arr(message.get("content"))
            if r.dig(item, "type") == "text"
        ]
        finish = r.text(r.dig(answer, "finish_reason"))
        return _summary(request_json, r.dig(answer, "usage"), calls, texts, finish)

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        return _ERROR_HEADERS, orjson.dumps({"id": error_type, "message": message})


def _count(value: object) -> int:
    """A count: Cohere's SDK types them as numbers, so a whole float is read too."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return r.count(value)


def _usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    billed, tokens = r.obj(usage.get("billed_units")), r.obj(usage.get("tokens"))
    counted = billed if billed.get("input_tokens") is not None else tokens
    return Usage(
        input=_count(counted.get("input_tokens")),
        output=_count(counted.get("output_tokens")),
        cached=_count(usage.get("cached_tokens")),
    )


def _call(call: dict[str, object]) -> ToolCall:
    function = r.obj(call.get("function"))
    name, arguments = r.text(function.get("name")), r.text(function.get("arguments"))
    return ToolCall(name or "", arguments or "", r.text(call.get("id")))


def _summary(
    request_json: object | None,
    usage: object,
    calls: list[ToolCall],
    texts: list[str],
    finish: str | None,
) -> Summary:
    return Summary(
        kind=Kind.LLM,
        dialect=CohereChat.name,
        model=r.request_model(request_json),
        usage=_usage(usage),
        tool_calls=tuple(calls),
        finish_reason=finish,
        text=r.joined(texts),
    )


@dataclass
class _Call:
    start: dict[str, object]
    arguments: list[str] = field(default_factory=list)

    def done(self) -> ToolCall:
        call = _call(self.start)
        if not self.arguments:
            return call
        return ToolCall(call.name, call.arguments + "".join(self.arguments), call.id)


@dataclass
class _Stream:
    """What a (possibly cut) stream's events have said so far, by content or call index."""

    texts: dict[int, list[str]] = field(default_factory=dict)
    calls: dict[int, _Call] = field(default_factory=dict)
    usage: object = None
    finish: str | None = None

    def feed(self, event: dict[str, object]) -> None:
        kind, index = event.get("type"), event.get("index")
        message = r.obj(r.dig(event, "delta", "message"))
        if kind == "message-end":
            self.finish = r.text(r.dig(event, "delta", "finish_reason")) or self.finish
            self.usage = r.dig(event, "delta", "usage") or self.usage
        if not isinstance(index, int):
            return
        if kind == "content-start" and r.dig(message, "content", "type") == "text":
            self.texts[index] = [r.text(r.dig(message, "content", "text")) or ""]
        elif kind == "content-delta" and index in self.texts:
            self.texts[index].append(r.text(r.dig(message, "content", "text")) or "")
        elif kind == "tool-call-start":
            self.calls[index] = _Call(r.obj(message.get("tool_calls")))
        elif kind == "tool-call-delta" and index in self.calls:
            part = r.text(r.dig(message, "tool_calls", "function", "arguments"))
            self.calls[index].arguments.append(part or "")
