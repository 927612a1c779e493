"""The anthropic SDK's own agent loop, async: `beta.messages.tool_runner` with streamed turns
(tool use arriving as `input_json_delta`), then structured output with `messages.parse`. Plain
`messages.create`, `messages.stream` and tool use are in tests/e2e/test_record_replay.py."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool
from pydantic import BaseModel

from forkpoint.engine.changes import Change
from forkpoint.testing.upstream import Prompt, Reply
from tests.stacks.scripts import structured_script, support_script

pytestmark = pytest.mark.stacks

MODEL = "claude-haiku-4-5"
TASK = "Please refund order A1001, the shoes don't fit."


@beta_async_tool
async def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


@beta_async_tool
async def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


class RefundDecision(BaseModel):
    order_id: str
    status: str
    refund: bool
    answered_by: str


def script(prompt: Prompt) -> Reply:
    return structured_script(prompt) if prompt.output_schema else support_script(prompt)


async def main(client: anthropic.AsyncAnthropic) -> dict[str, Any]:
    runner = client.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=1024,
        tools=[lookup_order, issue_refund],
        messages=[{"role": "user", "content": TASK}],
        stream=True,
    )
    turns = []
    async for stream in runner:
        events = [event.model_dump(mode="json") async for event in stream]
        message = await stream.get_final_message()
        turns.append({"events": events, "message": message.model_dump(mode="json")})
    parsed = await client.messages.parse(
        model=MODEL,
        max_tokens=1024,
        messages=[{"role": "user", "content": f"{TASK} Decide on the refund."}],
        output_format=RefundDecision,
    )
    assert isinstance(parsed.parsed_output, RefundDecision)
    return {"turns": turns, "parsed": parsed.parsed_output.model_dump()}


def anthropic_agent(env: dict[str, str]) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with anthropic.AsyncAnthropic(
            base_url=env["ANTHROPIC_BASE_URL"], api_key=env["ANTHROPIC_API_KEY"], max_retries=0
        ) as client:
            return await main(client)

    return asyncio.run(run())


def test_async_streaming_tool_runner_and_parse_replay_offline(stacks):
    recorded = stacks.check(anthropic_agent, script, min_steps=4)
    turns = recorded.output["turns"]
    assert [t["message"]["stop_reason"] for t in turns] == ["tool_use", "tool_use", "end_turn"]
    deltas = [
        e["delta"]["type"] for t in turns for e in t["events"] if e["type"] == "content_block_delta"
    ]
    assert "input_json_delta" in deltas and "text_delta" in deltas
    assert turns[-1]["message"]["content"][0]["text"].startswith("[claude-haiku-4-5] Refund")
    assert recorded.output["parsed"]["answered_by"] == MODEL
    assert all(e.route.startswith("/anthropic/v1/messages") for e in recorded.exchanges)


def test_fork_of_a_threaded_run_goes_on_after_the_sdk_restarts_the_thread(stacks):
    """The tool runner continues server-held threads by the previous reply's id. A fork's first
    live turn continues from a replayed reply that the live upstream does not hold: it answers
    `thread_not_found`, and the SDK resends the whole history under a new thread."""
    recorded = stacks.record(anthropic_agent, script, min_steps=4)
    forked = stacks.fork(
        recorded, anthropic_agent, script, at=1, change=Change(model="claude-sonnet-4-5")
    )
    live = forked.exchanges[1:]
    assert [e.status for e in live] == [404, 200, 200, 200]
    assert b"thread_not_found" in gzip.decompress(live[0].response_body)  # as the upstream sent it
    first_live = json.loads(forked.upstream.requests[1].body)
    assert first_live["thread"] == {"type": "create"} and len(first_live["messages"]) == 3
    turns = forked.output["turns"]
    assert turns[0] == recorded.output["turns"][0]  # from the cassette
    assert turns[-1]["message"]["content"][0]["text"].startswith("[claude-sonnet-4-5] Refund")
