"""A support agent on an OpenAI-compatible provider's own SDK (argv[1]: `groq` or
`cerebras`): Chat Completions with a tool, plain then streamed, as their quickstarts show.

`Groq()` reads `GROQ_BASE_URL` and `GROQ_API_KEY`, `Cerebras()` `CEREBRAS_BASE_URL` and
`CEREBRAS_API_KEY`: forkpoint points the base URL at the proxy. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TASK = "Please refund order A1001, the shoes don't fit."
TOOLS: Any = [
    {"type": "function", "function": {
        "name": "lookup_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }}
]  # fmt: skip


def client(provider: str) -> Any:
    if provider == "groq":
        from groq import Groq

        return Groq(max_retries=0)
    from cerebras.cloud.sdk import Cerebras

    return Cerebras(max_retries=0, warm_tcp_connection=False)


def main(provider: str, model: str) -> dict[str, Any]:
    chat = client(provider).chat.completions
    messages: list[Any] = [{"role": "user", "content": TASK}]
    first = chat.create(model=model, messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "order A1001: delivered"},
    ]
    chunks = list(chat.create(model=model, messages=messages, tools=TOOLS, stream=True))
    return {"first": first.model_dump(mode="json"),
            "chunks": [chunk.model_dump(mode="json") for chunk in chunks]}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
