"""A support agent on the OpenAI Agents SDK: a triage agent with a function tool that hands off
to a billing agent with its own tool, run streamed, as the SDK's docs show.

forkpoint points it at the proxy with `OPENAI_BASE_URL`; nothing here names forkpoint. Tracing
export (a call that bypasses the base URL) is off: `OPENAI_AGENTS_DISABLE_TRACING=1`.
Prints what the agent saw as one JSON line: the final output, the last agent, every model
response and every raw stream event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from typing import Any

from agents import Agent, RawResponsesStreamEvent, Runner, function_tool


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


@function_tool
def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


billing = Agent(
    name="Billing",
    instructions="You issue refunds for orders the triage agent looked up.",
    model="gpt-4o",
    tools=[issue_refund],
)
triage = Agent(
    name="Triage",
    instructions="Look the order up, then hand refunds over to billing.",
    model="gpt-4o",
    tools=[lookup_order],
    handoffs=[billing],
)


def jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


async def main() -> dict[str, Any]:
    result = Runner.run_streamed(triage, "Please refund order A1001, the shoes don't fit.")
    events = [
        event.data.model_dump(mode="json")
        async for event in result.stream_events()
        if isinstance(event, RawResponsesStreamEvent)
    ]
    return {
        "final_output": result.final_output,
        "last_agent": result.last_agent.name,
        "responses": [jsonable(response) for response in result.raw_responses],
        "events": events,
    }


if __name__ == "__main__":
    json.dump(asyncio.run(main()), sys.stdout)
