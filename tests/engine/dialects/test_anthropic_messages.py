"""Messages API bodies shaped like api.anthropic.com's (see anthropic.types)."""

import json
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from forkpoint.engine.dialects.anthropic_messages import AnthropicMessages
from forkpoint.models import Kind, ToolCall, Usage

MESSAGES = AnthropicMessages()
MODEL = "claude-haiku-4-5-20251001"
REQUEST = {
    "model": "claude-haiku-4-5",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Weather in Paris? Then list my cities."}],
    "stream": True,
}
START_USAGE = {
    "input_tokens": 472,
    "cache_creation_input_tokens": 130,
    "cache_read_input_tokens": 2048,
    "cache_creation": {"ephemeral_5m_input_tokens": 130, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 2,
    "service_tier": "standard",
}


def sse(*events: dict[str, Any]) -> bytes:
    """The wire form: each event named after its `type`."""
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
    )


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, kind: str, **fields: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": START_USAGE,
    },
}
EVENTS = [
    MESSAGE_START,
    block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
    {"type": "ping"},
    delta(0, "thinking_delta", thinking="The user wants the weather."),
    delta(0, "signature_delta", signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
    stop(0),
    block_start(1, {"type": "text", "text": ""}),
    delta(1, "text_delta", text="Let me "),
    delta(1, "text_delta", text="check."),
    stop(1),
    block_start(
        2,
        {
            "type": "tool_use",
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "name": "get_weather",
            "input": {},
        },
    ),
    delta(2, "input_json_delta", partial_json=""),
    delta(2, "input_json_delta", partial_json='{"locat'),
    delta(2, "input_json_delta", partial_json='ion": "Pa'),
    delta(2, "input_json_delta", partial_json='ris, France"}'),
    stop(2),
    block_start(
        3, {"type": "tool_use", "id": "toolu_01Q2list", "name": "list_cities", "input": {}}
    ),
    stop(3),
    {
        "type": "message_delta",
        "delta": {"type": "message_delta", "stop_reason": "tool_use", "stop_sequence": None},
        "usage": {
            "input_tokens": 472,
            "cache_creation_input_tokens": 130,
            "cache_read_input_tokens": 2048,
            "output_tokens": 89,
            "output_tokens_details": {"thinking_tokens": 31},
        },
    },
    {"type": "message_stop"},
]
PARIS = ToolCall("get_weather", '{"location":"Paris, France"}', "toolu_01T1x1fJ34qAmk2tNTrN7Up6")
CITIES = ToolCall("list_cities", "{}", "toolu_01Q2list")


def test_claims() -> None:
    assert MESSAGES.claims("POST", "/v1/messages")
    assert MESSAGES.claims("POST", "/anthropic/v1/messages")
    assert MESSAGES.claims("POST", "/messages")
    assert not MESSAGES.claims("POST", "/v1/messages/count_tokens")
    assert not MESSAGES.claims("POST", "/v1/messages/batches")
    assert not MESSAGES.claims("GET", "/v1/messages")
    assert not MESSAGES.claims("POST", "/v1/threads/thread_abc123/messages")


def test_stream_with_thinking_text_and_tool_calls() -> None:
    summary = MESSAGES.summarize(REQUEST, sse(*EVENTS), streamed=True, status=200)
    assert summary.kind is Kind.LLM
    assert summary.dialect == "anthropic_messages"
    assert summary.model == MODEL
    assert summary.text == "Let me check."
    assert summary.tool_calls == (PARIS, CITIES)
    assert summary.finish_reason == "tool_use"
    # input = uncached 472 + cache writes 130 + cache reads 2048; output from message_delta.
    assert summary.usage == Usage(input=2650, output=89, cached=2048, reasoning=31, cache_write=130)


def test_stream_usage_from_a_message_delta_with_output_tokens_only() -> None:
    events = [*EVENTS]
    events[-2] = {**events[-2], "usage": {"output_tokens": 57}}
    summary = MESSAGES.summarize(REQUEST, sse(*events), streamed=True, status=200)
    assert summary.usage == Usage(input=2650, output=57, cached=2048, cache_write=130)


def test_cut_stream_keeps_partial_text_and_arguments() -> None:
    cut = sse(*EVENTS[:13])  # broke off after '{"locat'
    summary = MESSAGES.summarize(REQUEST, cut, streamed=True, status=200)
    assert summary.text == "Let me check."
    assert summary.tool_calls == (ToolCall("get_weather", '{"locat', PARIS.id),)
    assert summary.finish_reason is None
    assert summary.usage == Usage(input=2650, output=2, cached=2048, cache_write=130)


def test_cut_inside_an_event() -> None:
    body = sse(*EVENTS[:9])
    summary = MESSAGES.summarize(REQUEST, body[:-20], streamed=True, status=200)
    assert summary.text == "Let me "


def test_mid_stream_error_event() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    summary = MESSAGES.summarize(REQUEST, sse(*EVENTS[:9], error), streamed=True, status=200)
    assert (summary.text, summary.finish_reason) == ("Let me check.", None)


MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "thinking", "thinking": "Weather first.", "signature": "EqQB"},
        {"type": "text", "text": "Let me check."},
        {
            "type": "tool_use",
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "name": "get_weather",
            "input": {"location": "Paris, France"},
        },
        {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"q": "x"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_creation_input_tokens": 1500,
        "cache_read_input_tokens": 0,
        "output_tokens": 61,
        "service_tier": "standard",
    },
}


