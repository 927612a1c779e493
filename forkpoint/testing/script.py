"""What a scripted upstream answers: the script's view of a request and its replies.

A script is a plain function from a dialect-independent `Prompt` to a `Reply` or an
`ErrorReply`, so one script drives OpenAI Chat, OpenAI Responses, Anthropic Messages, Gemini,
Ollama and Cohere alike.
The wire modules turn a reply into each dialect's exact bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ErrorReply",
    "Message",
    "Prompt",
    "Reply",
    "Script",
    "ToolCallSpec",
    "Usage",
    "count_usage",
    "echo_script",
    "parse_prompt",
    "split_words",
]


@dataclass(frozen=True)
class ToolCallSpec:
    """One function call, as the model asks for it or as the history shows it."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """A successful model turn.

    `finish_reason` uses OpenAI Chat's words (`stop`, `tool_calls`, `length`; Anthropic's
    `end_turn`, `tool_use`, `max_tokens` are accepted too) and is derived when None.
    `stall_s` delays the response (to test proxy timeouts); `cut_after` closes a stream's
    connection abruptly after that many SSE events (to test cut streams).
    """

    text: str | None = None
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str | None = None
    stall_s: float = 0.0
    cut_after: int | None = None
    cached_tokens: int = 0


@dataclass(frozen=True)
class ErrorReply:
    """An API error, sent with `status` in the dialect's error shape.

    The default `type` is replaced by the dialect's usual type for a client-error status
    (e.g. `rate_limit_error` for an Anthropic 429), so scripts rarely need to set it.
    """

    status: int
    message: str
    type: str = "server_error"


@dataclass(frozen=True)
class Message:
    """One history entry; tool results are their own entries with role `tool`."""

    role: str
    text: str = ""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    tool_result: str | None = None
    tool_name: str | None = None


@dataclass(frozen=True)
class Prompt:
    """The dialect-independent view of an LLM request that a script decides on."""

    dialect: str
    model: str
    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    stream: bool
    body: dict[str, Any]

    @property
    def last_user_text(self) -> str:
        """Text of the latest user message, or "" when there is none."""
        return next((m.text for m in reversed(self.messages) if m.role == "user"), "")

    @property
    def tool_results(self) -> list[str]:
        """Every tool result in the history, in order."""
        return [m.tool_result for m in self.messages if m.tool_result is not None]

    @property
    def turn(self) -> int:
        """How many assistant turns the history already holds."""
        return sum(1 for m in self.messages if m.role == "assistant")

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema the answer must follow (structured output: `parse` in the SDKs), or
        None: Chat's `response_format`, Responses' `text.format`, Anthropic's
        `output_config.format`. A script answers such a request with JSON text."""
        body = self.body
        if self.dialect == "openai_chat":
            spec = body.get("response_format") or {}
            schema = (spec.get("json_schema") or {}).get("schema")
        else:
            holder = body.get("text" if self.dialect == "openai_responses" else "output_config")
            spec = (holder or {}).get("format") or {}
            schema = spec.get("schema")
        return schema if spec.get("type") == "json_schema" else None


Script = Callable[[Prompt], Reply | ErrorReply]


def echo_script(prompt: Prompt) -> Reply:
    """Echo the last user text, tagged with the model so a model swap shows in the output."""
    return Reply(text=f"[{prompt.model}] {prompt.last_user_text}")


