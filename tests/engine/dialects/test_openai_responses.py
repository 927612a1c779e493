"""Responses API bodies shaped like api.openai.com's (see openai.types.responses)."""

import json
from typing import Any

import orjson
import pytest

from forkpoint.engine.dialects.openai_responses import OpenAIResponses
from forkpoint.models import Kind, ToolCall, Usage

RESPONSES = OpenAIResponses()
MODEL = "gpt-5-mini-2025-08-07"
REQUEST = {"model": "gpt-5-mini", "input": "Weather in Paris?", "stream": True, "tools": []}
USAGE = {
    "input_tokens": 2210,
    "input_tokens_details": {"cached_tokens": 2048},
    "output_tokens": 342,
    "output_tokens_details": {"reasoning_tokens": 256},
    "total_tokens": 2552,
}
REASONING = {"id": "rs_68b1c0ffee", "type": "reasoning", "summary": []}
CALL_PARIS = {
    "id": "fc_68b1c0ffee01",
    "type": "function_call",
    "status": "completed",
    "arguments": '{"city":"Paris"}',
    "call_id": "call_9kXyPaRis",
    "name": "get_weather",
}
CALL_LYON = {**CALL_PARIS, "id": "fc_68b1c0ffee02", "call_id": "call_2LyOn", "arguments": "{}"}
MESSAGE = {
    "id": "msg_68b1c0ffee03",
    "type": "message",
    "status": "completed",
    "content": [
        {"type": "output_text", "annotations": [], "logprobs": [], "text": "Sunny, 24°C."},
    ],
    "role": "assistant",
}


def response(status: str, output: list[Any], usage: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_68b1c0ffee",
        "object": "response",
        "created_at": 1756812345,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": "medium", "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
        **extra,
    }


Event = tuple[str, dict[str, Any]]


def sse(*events: Event) -> bytes:
    """The wire form: a named event whose data repeats the name as `type`, numbered in order."""
    out = []
    for number, (kind, fields) in enumerate(events):
        data = json.dumps({"type": kind, "sequence_number": number, **fields})
        out.append(f"event: {kind}\ndata: {data}\n\n".encode())
    return b"".join(out)


def in_progress(item: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**item, "status": "in_progress", **changes}


def arguments(index: int, item_id: str, *deltas: str) -> list[Event]:
    fields = {"item_id": item_id, "output_index": index}
    events = [("response.function_call_arguments.delta", {**fields, "delta": d}) for d in deltas]
    done = {**fields, "arguments": "".join(deltas)}
    return [*events, ("response.function_call_arguments.done", done)]


HEAD: list[Event] = [
    ("response.created", {"response": response("in_progress", [])}),
    ("response.in_progress", {"response": response("in_progress", [])}),
    ("response.output_item.added", {"output_index": 0, "item": REASONING}),
    ("response.output_item.done", {"output_index": 0, "item": REASONING}),
]
TOOL_EVENTS: list[Event] = [
    *HEAD,
    (
        "response.output_item.added",
        {"output_index": 1, "item": in_progress(CALL_PARIS, arguments="")},
    ),
    *arguments(1, CALL_PARIS["id"], '{"', "city", '":"', "Par", 'is"}'),
    ("response.output_item.done", {"output_index": 1, "item": CALL_PARIS}),
    (
        "response.output_item.added",
        {"output_index": 2, "item": in_progress(CALL_LYON, arguments="")},
    ),
    *arguments(2, CALL_LYON["id"], "{", "}"),
    ("response.output_item.done", {"output_index": 2, "item": CALL_LYON}),
    (
        "response.completed",
        {"response": response("completed", [REASONING, CALL_PARIS, CALL_LYON], USAGE)},
    ),
]
TEXT_FIELDS = {"item_id": MESSAGE["id"], "output_index": 1, "content_index": 0}
PART = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
TEXT_EVENTS: list[Event] = [
    *HEAD,
    ("response.output_item.added", {"output_index": 1, "item": in_progress(MESSAGE, content=[])}),
    ("response.content_part.added", {**TEXT_FIELDS, "part": PART}),
    *[
        ("response.output_text.delta", {**TEXT_FIELDS, "delta": d, "logprobs": []})
        for d in ["Sunny", ", ", "24", "°C."]
    ],
    ("response.output_text.done", {**TEXT_FIELDS, "text": "Sunny, 24°C.", "logprobs": []}),
    ("response.content_part.done", {**TEXT_FIELDS, "part": {**PART, "text": "Sunny, 24°C."}}),
    ("response.output_item.done", {"output_index": 1, "item": MESSAGE}),
    ("response.completed", {"response": response("completed", [REASONING, MESSAGE], USAGE)}),
]
PARIS, LYON = (
    ToolCall("get_weather", '{"city":"Paris"}', "call_9kXyPaRis"),
    ToolCall("get_weather", "{}", "call_2LyOn"),
)


