"""A support agent on Pydantic AI: an `Agent` with tools, run once and once streamed, as Pydantic
AI's docs show. `openai:` models use the OpenAI Responses API.

forkpoint points it at the proxy with `OPENAI_BASE_URL`; nothing here names forkpoint.
Prints what the agent saw as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from pydantic_ai import Agent, ModelMessagesTypeAdapter

agent = Agent("openai:gpt-4o", instructions="Look the order up, then refund it.")


@agent.tool_plain
def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


@agent.tool_plain
def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


TASK = "Please refund order A1001, the shoes don't fit."


# Made by Pydantic AI itself, different on every run even when every response is replayed:
# its run and conversation ids, its clock, and the base URL it was given (the proxy's port).
CLIENT_SIDE = {"run_id", "conversation_id", "timestamp", "provider_url"}


def seen(messages: Any) -> list[dict[str, Any]]:
    """The messages as they came over the wire, less what Pydantic AI made up itself."""
    dumped = ModelMessagesTypeAdapter.dump_python(messages, mode="json")
    for message in dumped:
        for part in [message, *message["parts"]]:
            for key in CLIENT_SIDE & part.keys():
                del part[key]
    return dumped


async def streamed() -> dict[str, Any]:
    async with agent.run_stream(TASK) as result:
        deltas = [delta async for delta in result.stream_text(delta=True, debounce_by=None)]
    return {
        "final_output": await result.get_output(),
        "deltas": deltas,
        "messages": seen(result.all_messages()),
    }


def main() -> dict[str, Any]:
    result = agent.run_sync(TASK)
    plain = {"final_output": result.output, "messages": seen(result.all_messages())}
    return {"plain": plain, "stream": asyncio.run(streamed())}


if __name__ == "__main__":
    json.dump(main(), sys.stdout)
