"""A support agent on openai's `AzureOpenAI` client: Chat Completions with tools against a
deployment, once plain and once streamed, as Azure's quickstart shows.

`AzureOpenAI(api_version=…)` reads `AZURE_OPENAI_ENDPOINT` and `AZURE_OPENAI_API_KEY`:
forkpoint points the endpoint at the proxy and sends the requests on to the endpoint you had
set. The model is the deployment, in the path; argv[1] names another. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from openai import AzureOpenAI

TASK = "Please refund order A1001, the shoes don't fit."


def lookup_order(order_id: str) -> str:
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


def issue_refund(order_id: str) -> str:
    return f"refund R-{order_id} issued"


FUNCTIONS = {"lookup_order": lookup_order, "issue_refund": issue_refund}
TOOLS: Any = [
    {"type": "function", "function": {
        "name": name, "description": name.replace("_", " "),
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]},
    }}
    for name in FUNCTIONS
]  # fmt: skip


def run(client: AzureOpenAI, deployment: str, *, stream: bool) -> list[Any]:
    messages: list[Any] = [{"role": "user", "content": TASK}]
    seen: list[Any] = []
    while True:
        if stream:
            with client.chat.completions.stream(
                model=deployment, messages=messages, tools=TOOLS
            ) as events:
                message = events.get_final_completion().choices[0].message
            seen.append(message.model_dump(mode="json"))
        else:
            completion = client.chat.completions.create(
                model=deployment, messages=messages, tools=TOOLS
            )
            seen.append(completion.model_dump(mode="json"))
            message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        if not message.tool_calls:
            return seen
        for call in message.tool_calls:
            result = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    deployment = sys.argv[1] if len(sys.argv) > 1 else "support-gpt-4o"
    client = AzureOpenAI(api_version="2024-10-21", max_retries=0)
    print(json.dumps({"plain": run(client, deployment, stream=False),
                      "streamed": run(client, deployment, stream=True)}))  # fmt: skip