def test_claims() -> None:
    assert RESPONSES.claims("POST", "/v1/responses")
    assert RESPONSES.claims("POST", "/openai/v1/responses")
    assert not RESPONSES.claims("GET", "/v1/responses/resp_123")
    assert not RESPONSES.claims("POST", "/v1/responses/resp_123/cancel")
    assert not RESPONSES.claims("POST", "/v1/chat/completions")


def test_stream_with_tool_calls() -> None:
    summary = RESPONSES.summarize(REQUEST, sse(*TOOL_EVENTS), streamed=True, status=200)
    assert summary.kind is Kind.LLM
    assert summary.dialect == "openai_responses"
    assert summary.model == MODEL
    assert summary.tool_calls == (PARIS, LYON)
    assert summary.finish_reason == "tool_calls"
    assert summary.text is None
    assert summary.usage == Usage(input=2210, output=342, cached=2048, reasoning=256)


def test_stream_cut_before_completed_reassembles_calls_from_deltas() -> None:
    cut = [
        e for e in TOOL_EVENTS if e[0] not in ("response.completed", "response.output_item.done")
    ]
    summary = RESPONSES.summarize(REQUEST, sse(*cut), streamed=True, status=200)
    assert summary.tool_calls == (PARIS, LYON)
    assert summary.usage is None
    assert summary.model == MODEL


def test_stream_cut_mid_arguments() -> None:
    # The connection broke after the "Par" fragment of the first call.
    cut = TOOL_EVENTS[: TOOL_EVENTS.index(HEAD[-1]) + 6]
    assert cut[-1][1]["delta"] == "Par"
    summary = RESPONSES.summarize(REQUEST, sse(*cut), streamed=True, status=200)
    assert summary.tool_calls == (ToolCall("get_weather", '{"city":"Par', "call_9kXyPaRis"),)
    assert summary.finish_reason == "tool_calls"


def test_stream_text() -> None:
    summary = RESPONSES.summarize(REQUEST, sse(*TEXT_EVENTS), streamed=True, status=200)
    assert summary.text == "Sunny, 24°C."
    assert summary.finish_reason == "completed"
    assert summary.tool_calls == ()
    assert summary.usage == Usage(2210, 342, 2048, 256)


def test_cut_text_stream_keeps_partial_text() -> None:
    body = sse(*TEXT_EVENTS)
    cut = body[: body.index(b'"24"')]
    summary = RESPONSES.summarize(REQUEST, cut, streamed=True, status=200)
    assert summary.text == "Sunny, "
    assert summary.finish_reason is None
    assert summary.usage is None


def test_incomplete_and_failed_streams() -> None:
    truncated = {**MESSAGE, "status": "incomplete"}
    incomplete = response(
        "incomplete",
        [REASONING, truncated],
        USAGE,
        incomplete_details={"reason": "max_output_tokens"},
    )
    events = [*TEXT_EVENTS[:-1], ("response.incomplete", {"response": incomplete})]
    summary = RESPONSES.summarize(REQUEST, sse(*events), streamed=True, status=200)
    assert (summary.finish_reason, summary.text) == ("incomplete", "Sunny, 24°C.")
    assert summary.usage == Usage(2210, 342, 2048, 256)

    error = {"code": "server_error", "message": "The server had an error."}
    failed = response("failed", [], None, error=error)
    events = [*TEXT_EVENTS[:-1], ("response.failed", {"response": failed})]
    summary = RESPONSES.summarize(REQUEST, sse(*events), streamed=True, status=200)
    assert (summary.finish_reason, summary.text, summary.usage) == ("failed", "Sunny, 24°C.", None)


