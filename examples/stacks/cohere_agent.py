"""A support agent on the cohere SDK's `ClientV2`: `chat` with tools, the loop run by hand
once plain and once with `chat_stream` (SSE events), as Cohere's tool-use guide shows.

`cohere.ClientV2()` reads `CO_API_KEY` and `CO_API_URL`: forkpoint points the URL at the
proxy; nothing here names forkpoint. Prints one JSON line: what the agent saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import cohere

TASK = "Please refund order A1001, the shoes don't fit."


def lookup_order(order_id: str) -> str:
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


def issue_refund(order_id: str) -> str:
    return f"refund R-{order_id} issued"


FUNCTIONS = {"lookup_order": lookup_order, "issue_refund": issue_refund}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": name.replace("_", " "),
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
    for name in FUNCTIONS
]


def run(client: cohere.ClientV2, model: str, *, stream: bool) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": TASK}]
    seen: list[Any] = []
    while True:
        if stream:
            events = list(client.chat_stream(model=model, messages=messages, tools=TOOLS))
            seen.append([event.model_dump(mode="json") for event in events])
            plan = "".join(e.delta.message.tool_plan for e in events if e.type == "tool-plan-delta")
            calls = _streamed_calls(events)
        else:
            response = client.chat(model=model, messages=messages, tools=TOOLS)
            seen.append(response.model_dump(mode="json"))
            plan, calls = (
                response.message.tool_plan or "",
                [
                    (c.id, c.function.name, c.function.arguments)
                    for c in response.message.tool_calls or []
                ],
            )
        if not calls:
            return seen
        messages.append({"role": "assistant", "tool_plan": plan, "tool_calls": [
            {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id_, name, arguments in calls
        ]})  # fmt: skip
        for id_, name, arguments in calls:
            result = FUNCTIONS[name](**json.loads(arguments))
            messages.append({"role": "tool", "tool_call_id": id_, "content": [
                {"type": "document", "document": {"data": result}}
            ]})  # fmt: skip


def _streamed_calls(events: list[Any]) -> list[tuple[str, str, str]]:
    calls: dict[int, list[str]] = {}
    for event in events:
        if event.type == "tool-call-start":
            call = event.delta.message.tool_calls
            calls[event.index] = [call.id, call.function.name, ""]
        elif event.type == "tool-call-delta":
            calls[event.index][2] += event.delta.message.tool_calls.function.arguments
    return [(id_, name, arguments) for id_, name, arguments in calls.values()]


if __name__ == "__main__":
    model = sys.argv[1] if len(sys.argv) > 1 else "command-a-03-2025"
    client = cohere.ClientV2()
    print(json.dumps({"plain": run(client, model, stream=False),
                      "streamed": run(client, model, stream=True)}))  # fmt: skip
