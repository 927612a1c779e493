"""Gemini, OpenAI Embeddings and legacy Completions read as model calls: model, usage, cost,
and a fork's model swap (found by a user: shown as tools at $0, left unchanged by --model)."""

from __future__ import annotations

import json

import orjson

from forkpoint.compare.cost import exchange_cost
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Forward, Request, decide
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.session import Session
from forkpoint.models import Chunk, Kind, Mode, Run, ToolCall, Usage
from tests.builders import exchange

GEMINI = "/v1beta/models/gemini-2.0-flash:generateContent"
GEMINI_ANSWER = {
    "candidates": [{
        "content": {"role": "model", "parts": [
            {"text": "Let me look.", "thought": True},
            {"text": "Looking up A1."},
            {"functionCall": {"name": "lookup_order", "args": {"order_id": "A1"}}},
        ]},
        "finishReason": "STOP", "index": 0,
    }],
    "usageMetadata": {"promptTokenCount": 1200, "candidatesTokenCount": 30,
                      "cachedContentTokenCount": 1000, "thoughtsTokenCount": 12},
    "modelVersion": "gemini-2.0-flash",
}  # fmt: skip


def test_a_gemini_answer_is_a_priced_model_call_with_its_tool_calls():
    summary = summarize_exchange(exchange(route=GEMINI, response_body=orjson.dumps(GEMINI_ANSWER)))
    assert (summary.kind, summary.dialect, summary.model) == (
        Kind.LLM,
        "gemini",
        "gemini-2.0-flash",
    )
    assert summary.usage == Usage(input=1200, output=42, cached=1000, reasoning=12)
    assert summary.tool_calls == (ToolCall("lookup_order", '{"order_id":"A1"}'),)
    assert summary.text == "Looking up A1." and summary.finish_reason == "STOP"
    cost = exchange_cost(exchange(route=GEMINI, summary=summary))
    assert cost is not None and cost > 0


def test_a_gemini_stream_as_sse_or_as_a_json_array_reads_the_same():
    pieces = [
        {"candidates": [{"content": {"parts": [{"text": "Hel"}]}, "index": 0}]},
        {"candidates": [{"content": {"parts": [{"text": "lo"}]}, "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2},
         "modelVersion": "gemini-2.0-flash"},
    ]  # fmt: skip
    sse = b"".join(b"data: " + orjson.dumps(p) + b"\r\n\r\n" for p in pieces)
    array = json.dumps(pieces).encode()
    route = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
    for body, path in ((sse, route + "?alt=sse"), (array, route)):
        streamed = exchange(route=path, response_body=body, chunks=[Chunk(1.0, body)])
        summary = summarize_exchange(streamed)
        assert (summary.text, summary.usage, summary.model) == (
            "Hello", Usage(5, 2), "gemini-2.0-flash",
        )  # fmt: skip


def test_embeddings_and_legacy_completions_are_model_calls():
    embedded = summarize_exchange(exchange(
        route="/v1/embeddings", request_body=b'{"model":"text-embedding-3-small","input":"x"}',
        response_body=orjson.dumps({"object": "list", "data": [{"embedding": [0.1]}],
                                    "model": "text-embedding-3-small",
                                    "usage": {"prompt_tokens": 8, "total_tokens": 8}}),
    ))  # fmt: skip
    assert (embedded.kind, embedded.model, embedded.usage) == (
        Kind.LLM, "text-embedding-3-small", Usage(input=8),
    )  # fmt: skip
    events = [
        {"model": "gpt-3.5-turbo-instruct", "choices": [{"text": "4", "index": 0}]},
        {"model": "gpt-3.5-turbo-instruct", "choices": [{"text": "2", "index": 0,
         "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    ]  # fmt: skip
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    completed = summarize_exchange(
        exchange(route="/v1/completions", response_body=body, chunks=[Chunk(1.0, body)])
    )
    assert (completed.kind, completed.text, completed.usage) == (Kind.LLM, "42", Usage(3, 2))
    assert (completed.model, completed.finish_reason) == ("gpt-3.5-turbo-instruct", "stop")


def test_a_fork_swaps_the_model_in_geminis_path_and_the_others_bodies():
    config = EngineConfig(routes=Routes("https://generativelanguage.googleapis.com"))
    session = Session.fork(Run("c", mode=Mode.FORK), [], config, at=0,
                           change=Change(model="gemini-2.5-pro", system_prompt="Be brief."))  # fmt: skip
    body = orjson.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    action = decide(session, Request("POST", GEMINI + "?alt=sse", (), body), config)
    assert isinstance(action, Forward)
    assert action.url == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro"
        ":generateContent?alt=sse"
    )
    sent = orjson.loads(action.body)
    assert "model" not in sent and sent["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert summarize_exchange(action.record).model == "gemini-2.5-pro"
    embed = decide(session, Request("POST", "/v1/embeddings", (), b'{"model":"a","input":"x"}'),
                   config)  # fmt: skip
    assert isinstance(embed, Forward) and orjson.loads(embed.body)["model"] == "gemini-2.5-pro"
