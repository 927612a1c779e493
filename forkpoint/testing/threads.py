"""Anthropic's message threads (beta `message-threads-2026-08-12`), held as the server holds them.

The anthropic SDK's tool runner threads by default. A request with `thread: {"type": "create"}`
asks the server to hold the conversation under the reply's id; a later request with
`{"type": "continue", "previous_message_id": ID}` sends only the new turn's messages and
neither `system` nor `tools`, which the thread holds. A reply is continued once: continuing
it again is refused (`thread_already_continued`, 400), and so is an id the server does not
hold (`thread_not_found`, 404); on either, the SDK resends the whole history under a new
thread. Sans-io: the upstream resolves each request before the script sees it, and remembers
each threaded reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ThreadError", "Threads"]

# Request fields a thread keeps from its `create`; a `continue` must not repeat them.
_HELD = ("system", "tools")


@dataclass(frozen=True)
class ThreadError:
    """A refused `continue`: the HTTP status, the `error.details.error_code`, the message."""

    status: int
    code: str
    message: str


class Threads:
    def __init__(self) -> None:
        self._held: dict[str, dict[str, Any]] = {}  # reply id -> held fields and history
        self._continued: set[str] = set()

    def resolve(self, body: dict[str, Any]) -> dict[str, Any] | ThreadError:
        """The request as the model reads it: a `continue` gets the thread's fields and history."""
        thread = body.get("thread")
        if not isinstance(thread, dict) or thread.get("type") != "continue":
            return body
        previous = str(thread.get("previous_message_id"))
        held = self._held.get(previous)
        if held is None:
            message = f"No thread state was found for previous_message_id {previous!r}."
            return ThreadError(404, "thread_not_found", message)
        if previous in self._continued:
            message = f"The thread was already continued from previous_message_id {previous!r}."
            return ThreadError(400, "thread_already_continued", message)
        self._continued.add(previous)
        return {**held, **body, "messages": [*held["messages"], *(body.get("messages") or [])]}

    def remember(self, resolved: dict[str, Any], reply: dict[str, Any]) -> None:
        """Hold the conversation up to `reply` (a message object) if the request was threaded."""
        if not isinstance(resolved.get("thread"), dict):
            return
        held = {key: resolved[key] for key in _HELD if key in resolved}
        answer = {"role": "assistant", "content": reply["content"]}
        held["messages"] = [*(resolved.get("messages") or []), answer]
        self._held[reply["id"]] = held
