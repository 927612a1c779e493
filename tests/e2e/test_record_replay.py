"""Record with real SDK clients through the gateway, then replay with the upstream stopped.

Every scenario returns what the client saw; replay must return exactly the same, with the
scripted upstream gone (so any network call would fail) and its request counter unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from forkpoint.models import Origin, RunStatus
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream, ToolCallSpec

Scenario = Callable[[str], Any]  # proxy URL -> what the client saw


def tool_then_answer(prompt: Prompt) -> Reply:
    """Call lookup_order first, then answer from its result."""
    if not prompt.tool_results:
        return Reply(tool_calls=(ToolCallSpec("lookup_order", {"order_id": "A1001"}),))
    return Reply(text=f"[{prompt.model}] Order status: {prompt.tool_results[-1]}")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "lookup_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "lookup_order",
        "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }
]


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test-secret", max_retries=0)


def chat_agent(url: str, *, stream: bool) -> list[Any]:
    seen: list[Any] = []
    with openai_client(url) as client:
        messages: list[Any] = [{"role": "user", "content": "Where is order A1001?"}]
        for _ in range(2):
            if stream:
                chunks = list(
                    client.chat.completions.create(
                        model="gpt-4o",
                        messages=messages,
                        tools=TOOLS,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                )
                seen.append([c.model_dump() for c in chunks])
                calls = [
                    tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []
                ]
                if not calls:
                    break
                call_id, name = calls[0].id, calls[0].function.name
                arguments = "".join(tc.function.arguments or "" for tc in calls)
            else:
                completion = client.chat.completions.create(
                    model="gpt-4o", messages=messages, tools=TOOLS
                )
                seen.append(completion.model_dump())
                message = completion.choices[0].message
                if not message.tool_calls:
                    break
                call_id, name = message.tool_calls[0].id, message.tool_calls[0].function.name
                arguments = message.tool_calls[0].function.arguments
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": arguments},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": "shipped"})
    return seen


def async_chat(url: str) -> list[Any]:
    async def main() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client:
            questions = [f"question {i}" for i in range(4)]
            # concurrent requests: replay must hand each its own recorded answer
            done = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": q}]
                    )
                    for q in questions
                )
            )
            stream = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": "stream"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [c.model_dump() async for c in stream]
            return [c.model_dump() for c in done] + [chunks]

    return asyncio.run(main())


def responses_agent(url: str) -> list[Any]:
    with openai_client(url) as client:
        first = client.responses.create(
            model="gpt-4.1", input="Where is order A1001?", tools=RESPONSES_TOOLS
        )
        call = next(item for item in first.output if item.type == "function_call")
        events = list(
            client.responses.create(
                model="gpt-4.1",
                tools=RESPONSES_TOOLS,
                stream=True,
                input=[
                    {"role": "user", "content": "Where is order A1001?"},
                    {
                        "type": "function_call",
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                    },
                    {"type": "function_call_output", "call_id": call.call_id, "output": "shipped"},
                ],
            )
        )
        return [first.model_dump(), [e.model_dump() for e in events]]


def anthropic_agent(url: str) -> list[Any]:
    with anthropic.Anthropic(
        base_url=f"{url}/anthropic", api_key="sk-ant-secret", max_retries=0
    ) as client:
        messages: list[Any] = [{"role": "user", "content": "Where is order A1001?"}]
        first = client.messages.create(
            model="claude-sonnet-5", max_tokens=200, messages=messages, tools=ANTHROPIC_TOOLS
        )
        use = next(block for block in first.content if block.type == "tool_use")
        messages += [
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "shipped"}],
            },
        ]
        with client.messages.stream(
            model="claude-sonnet-5", max_tokens=200, messages=messages, tools=ANTHROPIC_TOOLS
        ) as stream:
            events = [e.model_dump() for e in stream]
            final = stream.get_final_message().model_dump()
        return [first.model_dump(), events, final]


SCENARIOS: dict[str, Scenario] = {
    "openai-chat": lambda url: chat_agent(url, stream=False),
    "openai-chat-stream": lambda url: chat_agent(url, stream=True),
    "openai-async-parallel": async_chat,
    "openai-responses": responses_agent,
    "anthropic-messages": anthropic_agent,
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_replay_returns_what_was_recorded_with_the_upstream_gone(
    name, start_upstream, start_proxy, store
):
    upstream = start_upstream(ScriptedUpstream(tool_then_answer, chunk_delay=0.002))
    recording = start_proxy(upstream.url, routes={"anthropic": upstream.url})
    run = recording.record(name=name).run
    recorded = SCENARIOS[name](recording.proxy.url)
    recording.close()
    sent = upstream.request_count
    assert sent >= 2
    upstream.stop()

    replaying = start_proxy(None)
    replay_run = replaying.replay(name).run
    replayed = SCENARIOS[name](replaying.proxy.url)
    replaying.close()

    assert replayed == recorded
    assert upstream.request_count == sent
    exchanges = store.exchanges(replay_run.id)
    assert len(exchanges) == sent and all(e.origin is Origin.REPLAYED for e in exchanges)
    assert store.get_run(replay_run.id).status is RunStatus.FINISHED
    originals = store.exchanges(run.id)
    assert all(e.summary and e.summary.kind == "llm" and e.summary.usage for e in originals)


def test_streams_replay_chunk_for_chunk(start_upstream, start_proxy, store):
    upstream = start_upstream(ScriptedUpstream(chunk_delay=0.003))
    recording = start_proxy(upstream.url)
    run = recording.record().run
    with openai_client(recording.proxy.url) as client:
        with client.chat.completions.with_streaming_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "one two three four five six"}],
            stream=True,
        ) as response:
            live_bytes = b"".join(response.iter_bytes())
    recording.close()
    upstream.stop()
    [exchange] = store.exchanges(run.id)
    assert exchange.chunks is not None and len(exchange.chunks) >= 6
    assert b"".join(c.data for c in exchange.chunks) == live_bytes
    offsets = [c.offset_ms for c in exchange.chunks]
    assert offsets == sorted(offsets) and offsets[-1] - offsets[0] >= 10  # the delays were seen

    replaying = start_proxy(None)
    replaying.replay(run.id)
    with openai_client(replaying.proxy.url) as client:
        with client.chat.completions.with_streaming_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "one two three four five six"}],
            stream=True,
        ) as response:
            assert b"".join(response.iter_bytes()) == live_bytes


def test_secrets_never_reach_the_cassette_file(start_upstream, start_proxy, store, cassette):
    upstream = start_upstream(ScriptedUpstream(tool_then_answer))
    recording = start_proxy(upstream.url, routes={"anthropic": upstream.url})
    recording.record()
    chat_agent(recording.proxy.url, stream=False)
    anthropic_agent(recording.proxy.url)
    recording.close()
    assert upstream.requests[0].headers["Authorization"] == "Bearer sk-test-secret"
    kept = [p for p in cassette.parent.iterdir() if p.name.startswith(cassette.name)]
    raw = b"".join(  # the file, its WAL, and its journals (a folder) while they last
        f.read_bytes() for p in kept for f in ([p] if p.is_file() else p.iterdir())
    )
    assert b"sk-test-secret" not in raw and b"sk-ant-secret" not in raw


def test_divergence_reaches_the_sdk_as_an_error_with_the_report(start_upstream, start_proxy, store):
    upstream = start_upstream()
    recording = start_proxy(upstream.url)
    run = recording.record().run
    with openai_client(recording.proxy.url) as client:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "refund A1001"}]
        )
    recording.close()

    replaying = start_proxy(None)
    replay_run = replaying.replay(run.id).run
    with (
        openai_client(replaying.proxy.url) as client,
        pytest.raises(openai.BadRequestError) as caught,
    ):
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "refund A1002"}]
        )
    replaying.close()
    message = caught.value.message
    assert "forkpoint divergence" in message and "step 0" in message
    assert '"refund A1001" → "refund A1002"' in message
    assert store.get_run(replay_run.id).status is RunStatus.DIVERGED
    assert [e.origin for e in store.exchanges(replay_run.id)] == [Origin.DIVERGED]


def test_a_client_that_hangs_up_right_after_done_leaves_a_complete_exchange(
    start_upstream, start_proxy, store
):
    """The openai SDK closes the connection as soon as it reads `[DONE]`; that is not a cut."""
    upstream = start_upstream(ScriptedUpstream(chunk_delay=0.001))
    recording = start_proxy(upstream.url)
    run = recording.record().run
    for index in range(8):  # a race per request: several give it the chance to show
        with openai_client(recording.proxy.url) as client:
            list(
                client.chat.completions.create(
                    model="gpt-4o", stream=True, messages=[{"role": "user", "content": f"q{index}"}]
                )
            )
    recording.close()
    exchanges = store.exchanges(run.id)
    assert len(exchanges) == 8
    assert [(e.complete, e.error) for e in exchanges] == [(True, None)] * 8
