"""Anthropic Messages (`POST …/messages`).

Usage is normalized so prices are computed the same way for every provider: Anthropic's
`input_tokens` counts only the uncached part of the prompt, while forkpoint's `Usage.input` is the
whole prompt, so it adds `cache_creation_input_tokens` and `cache_read_input_tokens`; `cached`
is the cache reads and `cache_write` the cache writes, each priced at its own rate.
`reasoning` is `output_tokens_details.thinking_tokens` when sent.

Tool arguments are re-serialized compactly with orjson whether the call was streamed or not, so
the same call reads the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect, anthropic_error
from forkpoint.models import Headers, Kind, Summary, ToolCall, Usage

_USAGE_KEYS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "output_tokens_details",
)


class AnthropicMessages(LlmDialect):
    name = "anthropic_messages"

    def claims(self, method: str, path: str) -> bool:
        segments = path.rstrip("/").split("/")
        # …/messages, but not OpenAI Assistants' /threads/{id}/messages.
        return (
            method.upper() == "POST"
            and segments[-1] == "messages"
            and (len(segments) < 3 or segments[-3] != "threads")
        )

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return _summarize_stream(request_json, body)

    def summarize_answer(self, request_json: object | None, message: object) -> Summary:
        content = r.arr(r.dig(message, "content"))
        return _summary(
            request_json,
            r.text(r.dig(message, "model")),
            r.dig(message, "usage"),
            [_tool_call(r.obj(block), _dumps(r.dig(block, "input"))) for block in content],
            [r.text(r.dig(block, "text")) or "" for block in content if _is_text(block)],
            r.text(r.dig(message, "stop_reason")),
        )

    def error_response(
        self, status: int, message: str, *, error_type: str
    ) -> tuple[Headers, bytes]:
        return anthropic_error(message, error_type=error_type)


def _usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    cache_read = r.count(usage.get("cache_read_input_tokens"))
    uncached = r.count(usage.get("input_tokens"))
    cache_write = r.count(usage.get("cache_creation_input_tokens"))
    return Usage(
        input=uncached + cache_write + cache_read,
        output=r.count(usage.get("output_tokens")),
        cached=cache_read,
        reasoning=r.count(r.dig(usage, "output_tokens_details", "thinking_tokens")),
        cache_write=cache_write,
    )


def _is_text(block: object) -> bool:
    return r.dig(block, "type") == "text"


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode() if value is not None else ""


def _tool_call(block: dict[str, object], arguments: str) -> ToolCall | None:
    if block.get("type") != "tool_use":  # server tools (web search…) are run by Anthropic
        return None
    return ToolCall(r.text(block.get("name")) or "", arguments, r.text(block.get("id")))


def _summary(
    request_json: object | None,
    model: str | None,
    usage: object,
    calls: list[ToolCall | None],
    texts: list[str],
    stop_reason: str | None,
) -> Summary:
    return Summary(
        kind=Kind.LLM,
        dialect=AnthropicMessages.name,
        model=model or r.request_model(request_json),
        usage=_usage(usage),
        tool_calls=tuple(call for call in calls if call is not None),
        finish_reason=stop_reason,
        text=r.joined(texts),
    )


@dataclass
class _Block:
    start: dict[str, object]
    parts: list[str] = field(default_factory=list)  # text_delta text or input_json_delta json

    def arguments(self) -> str:
        """The tool input: the streamed JSON compacted, or as sent when cut off mid-way."""
        if not self.parts:  # a tool without arguments streams no delta at all
            return _dumps(self.start.get("input"))
        raw = "".join(self.parts)
        parsed = r.loads(raw)
        return _dumps(parsed) if parsed is not None else raw


def _summarize_stream(request_json: object | None, body: bytes) -> Summary:
    message: dict[str, object] = {}
    usage: dict[str, object] = {}
    stop_reason: str | None = None
    blocks: dict[int, _Block] = {}
    for event in r.stream_payloads(body):
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start":
            message = r.obj(event.get("message"))
            usage = dict(r.obj(message.get("usage")))
        elif kind == "message_delta":
            stop_reason = r.text(r.dig(event, "delta", "stop_reason")) or stop_reason
            # The delta's counts are cumulative: each one present replaces message_start's.
            delta_usage = r.obj(event.get("usage"))
            usage.update({k: delta_usage[k] for k in _USAGE_KEYS if delta_usage.get(k) is not None})
        elif kind == "content_block_start" and isinstance(index, int):
            blocks[index] = _Block(r.obj(event.get("content_block")))
        elif kind == "content_block_delta" and isinstance(index, int) and index in blocks:
            delta = r.obj(event.get("delta"))
            part = delta.get("text") if delta.get("type") == "text_delta" else None
            if delta.get("type") == "input_json_delta":
                part = delta.get("partial_json")
            blocks[index].parts.append(r.text(part) or "")
    ordered = [blocks[i] for i in sorted(blocks)]
    return _summary(
        request_json,
        r.text(message.get("model")),
        usage or None,
        [_tool_call(block.start, block.arguments()) for block in ordered],
        ["".join(block.parts) for block in ordered if _is_text(block.start)],
        stop_reason,
    )
