"""MCP in the engine with plain data: what a tool step reads as, what matching sets aside, how a
served answer takes the client's ids, and how forks mock a tool by its name."""

from __future__ import annotations

from pathlib import Path

import orjson

from forkpoint.api.mocks import mock, parse_mock
from forkpoint.engine import matching, mcp
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.decide import Fail, Forward, Request, Serve, decide
from forkpoint.engine.dialects import jsonrpc, summarize_exchange
from forkpoint.engine.mocks import MockResponse
from forkpoint.engine.session import Session
from forkpoint.models import Chunk, Exchange, Kind, Mode, Origin, Run, ToolCall

CONFIG = EngineConfig(routes=Routes("https://tools.example.com"))
JSON = (("content-type", "application/json"),)


def call(message_id: object, tool: str, **arguments: object) -> bytes:
    params = {"name": tool, "arguments": arguments, "_meta": {"progressToken": message_id}}
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": params}
    )


def result(message_id: object, text: str, **extra: object) -> bytes:
    answer = {"content": [{"type": "text", "text": text}], "isError": False, **extra}
    return orjson.dumps({"jsonrpc": "2.0", "id": message_id, "result": answer})


def exchange(
    request: bytes, response: bytes, *, step: int = 0, route: str = "/mcp", streamed: bool = False
) -> Exchange:
    chunks = [Chunk(5.0, response)] if streamed else None
    content_type = "text/event-stream" if streamed else "application/json"
    return Exchange(
        run_id="rec", step=step, method="POST", route=route, request_headers=JSON,
        request_body=request, fingerprint="", status=200,
        response_headers=(("content-type", content_type), ("content-length", str(len(response)))),
        response_body=response, chunks=chunks,
    )  # fmt: skip


def test_a_tools_call_is_a_tool_step_with_its_name_arguments_and_result():
    summary = summarize_exchange(
        exchange(call(1, "refund_policy", order_id="A1"), result(1, "30 days"))
    )
    assert summary.kind is Kind.TOOL and summary.dialect == "mcp"
    assert summary.tool_calls == (ToolCall("refund_policy", '{"order_id":"A1"}'),)
    assert summary.text == "30 days" and summary.finish_reason is None


def test_a_streamed_answer_is_read_past_its_notifications_and_errors_say_so():
    progress = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
    failed = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"unknown tool"}}'
    body = jsonrpc.event(progress) + jsonrpc.event(failed)
    summary = summarize_exchange(exchange(call(1, "nope"), body, streamed=True))
    assert (summary.text, summary.finish_reason) == ("unknown tool", "error")
    tool_error = summarize_exchange(exchange(call(1, "t"), result(1, "boom", isError=True)))
    assert tool_error.finish_reason == "error"
    asked = summarize_exchange(
        exchange(call(1, "t"), result(1, "", resultType="input_required", requestState="s"))
    )
    assert asked.finish_reason == "input_required"


def test_other_messages_are_mcp_steps_that_are_not_tools_wherever_the_endpoint_is():
    listing = b'{"jsonrpc":"2.0","id":0,"method":"tools/list","params":{}}'
    summary = summarize_exchange(
        exchange(listing, b'{"jsonrpc":"2.0","id":0,"result":{"tools":[]}}', route="/anywhere")
    )
    assert (summary.kind, summary.dialect) == (Kind.OTHER, "mcp")


def test_ids_progress_tokens_and_trace_context_do_not_change_the_fingerprint():
    def fingerprint(body: bytes) -> str:
        return matching.fingerprint("POST", "/mcp", body, JSON)

    traced = orjson.loads(call(9, "t", x=1))
    traced["params"]["_meta"]["traceparent"] = "00-abc-def-01"
    assert (
        fingerprint(call(1, "t", x=1))
        == fingerprint(call("req-7", "t", x=1))
        == fingerprint(orjson.dumps(traced))
    )
    assert fingerprint(call(1, "t", x=1)) != fingerprint(call(1, "t", x=2))
    cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}'
    assert fingerprint(cancel % 3) == fingerprint(cancel % 4)


def test_the_similar_tier_sets_aside_meta_and_request_state():
    def similar(state: str, client: str) -> str:
        params = {"name": "t", "arguments": {}, "requestState": state,
                  "_meta": {"io.modelcontextprotocol/clientInfo": {"name": client}}}  # fmt: skip
        value = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        return matching.similar_fingerprint("POST", "/mcp", value)

    assert similar("opaque-1", "a") == similar("opaque-2", "b")


def replay(*source: Exchange, change: Change | None = None, at: int | None = None) -> Session:
    run = Run("new", mode=Mode.REPLAY, parent_id="rec")
    if at is None:
        return Session.replay(run, list(source), CONFIG)
    return Session.fork(run, list(source), CONFIG, at=at, change=change or Change())


def test_a_served_answer_takes_the_id_the_client_sent_and_its_length_fits():
    recorded = exchange(call(4, "t"), result(4, "done"))
    action = decide(replay(recorded), Request("POST", "/mcp", JSON, call(11, "t")), CONFIG)
    assert isinstance(action, Serve)
    served = action.recorded
    assert orjson.loads(served.response_body)["id"] == 11
    assert dict(served.response_headers)["content-length"] == str(len(served.response_body))
    assert orjson.loads(recorded.response_body)["id"] == 4  # the recording is as it was


def test_a_streamed_answer_renames_its_progress_notifications_too():
    progress = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":4,"progress":1}}'
    recorded = exchange(
        call(4, "t"), jsonrpc.event(progress) + jsonrpc.event(result(4, "ok")), streamed=True
    )
    action = decide(replay(recorded), Request("POST", "/mcp", JSON, call(12, "t")), CONFIG)
    assert isinstance(action, Serve)
    said = [orjson.loads(m) for m in jsonrpc.Events().feed(action.recorded.response_body)]
    assert said[0]["params"]["progressToken"] == 12 and said[1]["id"] == 12


