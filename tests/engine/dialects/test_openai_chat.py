"""Chat Completions bodies shaped like api.openai.com's (see openai.types.chat)."""

import json
from typing import Any

import httpx2
import openai
import orjson
import pytest

from forkpoint.engine.dialects.openai_chat import OpenAIChat
from forkpoint.models import Kind, ToolCall, Usage

CHAT = OpenAIChat()
REQUEST = {
    "model": "gpt-4.1-mini",
    "messages": [{"role": "user", "content": "Weather in Paris and Tokyo?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    "stream": True,
    "stream_options": {"include_usage": True},
}
USAGE = {
    "prompt_tokens": 1284,
    "completion_tokens": 95,
    "total_tokens": 1379,
    "prompt_tokens_details": {"cached_tokens": 1152, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 64,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}


def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None) -> bytes:
    """One `data:` line; `delta=None` makes the include_usage chunk, whose `choices` is empty."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    choices = [] if delta is None else [choice]
    body = {
        "id": "chatcmpl-CAbZ3kq9TqVvYwQy6n0aBcDeFgHiJ",
        "object": "chat.completion.chunk",
        "created": 1756812345,
        "model": "gpt-4.1-mini-2025-04-14",
        "service_tier": "default",
        "system_fingerprint": "fp_6f2eabb9a5",
        "choices": choices,
        "usage": usage,
        "obfuscation": "Xq3",
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def call_delta(index: int, arguments: str, *, id: str = "", name: str = "") -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id:
        call.update(id=id, type="function")
        call["function"]["name"] = name
    return {"tool_calls": [call]}


TOOL_STREAM = b"".join(
    [
        chunk({"role": "assistant", "content": None, "refusal": None}),
        chunk(call_delta(0, "", id="call_pAris9XyZ", name="get_weather")),
        chunk(call_delta(0, '{"ci')),
        chunk(call_delta(0, 'ty": "Par')),
        chunk(call_delta(1, "", id="call_tOkyo4AbC", name="get_weather")),
        chunk(call_delta(0, 'is"}')),
        chunk(call_delta(1, '{"city"')),
        chunk(call_delta(1, ': "Tokyo"}')),
        chunk({}, finish="tool_calls"),
        chunk(None, usage=USAGE),
        b"data: [DONE]\n\n",
    ]
)

TEXT_STREAM = b"".join(
    [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        chunk({"content": "It is "}),
        chunk({"content": "sunny in "}),
        chunk({"content": "Paris."}),
        chunk({}, finish="stop"),
        chunk(None, usage=USAGE),
        b"data: [DONE]\n\n",
    ]
)


def test_claims() -> None:
    assert CHAT.claims("POST", "/v1/chat/completions")
    assert CHAT.claims("post", "/openai/deployments/gpt4/chat/completions")
    assert CHAT.claims("POST", "/v1/chat/completions/")
    assert not CHAT.claims("GET", "/v1/chat/completions")
    assert not CHAT.claims("POST", "/v1/completions")
    assert not CHAT.claims("GET", "/v1/chat/completions/chatcmpl-1/messages")


def test_stream_with_tool_calls_split_over_deltas() -> None:
    summary = CHAT.summarize(REQUEST, TOOL_STREAM, streamed=True, status=200)
    assert summary.kind is Kind.LLM
    assert summary.dialect == "openai_chat"
    assert summary.model == "gpt-4.1-mini-2025-04-14"
    assert summary.tool_calls == (
        ToolCall("get_weather", '{"city": "Paris"}', "call_pAris9XyZ"),
        ToolCall("get_weather", '{"city": "Tokyo"}', "call_tOkyo4AbC"),
    )
    assert summary.finish_reason == "tool_calls"
    assert summary.text is None
    assert summary.usage == Usage(input=1284, output=95, cached=1152, reasoning=64)


def test_stream_text_and_usage_from_the_last_chunk() -> None:
    summary = CHAT.summarize(REQUEST, TEXT_STREAM, streamed=True, status=200)
    assert summary.text == "It is sunny in Paris."
    assert summary.finish_reason == "stop"
    assert summary.usage == Usage(1284, 95, 1152, 64)
    assert summary.tool_calls == ()


def test_stream_without_include_usage_has_no_usage() -> None:
    body = TEXT_STREAM.replace(chunk(None, usage=USAGE), b"")
    assert CHAT.summarize(REQUEST, body, streamed=True, status=200).usage is None


def test_cut_stream_keeps_what_arrived() -> None:
    cut = TEXT_STREAM[: TEXT_STREAM.index(b"Paris.")]
    summary = CHAT.summarize(REQUEST, cut, streamed=True, status=200)
    assert summary.text == "It is sunny in "
    assert summary.finish_reason is None
    assert summary.usage is None
    assert summary.model == "gpt-4.1-mini-2025-04-14"


def test_cut_stream_keeps_partial_tool_arguments() -> None:
    cut = TOOL_STREAM[: TOOL_STREAM.index(b"call_tOkyo4AbC")]
    (call,) = CHAT.summarize(REQUEST, cut, streamed=True, status=200).tool_calls
    assert call == ToolCall("get_weather", '{"city": "Par', "call_pAris9XyZ")


COMPLETION = {
    "id": "chatcmpl-CAbZ3kq9TqVvYwQy6n0aBcDeFgHiJ",
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
                        "id": "call_pAris9XyZ",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_gRammar1",
                        "type": "custom",
                        "custom": {"name": "run_sql", "input": "SELECT 1"},
                    },
                ],
                "refusal": None,
                "annotations": [],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ],
    "usage": USAGE,
    "service_tier": "default",
    "system_fingerprint": "fp_6f2eabb9a5",
}


def test_completion_with_function_and_custom_tool_calls() -> None:
    summary = CHAT.summarize(REQUEST, orjson.dumps(COMPLETION), streamed=False, status=200)
    assert summary.model == "gpt-4.1-mini-2025-04-14"
    assert summary.tool_calls == (
        ToolCall("get_weather", '{"city":"Paris"}', "call_pAris9XyZ"),
        ToolCall("run_sql", "SELECT 1", "call_gRammar1"),
    )
    assert summary.finish_reason == "tool_calls"
    assert summary.usage == Usage(1284, 95, 1152, 64)
    assert summary.text is None


def test_completion_text_from_first_choice_only() -> None:
    body = {
        **COMPLETION,
        "choices": [
            {"index": 1, "message": {"role": "assistant", "content": "B"}, "finish_reason": "stop"},
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A"},
                "finish_reason": "length",
            },
        ],
    }
    summary = CHAT.summarize(REQUEST, orjson.dumps(body), streamed=False, status=200)
    assert (summary.text, summary.finish_reason, summary.tool_calls) == ("A", "length", ())


def test_legacy_function_call() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "f", "arguments": "{}"},
    }
    body = {
        **COMPLETION,
        "choices": [{"index": 0, "message": message, "finish_reason": "function_call"}],
    }
    summary = CHAT.summarize(REQUEST, orjson.dumps(body), streamed=False, status=200)
    assert summary.tool_calls == (ToolCall("f", "{}"),)
    streamed = chunk({"function_call": {"name": "f", "arguments": ""}}) + chunk(
        {"function_call": {"arguments": "{}"}}
    )
    assert CHAT.summarize(REQUEST, streamed, streamed=True, status=200).tool_calls == (
        ToolCall("f", "{}"),
    )


def test_error_body_to_a_stream_request() -> None:
    error = {
        "error": {
            "message": "The model `gpt-9` does not exist or you do not have access to it.",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }
    summary = CHAT.summarize(
        {**REQUEST, "model": "gpt-9"}, orjson.dumps(error), streamed=True, status=404
    )
    assert summary.kind is Kind.LLM
    assert summary.model == "gpt-9"
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
        b"{not json",
        b"<html>502 Bad Gateway</html>",
        b"[1, 2]",
        b'{"choices": "nope", "usage": [1], "model": 7}',
        b'{"choices": [{"message": {"content": 5, "tool_calls": [null, {"function": 3}]}}]}',
        b'{"usage": {"prompt_tokens": "12", "completion_tokens": true}}',
    ],
)
def test_garbage_never_raises(body: bytes) -> None:
    for streamed in (False, True):
        summary = CHAT.summarize(REQUEST, body, streamed=streamed, status=200)
        assert summary.kind is Kind.LLM
        assert summary.model in ("gpt-4.1-mini", None)


def test_garbage_stream_chunks_never_raise() -> None:
    body = (
        b"data: {broken\n\n"
        b'data: {"choices": [{"delta": {"tool_calls": [{"index": "x", "function": null}]}}]}\n\n'
        b'data: {"choices": [null, {"delta": null}], "usage": {"prompt_tokens": 3}}\n\n'
        b"data: [DONE]\n\n"
    )
    summary = CHAT.summarize(None, body, streamed=True, status=200)
    assert summary.model is None
    assert summary.usage == Usage(input=3)
    assert summary.tool_calls == (ToolCall("", ""),)


def test_error_response_is_raised_by_the_openai_sdk_without_retries() -> None:
    headers, body = CHAT.error_response(
        409, "no recorded exchange matches", error_type="divergence"
    )
    assert ("content-type", "application/json") in headers
    assert orjson.loads(body) == {
        "error": {
            "message": "no recorded exchange matches",
            "type": "divergence",
            "param": None,
            "code": "divergence",
        }
    }
    calls = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request)
        return httpx2.Response(409, headers=dict(headers), content=body)

    http_client = httpx2.Client(transport=httpx2.MockTransport(handler))
    with (
        openai.OpenAI(api_key="k", base_url="http://fp.test/v1", http_client=http_client) as client,
        pytest.raises(openai.ConflictError, match="no recorded exchange matches") as raised,
    ):
        client.chat.completions.create(
            model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}]
        )
    assert raised.value.code == "divergence"
    assert len(calls) == 1
