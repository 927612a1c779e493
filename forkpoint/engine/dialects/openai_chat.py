"""OpenAI Chat Completions (`POST …/chat/completions`), also spoken by most OpenAI-compatible
servers (Azure, vLLM, litellm, OpenRouter…).

With `n > 1` only the first choice (index 0) is summarized: the agent almost always reads that one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.models import Kind, Summary, ToolCall, Usage


class OpenAIChat(LlmDialect):
    name = "openai_chat"

    def claims(self, method: str, path: str) -> bool:
        return method.upper() == "POST" and path.rstrip("/").endswith("/chat/completions")

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return _summarize_stream(request_json, body)

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return _summarize_completion(request_json, answer)


def chat_usage(usage: object) -> Usage | None:
    """Chat Completions' `usage` object; the same shape other OpenAI-style endpoints use."""
    if not isinstance(usage, dict):
        return None
    return Usage(
        input=r.count(usage.get("prompt_tokens")),
        output=r.count(usage.get("completion_tokens")),
        cached=r.count(r.dig(usage, "prompt_tokens_details", "cached_tokens")),
        reasoning=r.count(r.dig(usage, "completion_tokens_details", "reasoning_tokens")),
    )


def _first_choice(response: object) -> dict[str, object]:
    choices = [r.obj(choice) for choice in r.arr(r.dig(response, "choices"))]
    return next((c for c in choices if c.get("index", 0) == 0), {})


def _message_tool_calls(message: dict[str, object]) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for raw in r.arr(message.get("tool_calls")):
        call = r.obj(raw)
        if call.get("type") == "custom":  # free-form tools: the model's text is the input
            name, arguments = r.dig(call, "custom", "name"), r.dig(call, "custom", "input")
        else:
            name, arguments = r.dig(call, "function", "name"), r.dig(call, "function", "arguments")
        calls.append(ToolCall(r.text(name) or "", r.text(arguments) or "", r.text(call.get("id"))))
    legacy = r.obj(message.get("function_call"))  # the deprecated single `function_call`
    if legacy:
        name, arguments = r.text(legacy.get("name")), r.text(legacy.get("arguments"))
        calls.append(ToolCall(name or "", arguments or ""))
    return tuple(calls)


def _summarize_completion(request_json: object | None, response: object) -> Summary:
    choice = _first_choice(response)
    message = r.obj(choice.get("message"))
    return Summary(
        kind=Kind.LLM,
        dialect=OpenAIChat.name,
        model=r.text(r.dig(response, "model")) or r.request_model(request_json),
        usage=chat_usage(r.dig(response, "usage")),
        tool_calls=_message_tool_calls(message),
        finish_reason=r.text(choice.get("finish_reason")),
        text=r.text(message.get("content")) or None,
    )


@dataclass
class _PartialCall:
    """A tool call being assembled from deltas: `id` and `name` come once, arguments in pieces."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)

    def add(self, delta: dict[str, object]) -> None:
        self.id = self.id or r.text(delta.get("id"))
        self.name = self.name or r.text(r.dig(delta, "function", "name"))
        self.arguments.append(r.text(r.dig(delta, "function", "arguments")) or "")

    def done(self) -> ToolCall:
        return ToolCall(self.name or "", "".join(self.arguments), self.id)


def _summarize_stream(request_json: object | None, body: bytes) -> Summary:
    model: str | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
    content: list[str] = []
    calls: dict[int, _PartialCall] = {}
    for chunk in r.stream_payloads(body):
        model = r.text(chunk.get("model")) or model
        # With stream_options.include_usage the last chunk carries usage; earlier ones null.
        usage = chat_usage(chunk.get("usage")) or usage
        for raw in r.arr(chunk.get("choices")):
            choice = r.obj(raw)
            if choice.get("index", 0) != 0:
                continue
            finish_reason = r.text(choice.get("finish_reason")) or finish_reason
            delta = r.obj(choice.get("delta"))
            content.append(r.text(delta.get("content")) or "")
            for raw_call in r.arr(delta.get("tool_calls")):
                call = r.obj(raw_call)
                index = call.get("index")
                key = index if isinstance(index, int) else len(calls)
                calls.setdefault(key, _PartialCall()).add(call)
            legacy = r.obj(delta.get("function_call"))
            if legacy:  # the deprecated single `function_call`, streamed the same way
                calls.setdefault(-1, _PartialCall()).add({"function": legacy})
    return Summary(
        kind=Kind.LLM,
        dialect=OpenAIChat.name,
        model=model or r.request_model(request_json),
        usage=usage,
        tool_calls=tuple(calls[key].done() for key in sorted(calls)),
        finish_reason=finish_reason,
        text=r.joined(content),
    )
