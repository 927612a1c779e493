"""What a fork alters, and how each alteration is applied to a live LLM request.

A `Change` is plain data (it is stored with the child run); applying it is pure: body bytes in,
body bytes out. The per-dialect knowledge (where the model and the system prompt live) is here,
in one table, rather than spread over the front doors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson

from forkpoint.engine.mocks import MockRule
from forkpoint.engine.urls import without_userinfo
from forkpoint.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Change:
    """Everything a fork may change; the empty Change replays then goes on live unchanged."""

    model: str | None = None
    upstream: str | None = None
    system_prompt: str | None = None
    patch: tuple[dict[str, Any], ...] = ()
    mocks: tuple[MockRule, ...] = field(default=())

    def rewrites(self) -> bool:
        """Whether it rewrites LLM requests at all (asked of every request)."""
        return bool(self.model) or self.system_prompt is not None or bool(self.patch)

    def rewritten(self) -> frozenset[str]:
        """What of LLM requests it rewrites: "model", "system_prompt", "patch"."""
        parts = {"model": bool(self.model), "system_prompt": self.system_prompt is not None,
                 "patch": bool(self.patch)}  # fmt: skip
        return frozenset(name for name, given in parts.items() if given)

    def to_json(self) -> dict[str, Any]:
        """The change as stored with the child run: enough to read and to reproduce it."""
        stored: dict[str, Any] = {}
        if self.model:
            stored["model"] = self.model
        if self.upstream:  # without its credentials (given again to a fork of the fork)
            stored["upstream"] = without_userinfo(self.upstream)
        if self.system_prompt is not None:
            stored["system_prompt"] = self.system_prompt
        if self.patch:
            stored["patch"] = list(self.patch)
        if self.mocks:
            stored["mocks"] = [rule.text for rule in self.mocks]
        return stored


def _set_chat_system(body: dict[str, Any], text: str) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for message in messages:
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            message["content"] = text
            return
    messages.insert(0, {"role": "system", "content": text})


def _set_responses_system(body: dict[str, Any], text: str) -> None:
    body["instructions"] = text
    items = body.get("input")
    if isinstance(items, list):  # system/developer items would contradict the instructions
        body["input"] = [
            item for item in items
            if not (isinstance(item, dict) and item.get("role") in ("system", "developer"))
        ]  # fmt: skip


def _set_anthropic_system(body: dict[str, Any], text: str) -> None:
    body["system"] = text


def _set_gemini_system(body: dict[str, Any], text: str) -> None:
    body["systemInstruction"] = {"parts": [{"text": text}]}


def _set_generate_system(body: dict[str, Any], text: str) -> None:
    body["system"] = text


_SYSTEM_SETTERS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "openai_chat": _set_chat_system,
    "openai_responses": _set_responses_system,
    "anthropic_messages": _set_anthropic_system,
    "gemini": _set_gemini_system,
    "ollama_chat": _set_chat_system,  # Ollama and Cohere keep it as Chat does: a system message
    "cohere_chat": _set_chat_system,
    "ollama_generate": _set_generate_system,
}
# Where the model is a body field; Gemini's is in the path (the dialect's `with_model`), and
# so is an Azure OpenAI deployment's (as well as in the body).
_MODEL_IN_BODY = frozenset(
    {"openai_chat", "openai_responses", "anthropic_messages", "openai_embeddings",
     "openai_completions", "ollama_chat", "ollama_generate", "cohere_chat"}
)  # fmt: skip


def apply(change: Change, dialect: str, body: bytes) -> bytes:
    """The LLM request body with the change applied; other bodies come back untouched."""
    return applied(change, dialect, body)[0]


def applied(change: Change, dialect: str, body: bytes) -> tuple[bytes, frozenset[str]]:
    """The request body with the change applied, and what of the change it took ("model",
    "system_prompt", "patch"): nothing for a body that is no JSON object or of no model API,
    so a change that touched no request at all can be told."""
    if dialect == "generic" or not change.rewrites():
        return body, frozenset()
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body, frozenset()
    if not isinstance(value, dict):
        return body, frozenset()
    took = set()
    if change.model and dialect in _MODEL_IN_BODY:
        value["model"] = change.model
        took.add("model")
    if change.system_prompt is not None and dialect in _SYSTEM_SETTERS:
        _SYSTEM_SETTERS[dialect](value, change.system_prompt)
        took.add("system_prompt")
    if change.patch:
        try:
            value = jsonpatch.apply_patch(value, list(change.patch))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
            raise ConfigError(
                f"--patch does not apply to this {dialect} request: {error}"
            ) from error
        took.add("patch")
    return orjson.dumps(value), frozenset(took)


def load_patch(text: str) -> tuple[dict[str, Any], ...]:
    """A JSON patch (RFC 6902) from its JSON text; a single operation may be given bare."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise ConfigError(f"--patch is not JSON: {error}") from error
    operations = value if isinstance(value, list) else [value]
    for operation in operations:
        if not (isinstance(operation, dict) and isinstance(operation.get("op"), str)
                and isinstance(operation.get("path"), str)):  # fmt: skip
            raise ConfigError(f"--patch: {operation!r} is not a JSON patch operation (RFC 6902)")
    return tuple(operations)
