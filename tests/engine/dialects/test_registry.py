import gzip
import json
from typing import Any

import brotli
import orjson
import pytest

from forkpoint.engine.dialects import (
    DIALECTS,
    GENERIC,
    Dialect,
    dialect_for,
    summarize_exchange,
)
from forkpoint.models import Chunk, Exchange, Kind, Summary, ToolCall, Usage
from tests.builders import exchange as build


@pytest.mark.parametrize(
    ("method", "path", "name"),
    [
        ("POST", "/v1/chat/completions", "openai_chat"),
        ("POST", "/openai/deployments/prod/chat/completions", "openai_chat"),
        ("POST", "/v1/responses", "openai_responses"),
        ("POST", "/v1/messages", "anthropic_messages"),
        ("POST", "/anthropic/v1/messages", "anthropic_messages"),
        ("POST", "/v1/messages/count_tokens", "generic"),
        ("POST", "/v1/messages/batches", "generic"),
        ("GET", "/v1/models", "generic"),
        ("POST", "/v1/embeddings", "openai_embeddings"),
        ("POST", "/v1/completions", "openai_completions"),
        ("POST", "/v1beta/models/gemini-2.0-flash:generateContent", "gemini"),
        ("POST", "/v1beta/models/gemini-2.0-flash:streamGenerateContent", "gemini"),
        ("POST", "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent", "gemini"),
        ("GET", "/v1beta/models/gemini-2.0-flash", "generic"),
        ("POST", "/api/search", "generic"),
        ("POST", "/ollama/api/chat", "ollama_chat"),
        ("POST", "/api/generate", "ollama_generate"),
        ("POST", "/ollama/v1/chat/completions", "openai_chat"),  # Ollama's OpenAI-compatible API
        ("GET", "/ollama/api/tags", "generic"),
        ("POST", "/cohere/v2/chat", "cohere_chat"),
        ("POST", "/cohere/v1/chat", "generic"),  # version 1 speaks another shape
        ("POST", "/cohere/v2/embed", "generic"),
        ("POST", "/v1/audio/transcriptions", "openai_audio"),
        ("POST", "/v1/audio/translations", "openai_audio"),
        ("POST", "/v1/audio/speech", "generic"),
    ],
)
def test_dialect_for(method: str, path: str, name: str) -> None:
    assert dialect_for(method, path).name == name


def test_registry_names() -> None:
    assert [d.name for d in DIALECTS] == [
        "openai_chat", "openai_responses", "anthropic_messages", "gemini", "openai_embeddings",
        "openai_completions", "ollama_chat", "ollama_generate", "cohere_chat",
        "openai_audio",
    ]  # fmt: skip
    dialects: list[Dialect] = [*DIALECTS, GENERIC]  # each satisfies the protocol
    assert len({d.name for d in dialects}) == 11


def exchange(
    route: str,
    request: object,
    response: bytes,
    *,
    request_headers: tuple[tuple[str, str], ...] = (),
    response_headers: tuple[tuple[str, str], ...] = (),
    chunked: bool = False,
    method: str = "POST",
    status: int = 200,
) -> Exchange:
    return build(
        run_id="01K3Z8Q6V4W9M2N7P5R1T3Y6X8",
        method=method,
        route=route,
        request_headers=request_headers,
        request_body=request if isinstance(request, bytes) else orjson.dumps(request),
        fingerprint="f",
        status=status,
        response_headers=response_headers,
        response_body=response,
        chunks=[Chunk(12.5, response)] if chunked else None,
    )


ANTHROPIC_EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 3},
    },
    {"type": "message_stop"},
]
ANTHROPIC_STREAM = b"".join(
    f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in ANTHROPIC_EVENTS
)
ANTHROPIC_REQUEST = {"model": "claude-haiku-4-5", "max_tokens": 64, "stream": True, "messages": []}


def test_summarize_compressed_stream_with_prefix_and_query() -> None:
    summary = summarize_exchange(
        exchange(
            "/anthropic/v1/messages?beta=true",
            gzip.compress(orjson.dumps(ANTHROPIC_REQUEST)),
            brotli.compress(ANTHROPIC_STREAM),
            request_headers=(("Content-Encoding", "gzip"),),
            response_headers=(("content-type", "text/event-stream"), ("Content-Encoding", "br")),
            chunked=True,
        )
    )
    assert summary == Summary(
        kind=Kind.LLM,
        dialect="anthropic_messages",
        model="claude-haiku-4-5-20251001",
        usage=Usage(input=25, output=3),
        finish_reason="end_turn",
        text="Hi",
    )


def test_summarize_cut_compressed_stream() -> None:
    compressor = brotli.Compressor()
    events = ANTHROPIC_STREAM.split(b"\n\n")
    pieces = [compressor.process(event + b"\n\n") + compressor.flush() for event in events[:3]]
    summary = summarize_exchange(
        exchange(
            "/v1/messages",
            ANTHROPIC_REQUEST,
            b"".join(pieces),  # the connection broke before the stream's end
            response_headers=(("content-encoding", "br"),),
            chunked=True,
        )
    )
    assert (summary.text, summary.finish_reason) == ("Hi", None)


def test_summarize_undecodable_response_keeps_the_request_model() -> None:
    summary = summarize_exchange(
        exchange(
            "/v1/chat/completions",
            {"model": "gpt-4.1-mini", "messages": []},
            b"not gzip at all",
            response_headers=(("content-encoding", "gzip"),),
        )
    )
    assert summary == Summary(kind=Kind.LLM, dialect="openai_chat", model="gpt-4.1-mini")


def test_summarize_non_json_request() -> None:
    summary = summarize_exchange(exchange("/v1/responses", b"\x00binary", b""))
    assert summary == Summary(kind=Kind.LLM, dialect="openai_responses")


def test_summarize_chat_completion() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1756812345,
        "model": "gpt-4.1-mini-2025-04-14",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"id":42}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
    }
    summary = summarize_exchange(
        exchange(
            "http://127.0.0.1:8765/v1/chat/completions",
            {"model": "gpt-4.1-mini", "messages": []},
            gzip.compress(orjson.dumps(completion)),
            response_headers=(("Content-Encoding", "gzip"),),
        )
    )
    assert summary.tool_calls == (ToolCall("lookup_order", '{"id":42}', "call_1"),)
    assert summary.usage == Usage(input=50, output=9)


@pytest.mark.parametrize(
    ("method", "request_body", "response", "kind"),
    [
        ("POST", {"query": "refund policy"}, b'{"results": []}', Kind.TOOL),
        ("GET", b"", b'{"order": 42, "status": "shipped"}', Kind.TOOL),
        ("POST", {"to": "a@example.com"}, b"", Kind.TOOL),
        ("GET", b"", b"<html><body>hello</body></html>", Kind.OTHER),
        ("GET", b"", b"", Kind.OTHER),
    ],
)
def test_summarize_generic(method: str, request_body: object, response: bytes, kind: Kind) -> None:
    summary = summarize_exchange(exchange("/api/orders/42", request_body, response, method=method))
    assert summary == Summary(kind=kind, dialect="generic")


def test_generic_error_response_is_openai_like() -> None:
    headers, body = GENERIC.error_response(502, "tool API unreachable", error_type="upstream")
    assert ("content-type", "application/json") in headers
    assert orjson.loads(body)["error"] == {
        "message": "tool API unreachable",
        "type": "upstream",
        "param": None,
        "code": "upstream",
    }
