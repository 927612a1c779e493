"""Ollama's chat and generate and Cohere's v2 chat read as model calls (issue 27.4: their
steps had no model, tokens or cost, and `fork --model` changed nothing), and the model read
where Azure and Gemini put it, in the path (27.3)."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Fail, Forward, Request, decide
from forkpoint.engine.dialects import dialect_for, summarize_exchange
from forkpoint.engine.lifecycle import is_stream
from forkpoint.engine.session import Session
from forkpoint.models import Chunk, Kind, Mode, Run, Summary, ToolCall, Usage
from tests.builders import exchange

OLLAMA_REQUEST = {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}
OLLAMA_LINES = [
    {"model": "llama3.2", "created_at": "2026-11-02T10:00:00.1Z",
     "message": {"role": "assistant", "content": "Hel"}, "done": False},
    {"model": "llama3.2", "created_at": "2026-11-02T10:00:00.2Z",
     "message": {"role": "assistant", "content": "lo"}, "done": False},
    {"model": "llama3.2", "created_at": "2026-11-02T10:00:00.3Z",
     "message": {"role": "assistant", "content": "", "tool_calls": [
         {"function": {"name": "lookup_order", "arguments": {"order_id": "A1"}}}]},
     "done": False},
    {"model": "llama3.2", "created_at": "2026-11-02T10:00:00.4Z",
     "message": {"role": "assistant", "content": ""}, "done_reason": "stop", "done": True,
     "total_duration": 5, "prompt_eval_count": 26, "eval_count": 9},
]  # fmt: skip
NDJSON = b"".join(orjson.dumps(line) + b"\n" for line in OLLAMA_LINES)


def _ollama(route: str, request: object, body: bytes, *, streamed: bool) -> Summary:
    chunks = [Chunk(float(i), line + b"\n") for i, line in enumerate(body.splitlines())]
    return summarize_exchange(
        exchange(route=route, request_body=orjson.dumps(request), response_body=body,
                 chunks=chunks if streamed else None)
    )  # fmt: skip


def test_an_ollama_chat_stream_of_json_lines_is_a_model_call_with_its_tool_calls() -> None:
    summary = _ollama("/ollama/api/chat", OLLAMA_REQUEST, NDJSON, streamed=True)
    assert (summary.kind, summary.dialect, summary.model) == (Kind.LLM, "ollama_chat", "llama3.2")
    assert (summary.text, summary.finish_reason) == ("Hello", "stop")
    assert summary.usage == Usage(input=26, output=9)
    assert summary.tool_calls == (ToolCall("lookup_order", '{"order_id":"A1"}'),)
    # a whole answer is one such object; one cut mid-line keeps what arrived
    whole = _ollama("/api/chat", OLLAMA_REQUEST, orjson.dumps(OLLAMA_LINES[-1]), streamed=False)
    assert (whole.usage, whole.finish_reason) == (Usage(26, 9), "stop")
    cut = _ollama("/api/chat", OLLAMA_REQUEST, NDJSON[: NDJSON.index(b"lo") + 4], streamed=True)
    assert (cut.text, cut.usage, cut.model) == ("Hel", None, "llama3.2")


def test_ollama_generate_and_its_error_shape() -> None:
    lines = [{"model": "qwen3", "response": "4", "done": False},
             {"model": "qwen3", "response": "2", "done": True, "done_reason": "stop",
              "prompt_eval_count": 3, "eval_count": 2, "context": [1, 2]}]  # fmt: skip
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    summary = _ollama("/api/generate", {"model": "qwen3", "prompt": "6*7?"}, body, streamed=True)
    assert (summary.dialect, summary.text, summary.usage) == ("ollama_generate", "42", Usage(3, 2))
    headers, error = dialect_for("POST", "/api/chat").error_response(400, "no", error_type="x")
    assert ("x-should-retry", "false") in headers
    assert orjson.loads(error) == {"error": "no"}  # what the ollama client raises as ResponseError
    failed = _ollama("/api/chat", OLLAMA_REQUEST, b'{"error":"model not found"}', streamed=False)
    assert (failed.kind, failed.model, failed.usage) == (Kind.LLM, "llama3.2", None)


COHERE_REQUEST = {"model": "command-a-03-2025", "messages": [{"role": "user", "content": "hi"}]}
USAGE = {"billed_units": {"input_tokens": 12, "output_tokens": 7},
         "tokens": {"input_tokens": 480, "output_tokens": 7}, "cached_tokens": 0}  # fmt: skip


def _sse(events: list[dict[str, object]]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in events
    )


def test_a_cohere_answer_and_stream_read_the_same() -> None:
    answer = {
        "id": "c1", "finish_reason": "TOOL_CALL", "usage": USAGE,
        "message": {"role": "assistant", "tool_plan": "I will look it up.", "tool_calls": [
            {"id": "lookup_order_1", "type": "function",
             "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}]},
    }  # fmt: skip
    route = "/cohere/v2/chat"
    whole = summarize_exchange(exchange(
        route=route, request_body=orjson.dumps(COHERE_REQUEST), response_body=orjson.dumps(answer)
    ))  # fmt: skip
    call = {"id": "lookup_order_1", "type": "function",
            "function": {"name": "lookup_order", "arguments": ""}}  # fmt: skip
    events: list[dict[str, object]] = [
        {"type": "message-start", "id": "c1", "delta": {"message": {"role": "assistant"}}},
        {"type": "tool-plan-delta", "delta": {"message": {"tool_plan": "I will look it up."}}},
        {"type": "tool-call-start", "index": 0, "delta": {"message": {"tool_calls": call}}},
        *({"type": "tool-call-delta", "index": 0,
           "delta": {"message": {"tool_calls": {"function": {"arguments": part}}}}}
          for part in ('{"order_id"', ': "A1"}')),
        {"type": "tool-call-end", "index": 0},
        {"type": "message-end", "delta": {"finish_reason": "TOOL_CALL", "usage": USAGE}},
    ]  # fmt: skip
    body = _sse(events)
    streamed = summarize_exchange(exchange(
        route=route, request_body=orjson.dumps(COHERE_REQUEST), response_body=body,
        chunks=[Chunk(1.0, body)],
    ))  # fmt: skip
    for summary in (whole, streamed):
        assert (summary.kind, summary.dialect) == (Kind.LLM, "cohere_chat")
        assert summary.model == "command-a-03-2025"  # the answer names none: the request's
        assert summary.usage == Usage(input=12, output=7)  # billed, not Cohere's own preamble
        assert summary.tool_calls == (
            ToolCall("lookup_order", '{"order_id": "A1"}', "lookup_order_1"),
        )
        assert (summary.finish_reason, summary.text) == ("TOOL_CALL", None)


def test_a_cohere_text_stream_skips_thinking() -> None:
    events: list[dict[str, object]] = [
        {"type": "content-start", "index": 0,
         "delta": {"message": {"content": {"type": "thinking", "thinking": ""}}}},
        {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"thinking": "hm"}}}},
        {"type": "content-start", "index": 1,
         "delta": {"message": {"content": {"type": "text", "text": ""}}}},
        {"type": "content-delta", "index": 1, "delta": {"message": {"content": {"text": "Done"}}}},
    ]  # fmt: skip
    body = _sse(events)
    summary = summarize_exchange(exchange(
        route="/v2/chat", request_body=orjson.dumps(COHERE_REQUEST), response_body=body,
        chunks=[Chunk(1.0, body)],
    ))  # fmt: skip
    assert (summary.text, summary.usage, summary.finish_reason) == ("Done", None, None)
    headers, error = dialect_for("POST", "/v2/chat").error_response(400, "no", error_type="x")
    assert ("content-type", "application/json") in headers
    assert orjson.loads(error)["message"] == "no"


AZURE = "/azure/openai/deployments/support-4o/chat/completions?api-version=2024-10-21"


def _fork(change: Change) -> Session:
    return Session.fork(Run("c", mode=Mode.FORK), [], CONFIG, at=0, change=change)


CONFIG = EngineConfig(routes=Routes("https://api.openai.com", {"azure": "https://res.azure"}))


def test_a_fork_sends_an_azure_request_to_the_new_deployment() -> None:
    session = _fork(Change(model="support-mini"))
    body = orjson.dumps({"model": "support-4o", "messages": []})
    action = decide(session, Request("POST", AZURE, (), body), CONFIG)
    assert isinstance(action, Forward)
    assert action.url == (
        "https://res.azure/openai/deployments/support-mini/chat/completions?api-version=2024-10-21"
    )
    assert action.record.route == AZURE  # recorded as the agent asked
    assert summarize_exchange(action.record).model == "support-mini"
    assert session.applied == {"model"}


def test_the_model_of_a_step_is_read_from_the_path_when_the_answer_names_none() -> None:
    gemini = "/gemini/v1/models/gemini-2.5-flash:generateContent"
    answer = {"candidates": [{"content": {"parts": [{"text": "hi"}]}, "index": 0}]}
    read = summarize_exchange(exchange(route=gemini, request_body=b'{"contents": []}',
                                       response_body=orjson.dumps(answer)))  # fmt: skip
    assert read.model == "gemini-2.5-flash"
    error = summarize_exchange(exchange(route=AZURE, request_body=b'{"messages": []}',
                                        response_body=b'{"error": {"message": "x"}}'))  # fmt: skip
    assert error.model == "support-4o"


@pytest.mark.parametrize(
    ("route", "body", "model_at"),
    [
        ("/ollama/api/chat", OLLAMA_REQUEST, "body"),
        ("/ollama/api/generate", {"model": "llama3.2", "prompt": "x", "system": "old"}, "body"),
        ("/cohere/v2/chat", COHERE_REQUEST, "body"),
    ],
)
def test_a_fork_rewrites_ollama_and_cohere_requests(
    route: str, body: object, model_at: str
) -> None:
    config = EngineConfig(
        routes=Routes(None, {"ollama": "http://box:11434", "cohere": "https://c"})
    )
    session = Session.fork(Run("c", mode=Mode.FORK), [], config, at=0,
                           change=Change(model="new", system_prompt="Be brief."))  # fmt: skip
    action = decide(session, Request("POST", route, (), orjson.dumps(body)), config)
    assert isinstance(action, Forward)
    sent = orjson.loads(action.body)
    assert sent["model"] == "new"
    assert sent.get("system") == "Be brief." or sent["messages"][0] == {
        "role": "system",
        "content": "Be brief.",
    }
    assert session.applied == {"model", "system_prompt"}


def test_a_change_that_touched_no_request_is_known() -> None:
    config = EngineConfig(routes=Routes("https://tools.example"))
    session = Session.fork(Run("c", mode=Mode.FORK), [], config, at=0,
                           change=Change(model="new", patch=({"op": "add", "path": "/x", "value": 1},)))  # fmt: skip
    action = decide(session, Request("POST", "/v1/search", (), b'{"q": 1}'), config)
    assert isinstance(action, Forward) and action.body == b'{"q": 1}'
    assert session.change.rewritten() - session.applied == {"model", "patch"}
    assert action.record.model_sent is None
    bad = decide(session, Request("POST", "/v1/embeddings", (), b"[1]"), config)  # no object
    assert not isinstance(bad, Fail) and session.applied == set()


def test_json_lines_are_kept_as_a_stream_even_with_a_length() -> None:
    """Ollama's NDJSON is a stream: kept chunk by chunk, as SSE is, whatever its framing."""
    assert is_stream((("content-type", "application/x-ndjson"), ("content-length", "90")))
    assert not is_stream((("content-type", "application/json"), ("content-length", "90")))