def test_message() -> None:
    summary = MESSAGES.summarize(REQUEST, orjson.dumps(MESSAGE), streamed=False, status=200)
    assert summary.model == MODEL
    assert summary.text == "Let me check."
    assert summary.tool_calls == (PARIS,)
    assert summary.finish_reason == "tool_use"
    assert summary.usage == Usage(input=1512, output=61, cached=0, cache_write=1500)


def test_streamed_and_whole_arguments_read_the_same() -> None:
    whole = MESSAGES.summarize(REQUEST, orjson.dumps(MESSAGE), streamed=False, status=200)
    streamed = MESSAGES.summarize(REQUEST, sse(*EVENTS), streamed=True, status=200)
    assert whole.tool_calls[0] == streamed.tool_calls[0]


def test_end_turn_with_usage_without_cache_fields() -> None:
    message = {
        **MESSAGE,
        "content": [{"type": "text", "text": "Hi!"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 9, "output_tokens": 4},
    }
    summary = MESSAGES.summarize(REQUEST, orjson.dumps(message), streamed=False, status=200)
    assert (summary.text, summary.finish_reason, summary.tool_calls) == ("Hi!", "end_turn", ())
    assert summary.usage == Usage(input=9, output=4)


def test_error_body() -> None:
    error = {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
    }
    summary = MESSAGES.summarize(REQUEST, orjson.dumps(error), streamed=True, status=529)
    assert summary.kind is Kind.LLM
    assert summary.model == "claude-haiku-4-5"
    assert (summary.usage, summary.text, summary.finish_reason, summary.tool_calls) == (
        None,
        None,
        None,
        (),
    )


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{truncated",
        b'{"content": {"type": "text"}, "usage": 5}',
        b'{"content": [null, {"type": "tool_use", "input": "x"}, {"type": "text", "text": 3}]}',
        b'event: message_start\ndata: {"type": "message_start", "message": null}\n\n',
        b'data: {"type": "content_block_delta", "index": 4, "delta": {"type": "text_delta"}}\n\n',
        b'data: {"type": "content_block_start", "index": 0, "content_block": 1}\n\n'
        b'data: {"type": "content_block_delta", "index": 0, "delta": []}\n\n'
        b'data: {"type": "message_delta", "delta": null, "usage": {"output_tokens": "9"}}\n\n',
    ],
)
def test_garbage_never_raises(body: bytes) -> None:
    for streamed in (False, True):
        summary = MESSAGES.summarize(None, body, streamed=streamed, status=200)
        assert summary.kind is Kind.LLM


def test_error_response_is_raised_by_the_anthropic_sdk_without_retries() -> None:
    headers, body = MESSAGES.error_response(409, "no recording for step 4", error_type="divergence")
    assert ("content-type", "application/json") in headers
    assert orjson.loads(body) == {
        "type": "error",
        "error": {"type": "divergence", "message": "no recording for step 4"},
    }
    calls = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        return httpx2.Response(409, headers=dict(headers), content=body)

    http_client = httpx2.Client(transport=httpx2.MockTransport(handler))
    with (
        anthropic.Anthropic(
            api_key="k", base_url="http://fp.test", http_client=http_client
        ) as client,
        pytest.raises(anthropic.ConflictError, match="no recording for step 4"),
    ):
        client.messages.create(
            model="claude-haiku-4-5", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert len(calls) == 1
