"""OpenAI Responses (`POST …/responses`), the default of the Agents SDK and pydantic-ai.

Tool calls are the items the agent itself must run (`function_call`, `custom_tool_call`);
built-in tools the server runs (web search, file search…) are not listed. `finish_reason` is
"tool_calls" when there is one, else the response's status ("completed", "incomplete"…), the
closest thing this API has to Chat Completions' finish reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forkpoint.engine.dialects import _read as r
from forkpoint.engine.dialects._base import LlmDialect
from forkpoint.engine.frames import WS
from forkpoint.models import Kind, Summary, ToolCall, Usage

_CALL_TYPES = {"function_call": "arguments", "custom_tool_call": "input"}
_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class OpenAIResponses(LlmDialect):
    name = "openai_responses"

    def claims(self, method: str, path: str) -> bool:
        """A POST, or a websocket message (Codex's default transport) to `…/responses`."""
        return method.upper() in ("POST", WS) and path.rstrip("/").endswith("/responses")

    def summarize_stream(self, request_json: object | None, body: bytes) -> Summary:
        return _summarize_stream(request_json, body)

    def summarize_answer(self, request_json: object | None, answer: object) -> Summary:
        return _summary(
            request_json,
            answer,
            _item_calls(r.dig(answer, "output")),
            r.joined(_item_texts(r.dig(answer, "output"))),
            r.text(r.dig(answer, "status")),
        )


def _usage(usage: object) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    return Usage(
        input=r.count(usage.get("input_tokens")),
        output=r.count(usage.get("output_tokens")),
        cached=r.count(r.dig(usage, "input_tokens_details", "cached_tokens")),
        reasoning=r.count(r.dig(usage, "output_tokens_details", "reasoning_tokens")),
    )


def _item_call(item: dict[str, object]) -> ToolCall | None:
    arguments_key = _CALL_TYPES.get(r.text(item.get("type")) or "")
    if arguments_key is None:
        return None
    name, arguments = r.text(item.get("name")), r.text(item.get(arguments_key))
    # `call_id` is what the agent answers with in its function_call_output; `id` is the item's.
    return ToolCall(name or "", arguments or "", r.text(item.get("call_id")))


def _item_calls(output: object) -> list[ToolCall]:
    calls = (_item_call(r.obj(item)) for item in r.arr(output))
    return [call for call in calls if call is not None]


def _item_texts(output: object) -> list[str]:
    texts: list[str] = []
    for item in r.arr(output):
        if r.dig(item, "type") != "message":
            continue
        for part in r.arr(r.dig(item, "content")):
            if r.dig(part, "type") == "output_text":
                texts.append(r.text(r.dig(part, "text")) or "")
    return texts


def _summary(
    request_json: object | None,
    response: object,
    calls: list[ToolCall],
    text: str | None,
    status: str | None,
) -> Summary:
    return Summary(
        kind=Kind.LLM,
        dialect=OpenAIResponses.name,
        model=r.text(r.dig(response, "model")) or r.request_model(request_json),
        usage=_usage(r.dig(response, "usage")),
        tool_calls=tuple(calls),
        finish_reason="tool_calls" if calls else status,
        text=text,
    )


@dataclass
class _Stream:
    """What the events of a (possibly cut) stream have said so far, by output index."""

    response: dict[str, object] = field(default_factory=dict)  # the latest whole response seen
    finished: bool = False
    calls: dict[int, dict[str, object]] = field(default_factory=dict)
    texts: dict[tuple[int, int], list[str]] = field(default_factory=dict)

    def feed(self, event: dict[str, object]) -> None:
        kind = r.text(event.get("type")) or ""
        index = event.get("output_index")
        if isinstance(r.dig(event, "response"), dict):
            self.response = r.obj(event.get("response"))
            self.finished = kind in _TERMINAL
        if not isinstance(index, int):
            return
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = r.obj(event.get("item"))
            if item.get("type") in _CALL_TYPES:
                self.calls[index] = dict(item)
        elif kind in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            self._grow_call(index, r.text(event.get("delta")) or "")
        elif kind == "response.function_call_arguments.done":
            self.calls.setdefault(index, {"type": "function_call"})["arguments"] = event.get(
                "arguments"
            )
        elif kind == "response.custom_tool_call_input.done":
            self.calls.setdefault(index, {"type": "custom_tool_call"})["input"] = event.get("input")
        elif kind in ("response.output_text.delta", "response.output_text.done"):
            content_index = event.get("content_index")
            key = (index, content_index if isinstance(content_index, int) else 0)
            if kind.endswith(".done"):
                self.texts[key] = [r.text(event.get("text")) or ""]
            else:
                self.texts.setdefault(key, []).append(r.text(event.get("delta")) or "")

    def _grow_call(self, index: int, delta: str) -> None:
        call = self.calls.setdefault(index, {"type": "function_call"})
        key = _CALL_TYPES.get(r.text(call.get("type")) or "", "arguments")
        call[key] = (r.text(call.get(key)) or "") + delta


def _summarize_stream(request_json: object | None, body: bytes) -> Summary:
    stream = _Stream()
    for event in r.stream_payloads(body):
        stream.feed(event)
    final_output = r.arr(stream.response.get("output")) if stream.finished else []
    if final_output:  # the terminal event repeats the whole output: trust it over the deltas
        calls, texts = _item_calls(final_output), _item_texts(final_output)
    else:
        calls = _item_calls([stream.calls[i] for i in sorted(stream.calls)])
        texts = ["".join(stream.texts[key]) for key in sorted(stream.texts)]
    status = r.text(stream.response.get("status")) if stream.finished else None
    return _summary(request_json, stream.response, calls, r.joined(texts), status)