def test_custom_tool_call_stream() -> None:
    item = {
        "id": "ctc_68b1",
        "type": "custom_tool_call",
        "status": "in_progress",
        "call_id": "call_sQl",
        "input": "",
        "name": "run_sql",
    }
    fields: dict[str, Any] = {"item_id": "ctc_68b1", "output_index": 0}
    events: list[Event] = [
        ("response.created", {"response": response("in_progress", [])}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.custom_tool_call_input.delta", {**fields, "delta": "SELECT "}),
        ("response.custom_tool_call_input.delta", {**fields, "delta": "1"}),
    ]
    summary = RESPONSES.summarize(REQUEST, sse(*events), streamed=True, status=200)
    assert summary.tool_calls == (ToolCall("run_sql", "SELECT 1", "call_sQl"),)
    done = ("response.custom_tool_call_input.done", {**fields, "input": "SELECT 2"})
    summary = RESPONSES.summarize(REQUEST, sse(*events, done), streamed=True, status=200)
    assert summary.tool_calls == (ToolCall("run_sql", "SELECT 2", "call_sQl"),)


def test_non_stream_response() -> None:
    body = orjson.dumps(response("completed", [REASONING, MESSAGE, CALL_PARIS], USAGE))
    summary = RESPONSES.summarize(REQUEST, body, streamed=False, status=200)
    assert summary.model == MODEL
    assert summary.text == "Sunny, 24°C."
    assert summary.tool_calls == (PARIS,)
    assert summary.finish_reason == "tool_calls"
    assert summary.usage == Usage(2210, 342, 2048, 256)


def test_non_stream_text_only() -> None:
    body = orjson.dumps(response("completed", [MESSAGE], USAGE))
    summary = RESPONSES.summarize(REQUEST, body, streamed=False, status=200)
    assert (summary.text, summary.finish_reason) == ("Sunny, 24°C.", "completed")


def test_error_body() -> None:
    error = {
        "error": {
            "message": "Incorrect API key provided: sk-abc.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    summary = RESPONSES.summarize(REQUEST, orjson.dumps(error), streamed=True, status=401)
    assert summary.model == "gpt-5-mini"
    assert (summary.usage, summary.text, summary.finish_reason) == (None, None, None)


def test_mid_stream_error_event() -> None:
    error = ("error", {"code": "server_error", "message": "boom", "param": None})
    summary = RESPONSES.summarize(REQUEST, sse(*TEXT_EVENTS[:9], error), streamed=True, status=200)
    assert summary.text == "Sunny, 24"
    assert summary.finish_reason is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{oops",
        b'{"output": {"a": 1}, "usage": "many", "status": 3}',
        b'{"output": [null, 1, {"type": "message", "content": [null, {"type": "output_text"}]}]}',
        b'{"output": [{"type": "function_call", "name": 1, "arguments": null}]}',
        b'data: {"type": "response.output_text.delta", "output_index": 0, "delta": 5}\n\n',
        b'data: {"type": "response.function_call_arguments.delta", "output_index": 0}\n\n',
        b'data: {"type": "response.completed", "response": {"output": "x", "usage": {}}}\n\n',
    ],
)
def test_garbage_never_raises(body: bytes) -> None:
    for streamed in (False, True):
        summary = RESPONSES.summarize(REQUEST, body, streamed=streamed, status=200)
        assert summary.kind is Kind.LLM


def test_error_response_has_openai_shape() -> None:
    headers, body = RESPONSES.error_response(502, "upstream unreachable", error_type="upstream")
    assert ("content-type", "application/json") in headers
    assert orjson.loads(body)["error"]["message"] == "upstream unreachable"
