"""A support agent on google-genai (the Gemini API): a chat whose Python tools the SDK calls
itself (automatic function calling), once with `send_message` and once streamed with
`send_message_stream`, as the SDK's docs show.

`genai.Client()` reads its key (`GEMINI_API_KEY`) and its base URL (`GOOGLE_GEMINI_BASE_URL`)
from the environment: forkpoint points that at the proxy; nothing here names forkpoint. A
model other than the default comes in argv[1]. Prints one JSON line: what the agent saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from google import genai
from google.genai import types

TASK = "Please refund order A1001, the shoes don't fit."


def lookup_order(order_id: str) -> str:
    """Look up an order's status by its id."""
    return f"order {order_id}: delivered, 2 pairs of shoes, $80"


def issue_refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"refund R-{order_id} issued"


def seen(response: types.GenerateContentResponse) -> dict[str, Any]:
    """What a response told the agent (its HTTP headers aside)."""
    return response.model_dump(mode="json", exclude_none=True, exclude={"sdk_http_response"})


def main(model: str) -> dict[str, Any]:
    client = genai.Client()
    config = types.GenerateContentConfig(tools=[lookup_order, issue_refund])
    chat = client.chats.create(model=model, config=config)
    answer = chat.send_message(TASK)
    streamed = client.chats.create(model=model, config=config)
    chunks = [seen(chunk) for chunk in streamed.send_message_stream(TASK)]
    return {"answer": seen(answer), "text": answer.text, "chunks": chunks}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "gemini-2.5-flash")))
