"""A support agent on LiteLLM used as a client library: `litellm.completion` to an
OpenAI-compatible base, with tools, once plain and once streamed, as LiteLLM's docs show.

forkpoint points it at the proxy with `OPENAI_BASE_URL`, passed as `api_base`; nothing here
names forkpoint. `LITELLM_LOCAL_MODEL_COST_MAP=True` must be set (before import) so LiteLLM
reads its bundled price list instead of fetching one at import. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import litellm

API_BASE = os.environ["OPENAI_BASE_URL"]


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
            "description": function.__name__.replace("_", " "),
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
    for name, function in FUNCTIONS.items()
]


def run(*, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Please refund order A1001, the shoes don't fit."}
    ]
    seen: list[Any] = []
    for _ in range(5):
        response = litellm.completion(
            model="openai/gpt-4o",
            api_base=API_BASE,
            messages=messages,
            tools=TOOLS,
            stream=stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        )
        if stream:
            chunks = list(response)
            # LiteLLM stamps stream chunks with its own clock (`created`): not from the wire.
            seen.append([chunk.model_dump(exclude={"created"}) for chunk in chunks])
            response = litellm.stream_chunk_builder(chunks, messages=messages)
        else:
            seen.append(response.model_dump())
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return {"final_output": message.content, "responses": seen}
        for call in message.tool_calls:
            result = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError("the model never answered")


if __name__ == "__main__":
    json.dump({"plain": run(stream=False), "stream": run(stream=True)}, sys.stdout, default=str)
