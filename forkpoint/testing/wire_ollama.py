"""Ollama's own API on the wire: `/api/chat` and `/api/generate`, as an Ollama server sends
them and the ollama client parses them.

Ollama streams unless told `"stream": false`: JSON lines (`application/x-ndjson`), one a token
or so, the last with `done: true`, the reason and the counts and durations (nanoseconds). A
tool call comes whole, its arguments an object. Errors are `{"error": "…"}`.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from forkpoint.testing.script import Prompt, Reply, Usage, split_words
from forkpoint.testing.wire import Event, Wire, compact

__all__ = ["CHAT", "GENERATE"]

NDJSON = "application/x-ndjson"


def _error(status: int, message: str, type_: str) -> dict[str, Any]:
    return {"error": message}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _head(prompt: Prompt) -> dict[str, Any]:
    return {"model": prompt.model, "created_at": _now()}


def _done(reply: Reply, usage: Usage) -> dict[str, Any]:
    """The last line's tail: why it stopped, the counts, and made-up durations (ns)."""
    reason = "length" if reply.finish_reason == "length" else "stop"
    took = secrets.randbelow(10**8) + 10**8
    return {
        "done_reason": reason,
        "done": True,
        "total_duration": took + 2 * 10**6,
        "load_duration": 10**6 + secrets.randbelow(10**6),
        "prompt_eval_count": usage.input_tokens,
        "prompt_eval_duration": 10**7 + secrets.randbelow(10**7),
        "eval_count": usage.output_tokens,
        "eval_duration": took,
    }


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"function": {"name": c.name, "arguments": c.arguments}} for c in reply.tool_calls]


def _message(content: str, reply: Reply | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reply is not None and reply.tool_calls:
        message["tool_calls"] = _calls(reply)
    return message


def _chat_body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    return {**_head(prompt), "message": _message(reply.text or "", reply), **_done(reply, usage)}


def _chat_events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    events: list[Event] = [
        (None, {**_head(prompt), "message": _message(word), "done": False})
        for word in split_words(reply.text or "")
    ]
    if reply.tool_calls:
        events.append((None, {**_head(prompt), "message": _message("", reply), "done": False}))
    events.append((None, {**_head(prompt), "message": _message(""), **_done(reply, usage)}))
    return events


def _generate_body(prompt: Prompt, reply: Reply, usage: Usage) -> dict[str, Any]:
    context = [secrets.randbelow(128_000) for _ in range(8)]
    done = _done(reply, usage)
    return {**_head(prompt), "response": reply.text or "", **done, "context": context}


def _generate_events(prompt: Prompt, reply: Reply, usage: Usage) -> list[Event]:
    events: list[Event] = [
        (None, {**_head(prompt), "response": word, "done": False})
        for word in split_words(reply.text or "")
    ]
    final = _generate_body(prompt, Reply(text="", finish_reason=reply.finish_reason), usage)
    events.append((None, final))
    return events


def _frame(event: Event) -> bytes:
    return (compact(event[1]) + "\n").encode()


CHAT = Wire(_chat_body, _chat_events, _error, None, frame=_frame, stream_type=NDJSON)
GENERATE = Wire(_generate_body, _generate_events, _error, None, frame=_frame, stream_type=NDJSON)
