"""The openai SDK's structured output (`parse`, and `stream` with a response format), sync and
async, Chat Completions and Responses, with a tool call first. Plain calls, streams and tool
calls without a schema are in tests/e2e/test_record_replay.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from forkpoint.engine.changes import Change
from forkpoint.models import RunStatus
from forkpoint.testing.upstream import ErrorReply, Prompt, Reply
from tests.stacks.scripts import structured_script

pytestmark = pytest.mark.stacks

TASK = "Should order A1001 be refunded? The shoes don't fit."


class LookupOrder(BaseModel):
    """Look up an order's status by its id."""

    order_id: str


class RefundDecision(BaseModel):
    order_id: str
    status: str
    refund: bool
    answered_by: str


CHAT_TOOLS = [openai.pydantic_function_tool(LookupOrder, name="lookup_order")]
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "lookup_order",
        "description": LookupOrder.__doc__,
        "parameters": {**LookupOrder.model_json_schema(), "additionalProperties": False},
        "strict": True,
    }
]


def dump(model: BaseModel) -> Any:
    """`parsed` fields are typed by a TypeVar the SDK's models leave open: serialize them as
    what they hold (plain `model_dump` warns that it expected None)."""
    return model.model_dump(mode="json", serialize_as_any=True)


def lookup_order(order_id: str) -> str:
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


def chat_parse(client: openai.OpenAI) -> list[Any]:
    """Chat Completions: the tool call's arguments and the answer both parsed into models."""
    messages: list[Any] = [{"role": "user", "content": TASK}]
    first = client.chat.completions.parse(
        model="gpt-4o", messages=messages, tools=CHAT_TOOLS, response_format=RefundDecision
    )
    [call] = first.choices[0].message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, LookupOrder)
    messages += [
        first.choices[0].message,
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": lookup_order(call.function.parsed_arguments.order_id),
        },
    ]
    second = client.chat.completions.parse(
        model="gpt-4o", messages=messages, tools=CHAT_TOOLS, response_format=RefundDecision
    )
    assert isinstance(second.choices[0].message.parsed, RefundDecision)
    return [dump(first), dump(second)]


def responses_parse(client: openai.OpenAI) -> list[Any]:
    """Responses: a function call, then `output_parsed`."""
    inputs: list[Any] = [{"role": "user", "content": TASK}]
    first = client.responses.parse(
        model="gpt-4o", input=inputs, tools=RESPONSES_TOOLS, text_format=RefundDecision
    )
    call = next(item for item in first.output if item.type == "function_call")
    result = lookup_order(**json.loads(call.arguments))
    inputs += [
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": result},
    ]
    second = client.responses.parse(
        model="gpt-4o", input=inputs, tools=RESPONSES_TOOLS, text_format=RefundDecision
    )
    assert isinstance(second.output_parsed, RefundDecision)
    # `output_parsed` is a property, not a field: it is dumped on its own.
    return [dump(first), dump(second), second.output_parsed.model_dump()]


async def async_streams(client: openai.AsyncOpenAI) -> list[Any]:
    """Async streams with a response format, both APIs at once: their events and final parse."""
    messages: list[Any] = [{"role": "user", "content": TASK}]

    async def chat() -> Any:
        async with client.chat.completions.stream(
            model="gpt-4o-mini", messages=messages, response_format=RefundDecision
        ) as stream:
            events = [dump(event) async for event in stream]
            final = await stream.get_final_completion()
        assert isinstance(final.choices[0].message.parsed, RefundDecision)
        return [events, dump(final)]

    async def responses() -> Any:
        async with client.responses.stream(
            model="gpt-4o-mini", input=messages, text_format=RefundDecision
        ) as stream:
            events = [dump(event) async for event in stream]
            final = await stream.get_final_response()
        assert isinstance(final.output_parsed, RefundDecision)
        return [events, dump(final), final.output_parsed.model_dump()]

    return list(await asyncio.gather(chat(), responses()))


