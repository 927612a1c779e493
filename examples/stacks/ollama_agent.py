"""A support agent on the ollama client: `ollama.chat` with Python functions as tools, the
loop run by hand once plain and once streamed (newline-delimited JSON), then a streamed
`ollama.generate`, as the client's README shows.

The client reads `OLLAMA_HOST`: forkpoint points it at the proxy (and a host you had set
becomes the proxy's upstream); nothing here names forkpoint. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import ollama

TASK = "Please refund order A1001, the shoes don't fit."


def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


TOOLS = {"lookup_order": lookup_order, "issue_refund": issue_refund}


def run(model: str, *, stream: bool) -> list[dict[str, Any]]:
    messages: list[Any] = [{"role": "user", "content": TASK}]
    seen: list[dict[str, Any]] = []
    while True:
        if stream:
            parts = list(ollama.chat(model, messages, tools=list(TOOLS.values()), stream=True))
            seen += [part.model_dump(mode="json") for part in parts]
            content = "".join(part.message.content or "" for part in parts)
            calls = [call for part in parts for call in part.message.tool_calls or []]
        else:
            response = ollama.chat(model, messages, tools=list(TOOLS.values()))
            seen.append(response.model_dump(mode="json"))
            content, calls = response.message.content or "", response.message.tool_calls or []
        messages.append({"role": "assistant", "content": content, "tool_calls": calls})
        if not calls:
            return seen
        for call in calls:
            result = TOOLS[call.function.name](**call.function.arguments)
            messages.append({"role": "tool", "content": result, "tool_name": call.function.name})


if __name__ == "__main__":
    model = sys.argv[1] if len(sys.argv) > 1 else "llama3.2"
    generated = [p.model_dump(mode="json") for p in ollama.generate(model, TASK, stream=True)]
    print(json.dumps({"plain": run(model, stream=False), "streamed": run(model, stream=True),
                      "generated": generated}))  # fmt: skip
