"""curl, the client with no SDK at all: Chat Completions and Responses, plain (gzip, as the
upstream sends it) and streamed, and an Anthropic stream, to the URLs in forkpoint's env."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.stacks.scripts import support_script

pytestmark = pytest.mark.stacks

KEPT_HEADERS = ("content-type", "content-encoding", "x-request-id", "request-id")
ASK = [{"role": "user", "content": "Where is order A1001?"}]
LOOKUP = {
    "name": "lookup_order",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
}
STREAM = {"stream": True}
CALLS: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    # base-URL variable, path, body, curl options (`-N`: print each chunk as it comes)
    ("OPENAI_BASE_URL", "/chat/completions",
     {"model": "gpt-4o", "messages": ASK, "tools": [{"type": "function", "function": LOOKUP}]},
     ("--compressed",)),
    ("OPENAI_BASE_URL", "/chat/completions",
     {"model": "gpt-4o", "messages": ASK, **STREAM, "stream_options": {"include_usage": True}},
     ("-N",)),
    ("OPENAI_BASE_URL", "/responses", {"model": "gpt-4.1", "input": "Where is order A1001?"}, ()),
    ("OPENAI_BASE_URL", "/responses",
     {"model": "gpt-4.1", "input": ASK, "tools": [{"type": "function", **LOOKUP}], **STREAM},
     ("-N",)),
    ("ANTHROPIC_BASE_URL", "/v1/messages",
     {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": ASK, **STREAM},
     ("-N",)),
]  # fmt: skip


def credentials(base: str, env: dict[str, str]) -> tuple[str, ...]:
    if base == "ANTHROPIC_BASE_URL":
        key = env["ANTHROPIC_API_KEY"]
        return ("-H", f"x-api-key: {key}", "-H", "anthropic-version: 2023-06-01")
    return ("-H", f"Authorization: Bearer {env['OPENAI_API_KEY']}")


def curl(env: dict[str, str], url: str, body: dict[str, Any], *options: str) -> dict[str, Any]:
    """One curl call; its status, the headers that come from the upstream, and the body."""
    curl_path = shutil.which("curl")
    assert curl_path, "the curl stack test needs curl on PATH"
    done = subprocess.run(
        [curl_path, "-sS", "-D", "-", url, "-H", "Content-Type: application/json",
         "-d", json.dumps(body), *options],
        env=env, capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    head, _, payload = done.stdout.partition(b"\r\n\r\n")
    status_line, *lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines)
    kept = {name: headers[name] for name in KEPT_HEADERS if name in headers}
    return {"status": status_line.split()[1], "headers": kept, "body": payload.decode()}


def curl_agent(env: dict[str, str]) -> list[Any]:
    return [
        curl(env, env[base] + path, body, *options, *credentials(base, env))
        for base, path, body, options in CALLS
    ]


def test_curl_plain_and_streamed_replays_offline(stacks):
    recorded = stacks.check(curl_agent, support_script, min_steps=5)
    plain, stream, responses, responses_stream, anthropic_stream = recorded.output
    assert plain["headers"]["content-encoding"] == "gzip"  # passed through; curl decoded it
    [call] = json.loads(plain["body"])["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "lookup_order"
    assert stream["body"].rstrip().endswith("data: [DONE]")
    assert json.loads(responses["body"])["status"] == "completed"
    assert "event: response.function_call_arguments.delta" in responses_stream["body"]
    assert "event: message_stop" in anthropic_stream["body"]
    assert {call["status"] for call in recorded.output} == {"200"}
