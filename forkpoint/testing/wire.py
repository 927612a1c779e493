"""What every dialect's wire module provides, and the bits they share.

A wire module is sans-io: it turns a `Prompt` and a `Reply` into a JSON body or a list of
stream events (SSE for most APIs, JSON lines for Ollama's), and the server in `upstream.py`
writes them. Keeping bytes and sockets apart lets the shapes be read (and checked against the
SDKs' types) without a server.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forkpoint.testing.script import Prompt, Reply, Usage

__all__ = ["SSE", "Event", "Wire", "compact", "fragments", "frame", "random_id"]

# One SSE event: its `event:` name (None for data-only streams) and its data, a JSON object
# or a literal string such as OpenAI's "[DONE]".
Event = tuple[str | None, dict[str, Any] | str]

_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str, length: int, alphabet: str = _ALPHABET) -> str:
    """A fresh id in the provider's style; real APIs never repeat one, so neither do we."""
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def compact(data: dict[str, Any] | str) -> str:
    return data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))


def frame(event: Event) -> bytes:
    """Encode one event as SSE bytes, with compact JSON as the providers send it."""
    name, data = event
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {compact(data)}\n\n".encode()


SSE = "text/event-stream; charset=utf-8"


@dataclass(frozen=True)
class Wire:
    """One dialect's shapes: a full body, a stream of events, an error body; the header that
    carries a request id (None: the API sends none), and how a stream is framed."""

    body: Callable[[Prompt, Reply, Usage], dict[str, Any]]
    events: Callable[[Prompt, Reply, Usage], list[Event]]
    error: Callable[[int, str, str], dict[str, Any]]
    request_id_header: str | None
    frame: Callable[[Event], bytes] = frame
    stream_type: str = SSE


def fragments(arguments: str) -> list[str]:
    """Split tool-call JSON roughly where a model's tokens fall: words and punctuation runs."""
    return re.findall(r"\w+|\W+", arguments) or [""]
