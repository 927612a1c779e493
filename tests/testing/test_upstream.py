"""The scripted upstream against the real `openai` and `anthropic` SDKs.

The server runs on a background thread with its own event loop, so the synchronous SDK
clients can call it from the test thread; async clients run under `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from forkpoint.testing.script import parse_prompt
from forkpoint.testing.upstream import (
    ErrorReply,
    Prompt,
    Reply,
    ScriptedUpstream,
    ToolCallSpec,
)

WEATHER = ToolCallSpec("get_weather", {"city": "Paris", "unit": "celsius"})
CHAT_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
ANTHROPIC_TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}


@dataclass
class Served:
    upstream: ScriptedUpstream
    url: str

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="sk-test", max_retries=0)

    def async_openai(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="sk-test", max_retries=0)

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key="sk-ant-test", max_retries=0)

    def post(self, path: str, data: bytes, **headers: str) -> tuple[int, dict[str, str], bytes]:
        """A raw POST, for what the SDKs never send; returns status, headers and raw body."""
        request = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers), error.read()


@pytest.fixture
def served() -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    upstream = ScriptedUpstream()
    url = asyncio.run_coroutine_threadsafe(upstream.start(), loop).result(5)
    try:
        yield Served(upstream, url)
    finally:
        asyncio.run_coroutine_threadsafe(upstream.close(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def weather_then_answer(prompt: Prompt) -> Reply:
    """Call the tool on the first turn, then answer with what it returned."""
    if not prompt.tool_results:
        return Reply(text="Let me check.", tool_calls=(WEATHER,))
    return Reply(text=f"It is {prompt.tool_results[-1]} in Paris.")


# --- OpenAI Chat Completions ------------------------------------------------------------------


def test_chat_non_stream_tool_call_and_follow_up(served: Served) -> None:
    served.upstream.script = weather_then_answer
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    with served.openai() as client:
        first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=[CHAT_TOOL])
        call = first.choices[0].message.tool_calls[0]
        messages += [first.choices[0].message.model_dump(exclude_none=True)]
        messages += [{"role": "tool", "tool_call_id": call.id, "content": "18C"}]
        second = client.chat.completions.create(model="gpt-4o", messages=messages)

    assert first.id.startswith("chatcmpl-") and first.object == "chat.completion"
    assert first.choices[0].finish_reason == "tool_calls"
    assert first.choices[0].message.content == "Let me check."
    assert call.id.startswith("call_") and call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == (
        WEATHER.name,
        WEATHER.arguments,
    )
    assert first.usage is not None and first.usage.prompt_tokens > 0
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert first.usage.completion_tokens_details.reasoning_tokens == 0
    assert second.choices[0].message.content == "It is 18C in Paris."
    assert second.choices[0].finish_reason == "stop" and second.id != first.id


def test_chat_stream_tool_calls_and_usage(served: Served) -> None:
    served.upstream.script = weather_then_answer

    async def run() -> list[Any]:
        async with served.async_openai() as client:
            stream = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "Weather?"}],
                tools=[CHAT_TOOL],
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(run())
    assert len({c.id for c in chunks}) == 1 and chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert text == "Let me check." and len(deltas) > 2
    assert deltas[0].id.startswith("call_") and deltas[0].function.name == "get_weather"
    assert all(d.id is None and d.index == 0 for d in deltas[1:])
    assert json.loads("".join(d.function.arguments for d in deltas)) == WEATHER.arguments
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_helper_accumulates_final_completion(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(tool_calls=(WEATHER, WEATHER))
    with (
        served.openai() as client,
        client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}], tools=[CHAT_TOOL]
        ) as stream,
    ):
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert final.choices[0].message.content is None and len(calls) == 2
    assert calls[0].id != calls[1].id
    assert [json.loads(c.function.arguments) for c in calls] == [WEATHER.arguments] * 2


# --- OpenAI Responses -------------------------------------------------------------------------


def test_responses_non_stream(served: Served) -> None:
    with served.openai() as client:
        text = client.responses.create(model="gpt-4.1", input="hello", instructions="Be brief.")
        served.upstream.script = lambda prompt: Reply(tool_calls=(WEATHER,), cached_tokens=3)
        call = client.responses.create(model="gpt-4.1", input="weather?", tools=[RESPONSES_TOOL])

    assert text.id.startswith("resp_") and text.object == "response" and text.status == "completed"
    assert text.output_text == "[gpt-4.1] hello" and text.instructions == "Be brief."
    assert text.output[0].type == "message" and text.output[0].id.startswith("msg_")
    item = call.output[0]
    assert item.type == "function_call" and item.id.startswith("fc_")
    assert item.call_id.startswith("call_") and item.name == "get_weather"
    assert json.loads(item.arguments) == WEATHER.arguments and item.status == "completed"
    assert call.usage is not None and call.usage.input_tokens_details.cached_tokens == 3
    assert call.usage.total_tokens == call.usage.input_tokens + call.usage.output_tokens


def test_responses_stream_event_sequence(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(text="two words", tool_calls=(WEATHER,))
    with served.openai() as client:
        events = list(client.responses.create(model="gpt-4.1", input="x", stream=True))

    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") == 2
    assert kinds.index("response.output_text.done") < kinds.index("response.content_part.done")
    assert kinds.count("response.output_item.done") == 2
    assert "response.function_call_arguments.delta" in kinds
    assert kinds[-3:] == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    created, completed = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.usage is None
    assert completed.id == created.id and completed.status == "completed"
    assert completed.usage is not None and completed.usage.output_tokens > 0
    assert completed.output_text == "two words"


def test_responses_stream_helper_final_response(served: Served) -> None:
    served.upstream.script = weather_then_answer

    async def run() -> Any:
        async with (
            served.async_openai() as client,
            client.responses.stream(model="gpt-4.1", input="x", tools=[RESPONSES_TOOL]) as stream,
        ):
            return await stream.get_final_response()

    final = asyncio.run(run())
    assert final.output_text == "Let me check."
    assert [item.type for item in final.output] == ["message", "function_call"]


# --- Anthropic Messages -----------------------------------------------------------------------


def test_anthropic_create_tool_use_and_follow_up(served: Served) -> None:
    served.upstream.script = weather_then_answer
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    with served.anthropic() as client:
        first = client.messages.create(
            model="claude-test", max_tokens=100, messages=messages, tools=[ANTHROPIC_TOOL]
        )
        tool_use = first.content[1]
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]}]
        result = {"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C"}
        messages += [{"role": "user", "content": [result]}]
        second = client.messages.create(model="claude-test", max_tokens=100, messages=messages)

    assert first.id.startswith("msg_") and first.type == "message"
    assert first.stop_reason == "tool_use" and first.stop_sequence is None
    assert first.content[0].type == "text" and first.content[0].text == "Let me check."
    assert tool_use.type == "tool_use" and tool_use.id.startswith("toolu_")
    assert (tool_use.name, tool_use.input) == (WEATHER.name, WEATHER.arguments)
    assert first.usage.input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    assert second.content[0].text == "It is 18C in Paris." and second.stop_reason == "end_turn"


def test_anthropic_stream_tool_use_final_message(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(text="Checking now.", tool_calls=(WEATHER,))
    with (
        served.anthropic() as client,
        client.messages.stream(
            model="claude-test-small", max_tokens=100, messages=[{"role": "user", "content": "x"}]
        ) as stream,
    ):
        kinds = [event.type for event in stream]
        final = stream.get_final_message()

    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert final.model == "claude-test-small" and final.stop_reason == "tool_use"
    assert final.content[0].text == "Checking now."
    assert final.content[1].input == WEATHER.arguments
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 1


def test_anthropic_raw_stream_has_ping_and_deltas(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(tool_calls=(WEATHER,))
    body = {
        "model": "c",
        "max_tokens": 9,
        "stream": True,
        "messages": [{"role": "user", "content": "x"}],
    }
    status, headers, raw = served.post("/v1/messages", json.dumps(body).encode())
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    names = [
        line[len("event: ") :] for line in raw.decode().splitlines() if line.startswith("event:")
    ]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert "content_block_stop" in names and names[-2:] == ["message_delta", "message_stop"]
    assert b'"type":"input_json_delta","partial_json":""' in raw


# --- errors -----------------------------------------------------------------------------------


def test_error_reply_raises_rate_limit_in_both_sdks(served: Served) -> None:
    served.upstream.script = lambda prompt: ErrorReply(429, "Slow down.")
    with served.openai() as client, pytest.raises(openai.RateLimitError, match="Slow down"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with served.anthropic() as client, pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "Slow down."},
    }


def test_error_reply_on_stream_is_a_plain_error_response(served: Served) -> None:
    served.upstream.script = lambda prompt: ErrorReply(500, "boom", type="server_error")
    with served.openai() as client, pytest.raises(openai.InternalServerError, match="boom"):
        client.responses.create(model="gpt-4.1", input="x", stream=True)


@pytest.mark.parametrize(
    ("path", "error_of"),
    [
        ("/v1/chat/completions", lambda body: body["error"]["type"]),
        ("/responses", lambda body: body["error"]["type"]),
        ("/v1/messages", lambda body: body["type"] + "/" + body["error"]["type"]),
    ],
)
def test_invalid_json_is_a_400_in_the_dialects_shape(served: Served, path: str, error_of) -> None:
    status, headers, raw = served.post(path, b'{"model": ', **{"Content-Type": "application/json"})
    assert status == 400 and headers["Content-Type"] == "application/json"
    assert error_of(json.loads(raw)) in ("invalid_request_error", "error/invalid_request_error")
    assert served.upstream.request_count == 1 and served.upstream.requests[0].json is None


@pytest.mark.parametrize(
    ("path", "ending_of"),
    [
        ("/v1/chat/completions", lambda body: body["choices"][0]["finish_reason"]),
        ("/v1/responses", lambda body: body["incomplete_details"]["reason"]),
        ("/v1/messages", lambda body: body["stop_reason"]),
    ],
)
def test_length_and_cached_tokens_in_each_dialect(served: Served, path: str, ending_of) -> None:
    served.upstream.script = lambda prompt: Reply(
        text="cut short", finish_reason="length", cached_tokens=2
    )
    body = {
        "model": "m",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "x"}],
        "input": "x",
    }
    status, _, raw = served.post(path, json.dumps(body).encode())
    answer = json.loads(raw)
    assert status == 200
    assert ending_of(answer) in ("length", "max_output_tokens", "max_tokens")
    usage = answer["usage"]
    if "cache_read_input_tokens" in usage:  # Anthropic counts the cached part apart
        assert usage["cache_read_input_tokens"] == 2
    else:
        details = usage.get("prompt_tokens_details") or usage["input_tokens_details"]
        assert details["cached_tokens"] == 2


# --- script, ids, counters, transport ---------------------------------------------------------


def test_echo_script_reflects_the_model_and_ids_vary(served: Served) -> None:
    with served.openai() as client:
        answers = [
            client.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}])
            for m in ("gpt-4o", "gpt-4o-mini")
        ]
    assert [a.choices[0].message.content for a in answers] == ["[gpt-4o] hi", "[gpt-4o-mini] hi"]
    assert answers[0].id != answers[1].id


def test_requests_are_recorded_counted_and_reset(served: Served) -> None:
    with served.openai() as client:
        client.models.list()
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    upstream = served.upstream
    assert upstream.request_count == 2
    first, second = upstream.requests
    assert (first.method, first.path) == ("GET", "/v1/models")
    assert second.path == "/v1/chat/completions" and second.json["model"] == "m"
    assert (
        json.loads(second.body) == second.json
        and second.headers["Authorization"] == "Bearer sk-test"
    )
    upstream.reset()
    assert upstream.request_count == 0


def test_models_list(served: Served) -> None:
    with served.openai() as client:
        models = client.models.list()
    assert "gpt-4o-mini" in [m.id for m in models.data]


def test_compress_gzips_json_for_clients_that_accept_it(served: Served) -> None:
    served.upstream.compress = True
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "zip"}]}).encode()
    status, headers, raw = served.post("/v1/chat/completions", body, **{"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert json.loads(gzip.decompress(raw))["choices"][0]["message"]["content"] == "[m] zip"
    with served.openai() as client:  # the SDK decodes it transparently
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a"}]
        )
    assert reply.choices[0].message.content == "[m] a"


def test_each_sse_event_is_its_own_http_chunk(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(text="one two three")
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}

    async def chunks() -> list[bytes]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(served.url + "/v1/chat/completions", json=body) as response,
        ):
            parts, current = [], b""
            async for data, end_of_chunk in response.content.iter_chunks():
                current += data
                if end_of_chunk and current:  # the empty last-chunk marker ends the body
                    parts.append(current)
                    current = b""
            return parts

    parts = asyncio.run(chunks())
    assert len(parts) == 6  # role, three words, finish, [DONE]
    assert all(p.startswith(b"data: ") and p.endswith(b"\n\n") for p in parts)
    assert parts[-1] == b"data: [DONE]\n\n"


def test_cut_after_drops_the_connection_mid_stream(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(text="a b c d e f", cut_after=3)
    received = []
    with served.openai() as client, pytest.raises(openai.APIConnectionError):
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        received.extend(chunk.choices[0].delta.content for chunk in stream)
    assert received == ["", "a ", "b "]  # the role chunk and two words, then the drop


def test_client_hanging_up_mid_stream_is_quiet(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    served.upstream.script = lambda prompt: Reply(text="a b c d e f")
    served.upstream.chunk_delay = 0.02
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}

    async def read_one_then_hang_up() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.post(served.url + "/v1/chat/completions", json=body) as response:
                await response.content.readany()
            # the server writes on into the closed connection until its stream is done
            for _ in range(500):
                if served.upstream.finished:
                    break
                await asyncio.sleep(0.01)
            assert served.upstream.finished == 1

    with caplog.at_level(logging.WARNING):
        asyncio.run(read_one_then_hang_up())
    assert not caplog.records


def test_stall_lets_a_client_time_out(served: Served) -> None:
    served.upstream.script = lambda prompt: Reply(text="late", stall_s=0.5)
    client = openai.OpenAI(
        base_url=served.url + "/v1", api_key="sk-test", max_retries=0, timeout=0.1
    )
    with client, pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


# --- prompt normalization ---------------------------------------------------------------------


def test_prompt_from_each_dialect_sees_the_same_conversation() -> None:
    chat = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        "tools": [CHAT_TOOL],
    }
    responses = {
        "model": "m",
        "instructions": "sys",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": ""}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        ],
        "tools": [RESPONSES_TOOL],
    }
    messages = {
        "model": "m",
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "18C"}],
            },
        ],
        "tools": [ANTHROPIC_TOOL],
    }
    for dialect, body in [
        ("openai_chat", chat),
        ("openai_responses", responses),
        ("anthropic_messages", messages),
    ]:
        prompt = parse_prompt(dialect, body)
        assert (prompt.system, prompt.tools, prompt.stream) == ("sys", ("get_weather",), False)
        assert [m.role for m in prompt.messages] == ["user", "assistant", "tool"], dialect
        assert prompt.messages[1].tool_calls == (ToolCallSpec("get_weather", {"city": "Paris"}),)
        assert prompt.messages[2].tool_name == "get_weather"
        assert prompt.last_user_text == "weather?" and prompt.tool_results == ["18C"]
        assert prompt.turn == 1