@dataclass(frozen=True)
class Usage:
    """Token counts; `input_tokens` includes `cached_tokens`, as OpenAI counts them."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def count_usage(body: dict[str, Any], reply: Reply) -> Usage:
    """Deterministic, plausible counts: about four characters of prompt JSON per token."""
    keys = ("system", "instructions", "messages", "input", "tools", "systemInstruction",
            "contents", "prompt")  # fmt: skip
    prompt_parts = [body.get(k) for k in keys if k in body]
    input_tokens = max(1, len(json.dumps(prompt_parts)) // 4)
    output_tokens = len(split_words(reply.text or "")) + sum(
        max(1, len(json.dumps(call.arguments)) // 4) for call in reply.tool_calls
    )
    return Usage(input_tokens, output_tokens, min(reply.cached_tokens, input_tokens))


def split_words(text: str) -> list[str]:
    """Split text into words that keep their trailing whitespace, as stream deltas."""
    return re.findall(r"\S+\s*|\s+", text)


def parse_prompt(dialect: str, body: dict[str, Any]) -> Prompt:
    """Normalize a request body of `dialect` into a `Prompt`."""
    system, messages, tools = _PARSERS[dialect](body)
    return Prompt(
        dialect=dialect,
        model=str(body.get("model", "")),
        system=system,
        messages=tuple(messages),
        tools=tuple(tools),
        stream=bool(body.get("stream", False)),
        body=body,
    )


_Parsed = tuple[str | None, list[Message], list[str]]


def _text_of(content: Any) -> str:
    """Join the text parts of a content value (a string or a list of typed parts; Cohere's
    tool results are documents, their text in `document.data`)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text") or str((p.get("document") or {}).get("data", ""))
            for p in content
            if isinstance(p, dict)
        )
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    """Parse OpenAI's JSON-string arguments; a malformed string becomes {}."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _join_system(parts: list[str]) -> str | None:
    return "\n\n".join(parts) if parts else None


def _parse_openai_chat(body: dict[str, Any]) -> _Parsed:
    system: list[str] = []
    messages: list[Message] = []
    names: dict[str, str] = {}  # tool call id -> function name, to name the tool results
    for m in body.get("messages") or []:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
        elif role == "tool":
            name = names.get(m.get("tool_call_id", ""))
            messages.append(Message("tool", tool_result=_text_of(m.get("content")), tool_name=name))
        else:
            functions = [
                (c.get("id", ""), c.get("function") or {}) for c in m.get("tool_calls") or []
            ]
            names.update((call_id, f.get("name", "")) for call_id, f in functions)
            calls = tuple(
                ToolCallSpec(f.get("name", ""), _arguments(f.get("arguments")))
                for _, f in functions
            )
            messages.append(Message(role, _text_of(m.get("content")), calls))
    tools = [t["function"]["name"] for t in body.get("tools") or [] if "function" in t]
    return _join_system(system), messages, tools


def _parse_openai_responses(body: dict[str, Any]) -> _Parsed:
    system = [body["instructions"]] if body.get("instructions") else []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages: list[Message] = []
    names: dict[str, str] = {}
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("system", "developer"):
            system.append(_text_of(item.get("content")))
        elif kind == "message":
            _add_turn(messages, Message(item.get("role", "user"), _text_of(item.get("content"))))
        elif kind == "function_call":
            names[item.get("call_id", "")] = item.get("name", "")
            call = ToolCallSpec(item.get("name", ""), _arguments(item.get("arguments")))
            _add_turn(messages, Message("assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            name = names.get(item.get("call_id", ""))
            messages.append(
                Message("tool", tool_result=_text_of(item.get("output")), tool_name=name)
            )
    tools = [t.get("name") or t.get("type", "") for t in body.get("tools") or []]
    return _join_system(system), messages, tools


def _add_turn(messages: list[Message], message: Message) -> None:
    """Append, merging consecutive assistant items: Responses lists one turn as several."""
    last = messages[-1] if messages else None
    if message.role == "assistant" and last is not None and last.role == "assistant":
        text, calls = last.text + message.text, last.tool_calls + message.tool_calls
        messages[-1] = Message("assistant", text, calls)
    else:
        messages.append(message)


def _parse_anthropic_messages(body: dict[str, Any]) -> _Parsed:
    system = _text_of(body.get("system")) or None
    messages: list[Message] = []
    names: dict[str, str] = {}
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        )
        texts: list[str] = []
        calls: list[ToolCallSpec] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text", ""))
            elif kind == "tool_use":
                names[block.get("id", "")] = block.get("name", "")
                calls.append(ToolCallSpec(block.get("name", ""), dict(block.get("input") or {})))
            elif kind == "tool_result":
                name = names.get(block.get("tool_use_id", ""))
                result = _text_of(block.get("content"))
                messages.append(Message("tool", tool_result=result, tool_name=name))
        if texts or calls or m.get("role") == "assistant":
            messages.append(Message(m.get("role", "user"), "".join(texts), tuple(calls)))
    tools = [t.get("name", "") for t in body.get("tools") or []]
    return system, messages, tools


def _parse_gemini(body: dict[str, Any]) -> _Parsed:
    system = _text_of((body.get("systemInstruction") or {}).get("parts")) or None
    messages: list[Message] = []
    for content in body.get("contents") or []:
        role = "assistant" if content.get("role") == "model" else "user"
        texts, calls = [], []
        for part in content.get("parts") or []:
            if "functionResponse" in part:
                answer = part["functionResponse"]
                result = _function_result(answer.get("response"))
                messages.append(Message("tool", tool_result=result, tool_name=answer.get("name")))
            elif "functionCall" in part:
                call = part["functionCall"]
                calls.append(ToolCallSpec(call.get("name", ""), dict(call.get("args") or {})))
            elif "text" in part and not part.get("thought"):
                texts.append(part["text"])
        if texts or calls:
            messages.append(Message(role, "".join(texts), tuple(calls)))
    tools = [
        declared.get("name", "")
        for tool in body.get("tools") or []
        for declared in tool.get("functionDeclarations") or []
    ]
    return system, messages, tools


def _function_result(response: Any) -> str:
    """A Gemini function response as a script reads it: its `result` or `output`, else JSON."""
    if isinstance(response, dict):
        for key in ("result", "output"):
            if key in response:
                value = response[key]
                return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(response)


def _parse_ollama_chat(body: dict[str, Any]) -> _Parsed:
    """Ollama's messages are Chat's, with arguments as objects; a tool result names its tool
    (`tool_name`) or answers the latest call in order."""
    system: list[str] = []
    messages: list[Message] = []
    pending: list[str] = []
    for m in body.get("messages") or []:
        role = m.get("role")
        if role == "system":
            system.append(_text_of(m.get("content")))
        elif role == "tool":
            name = m.get("tool_name") or (pending.pop(0) if pending else None)
            messages.append(Message("tool", tool_result=_text_of(m.get("content")), tool_name=name))
        else:
            functions = [c["function"] for c in m.get("tool_calls") or [] if "function" in c]
            calls = tuple(
                ToolCallSpec(f.get("name", ""), _arguments(f.get("arguments"))) for f in functions
            )
            pending = [call.name for call in calls]
            messages.append(Message(role or "user", _text_of(m.get("content")), calls))
    tools = [t["function"]["name"] for t in body.get("tools") or [] if "function" in t]
    return _join_system(system), messages, tools


def _parse_ollama_generate(body: dict[str, Any]) -> _Parsed:
    return body.get("system"), [Message("user", str(body.get("prompt") or ""))], []


_PARSERS: dict[str, Callable[[dict[str, Any]], _Parsed]] = {
    "openai_chat": _parse_openai_chat,
    "openai_responses": _parse_openai_responses,
    "anthropic_messages": _parse_anthropic_messages,
    "gemini": _parse_gemini,
    "ollama_chat": _parse_ollama_chat,
    "ollama_generate": _parse_ollama_generate,
    "cohere_chat": _parse_openai_chat,  # Chat's messages, tool results as documents
}
