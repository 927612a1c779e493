"""Anthropic's message threads in the scripted upstream: held, continued once, refused as the
server refuses them; and what a threaded stream adds up to."""

from __future__ import annotations

from forkpoint.testing.script import Reply, ToolCallSpec, count_usage, parse_prompt
from forkpoint.testing.threads import ThreadError, Threads
from forkpoint.testing.wire import Event
from forkpoint.testing.wire_anthropic import MESSAGES, streamed_message

TOOLS = [{"name": "lookup_order", "input_schema": {"type": "object"}}]
FIRST = {
    "model": "claude-haiku-4-5",
    "system": "be brief",
    "tools": TOOLS,
    "thread": {"type": "create"},
    "messages": [{"role": "user", "content": "where is A1001?"}],
}
REPLY = {
    "id": "msg_1",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}}],
}
RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"}],
}


def continue_from(message_id: str) -> dict:
    thread = {"type": "continue", "previous_message_id": message_id}
    return {"model": "claude-haiku-4-5", "thread": thread, "messages": [RESULT]}


def test_a_continue_reads_the_held_fields_and_history():
    threads = Threads()
    assert threads.resolve(FIRST) is FIRST
    threads.remember(FIRST, REPLY)
    resolved = threads.resolve(continue_from("msg_1"))
    assert isinstance(resolved, dict)
    assert (resolved["system"], resolved["tools"]) == ("be brief", TOOLS)
    assert [m["role"] for m in resolved["messages"]] == ["user", "assistant", "user"]
    prompt = parse_prompt("anthropic_messages", resolved)
    assert prompt.tool_results == ["shipped"] and prompt.messages[-1].tool_name == "lookup_order"


def test_unknown_or_already_continued_replies_are_refused():
    threads = Threads()
    threads.remember(FIRST, REPLY)
    assert threads.resolve(continue_from("msg_0")) == ThreadError(
        404, "thread_not_found", "No thread state was found for previous_message_id 'msg_0'."
    )
    threads.resolve(continue_from("msg_1"))
    refused = threads.resolve(continue_from("msg_1"))
    assert isinstance(refused, ThreadError) and (refused.status, refused.code) == (
        400,
        "thread_already_continued",
    )


def test_an_unthreaded_request_is_not_held():
    threads = Threads()
    threads.remember({**FIRST, "thread": None}, REPLY)
    assert isinstance(threads.resolve(continue_from("msg_1")), ThreadError)


def test_streamed_message_is_the_message_the_events_add_up_to():
    body = {**FIRST, "stream": True}
    prompt = parse_prompt("anthropic_messages", body)
    reply = Reply(text="Looking it up.", tool_calls=(ToolCallSpec("lookup_order", {"id": "A1"}),))
    events: list[Event] = MESSAGES.events(prompt, reply, count_usage(body, reply))
    message = streamed_message(events)
    assert message["id"].startswith("msg_01") and message["model"] == "claude-haiku-4-5"
    text, call = message["content"]
    assert text == {"type": "text", "text": "Looking it up."}
    assert (call["type"], call["name"], call["input"]) == ("tool_use", "lookup_order", {"id": "A1"})
    starts = [data for _, data in events if isinstance(data, dict) and "content_block" in data]
    assert call["id"] == starts[-1]["content_block"]["id"]