def structured_agent(env: dict[str, str]) -> dict[str, Any]:
    """Structured output every way the SDK offers it, pointed at forkpoint by `base_url`."""
    options: dict[str, Any] = {
        "base_url": env["OPENAI_BASE_URL"], "api_key": env["OPENAI_API_KEY"], "max_retries": 0,
    }  # fmt: skip
    with openai.OpenAI(**options) as client:
        seen = {"chat": chat_parse(client), "responses": responses_parse(client)}

    async def streams() -> list[Any]:
        async with openai.AsyncOpenAI(**options) as client:
            return await async_streams(client)

    seen["streams"] = asyncio.run(streams())
    return seen


def test_structured_output_sync_async_streamed_replays_offline(stacks):
    recorded = stacks.check(structured_agent, structured_script, min_steps=6)
    seen = recorded.output
    answer = seen["chat"][1]["choices"][0]["message"]["parsed"]
    assert (
        answer["status"].startswith("order A1001: delivered") and answer["answered_by"] == "gpt-4o"
    )
    assert seen["responses"][2] == answer
    assert [e.streamed for e in recorded.exchanges].count(True) == 2


def test_fork_after_the_tool_call_with_another_model(stacks):
    recorded = stacks.record(structured_agent, structured_script, min_steps=6)
    forked = stacks.fork(
        recorded, structured_agent, structured_script, at=1, change=Change(model="gpt-4o-mini")
    )
    assert forked.output["chat"][0] == recorded.output["chat"][0]  # from the cassette
    assert (
        forked.output["chat"][1]["choices"][0]["message"]["parsed"]["answered_by"] == "gpt-4o-mini"
    )
    assert forked.output["responses"][2]["answered_by"] == "gpt-4o-mini"


def test_resume_a_crashed_run(stacks):
    """The agent died after the Chat Completions part: resumed, it runs again from the start,
    its first steps answered from the cassette, the rest live, all in the crashed run."""

    def dies_after_chat(env: dict[str, str]) -> Any:
        with openai.OpenAI(
            base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0
        ) as client:
            return chat_parse(client)

    crashed = stacks.record(dies_after_chat, structured_script, min_steps=2, ends=RunStatus.CRASHED)
    resumed = stacks.resume(crashed, structured_agent, structured_script)
    assert resumed.run.id == crashed.run.id and len(resumed.exchanges) == 6
    assert resumed.output["chat"] == crashed.output  # the same answers, from the cassette
    assert resumed.upstream.request_count == 4


def test_a_retried_request_replays_as_it_went(stacks):
    """The SDK retries a 500 with the same body (only `x-stainless-retry-count` changes):
    replay serves the 500, then the answer, so the SDK retries again and sees what it saw."""
    failures: list[Prompt] = []

    def flaky(prompt: Prompt) -> Reply | ErrorReply:
        if not failures:
            failures.append(prompt)
            return ErrorReply(500, "The server had an error while processing your request.")
        return structured_script(prompt)

    def retrying(env: dict[str, str]) -> Any:
        with openai.OpenAI(
            base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=1
        ) as client:
            return chat_parse(client)

    recorded = stacks.record(retrying, flaky, min_steps=3, statuses=[500, 200, 200])
    retries = [dict(e.request_headers)["x-stainless-retry-count"] for e in recorded.exchanges]
    assert retries[:2] == ["0", "1"]
    stacks.replay(recorded, retrying)


def test_a_live_rerun_differs_so_equal_output_means_replayed(stacks):
    """The harness's equality has teeth: the scripted upstream's ids and timestamps are fresh
    on every call, so two live runs never look alike."""
    first = stacks.record(structured_agent, structured_script, min_steps=6)
    second = stacks.record(structured_agent, structured_script, min_steps=6)
    assert first.output != second.output
    assert first.output["chat"][0]["id"] != second.output["chat"][0]["id"]