def test_a_divergence_answers_a_json_rpc_error_to_the_request_and_names_the_tool():
    recorded = exchange(call(4, "refund_policy", order_id="A1"), result(4, "ok"))
    action = decide(
        replay(recorded),
        Request("POST", "/mcp", JSON, call(5, "refund_policy", order_id="B2")),
        CONFIG,
    )
    assert isinstance(action, Fail)
    error = orjson.loads(action.body)
    assert error["id"] == 5 and error["error"]["code"] == jsonrpc.INTERNAL_ERROR
    message = error["error"]["message"]
    assert "MCP tool call refund_policy" in message
    assert '$.params.arguments.order_id: "A1" → "B2"' in message


def test_a_fork_mocks_a_tool_by_its_name_in_a_tool_results_shape(tmp_path: Path):
    (tmp_path / "policy.json").write_text('"no refunds"')
    rule = parse_mock("mcp:refund_*=@policy.json", base_dir=tmp_path)
    other = exchange(call(1, "add", a=1), result(1, "2"))
    session = replay(other, change=Change(mocks=(rule,)), at=0)
    mocked = decide(
        session, Request("POST", "/mcp", JSON, call(7, "refund_policy", order_id="A1")), CONFIG
    )
    assert isinstance(mocked, Serve) and mocked.record.origin is Origin.MOCKED
    answer = orjson.loads(mocked.recorded.response_body)
    assert answer["id"] == 7
    assert answer["result"]["content"] == [{"type": "text", "text": "no refunds"}]
    assert answer["result"]["structuredContent"] == {"result": "no refunds"}
    live = decide(session, Request("POST", "/mcp", JSON, call(8, "add", a=1)), CONFIG)
    assert isinstance(live, Forward)  # another tool is not mocked


def test_a_mock_request_reads_the_tool_and_its_arguments_and_any_shape_becomes_a_result():
    rule = mock("mcp:lookup", lambda request: {"found": request.arguments["id"]})
    assert rule.tool == "lookup" and rule.matches("POST", "/mcp", None, tool="lookup")
    assert not rule.matches("POST", "/mcp", None, tool="other")
    assert not rule.matches("POST", "/mcp", None)
    shaped = mcp.tool_answer(
        rule_answer := MockResponse(200, JSON, b'{"found": 3}'), call(2, "lookup")
    )
    assert rule_answer.status == 200
    assert orjson.loads(shaped.body)["result"]["structuredContent"] == {"found": 3}
    whole = {"content": [{"type": "text", "text": "x"}], "isError": True}
    as_is = mcp.tool_answer(MockResponse(200, JSON, orjson.dumps(whole)), call(2, "lookup"))
    assert orjson.loads(as_is.body)["result"] == whole


def test_an_mcp_sessions_stream_the_recording_lacks_is_answered_405_not_a_divergence():
    recorded = exchange(call(1, "t"), result(1, "ok"))
    stream = Request(
        "GET", "/mcp", (("accept", "text/event-stream"), ("mcp-session-id", "s1")), b""
    )
    action = decide(replay(recorded), stream, CONFIG)
    assert isinstance(action, Serve) and action.recorded.status == 405
    assert action.record.origin is Origin.MOCKED and "MCP session" in (action.record.note or "")


def test_a_forks_live_request_on_a_recorded_session_opens_a_live_one_first():
    init = (
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}'
    )
    opener = exchange(init, b'{"jsonrpc":"2.0","id":0,"result":{}}')
    opener.response_headers += (("mcp-session-id", "rec-1"),)
    initialized = exchange(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', b"", step=1)
    initialized.request_headers += (("mcp-session-id", "rec-1"),)
    later = exchange(call(2, "t"), result(2, "ok"), step=2)
    session = replay(opener, initialized, later, at=2)
    assert isinstance(decide(session, Request("POST", "/mcp", JSON, init), CONFIG), Serve)
    on_session = (*JSON, ("mcp-session-id", "rec-1"), ("authorization", "Bearer live"))
    action = decide(session, Request("POST", "/mcp", on_session, call(9, "t")), CONFIG)
    assert isinstance(action, Forward) and action.handshake is not None
    handshake = action.handshake
    assert handshake.initialize == init and handshake.initialized == initialized.request_body
    assert ("authorization", "Bearer live") in handshake.headers  # its own, not the recording's
    assert "mcp-session-id" not in dict(handshake.headers)
    forward = handshake.opened("live-7", action.headers)
    assert dict(forward)["mcp-session-id"] == "live-7"
    again = decide(session, Request("POST", "/mcp", on_session, call(10, "t")), CONFIG)
    assert isinstance(again, Forward) and again.handshake is None
    assert dict(again.headers)["mcp-session-id"] == "live-7"


def test_ending_a_recorded_session_the_live_server_never_had_is_answered_here():
    init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}'
    opener = exchange(init, b'{"jsonrpc":"2.0","id":0,"result":{}}')
    opener.response_headers += (("mcp-session-id", "rec-1"),)
    session = replay(opener, exchange(call(1, "t"), result(1, "ok"), step=1), at=1)
    decide(session, Request("POST", "/mcp", JSON, init), CONFIG)
    ended = decide(session, Request("DELETE", "/mcp", (("mcp-session-id", "rec-1"),), b""), CONFIG)
    assert isinstance(ended, Serve) and ended.recorded.status == 200
    assert ended.record.origin is Origin.MOCKED
