"""A tiny shop agent recorded through the real proxy, with the real openai client.

The scripted model's choices depend on the model, so forking with another model changes
behaviour in a known way:

    gpt-4o       0 llm → lookup_order(A1001)   1 GET /orders/A1001
                 2 llm → refund_policy(us)     3 GET /policy?region=us   4 llm answer
    gpt-4o-mini  the same, but refund_policy(eu) at step 2
    o4-mini      skips the policy: 2 llm answer (three steps in all)
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from aiohttp import web

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.changes import Change
from forkpoint.models import Run
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream, ToolCallSpec

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("lookup_order", "refund_policy")
]
FORK_STEP = 2


def shop_script(prompt: Prompt) -> Reply:
    results = prompt.tool_results
    if not results:
        return Reply(tool_calls=(ToolCallSpec("lookup_order", {"order_id": "A1001"}),))
    if len(results) == 1 and prompt.model != "o4-mini":
        region = "eu" if prompt.model == "gpt-4o-mini" else "us"
        return Reply(tool_calls=(ToolCallSpec("refund_policy", {"region": region}),))
    return Reply(text=f"[{prompt.model}] " + " / ".join(results), cached_tokens=8)


async def order(request: web.Request) -> web.Response:
    return web.json_response({"id": request.match_info["id"], "status": "shipped"})


async def policy(request: web.Request) -> web.Response:
    days = 14 if request.query.get("region") == "eu" else 30
    return web.json_response({"region": request.query.get("region"), "days": days})


def shop_agent(url: str, *, model: str = "gpt-4o", stream: bool = False) -> str:
    """Ask about an order, run the tools the model asks for over HTTP, return the answer."""
    messages: list[Any] = [{"role": "user", "content": "Can I return order A1001?"}]
    with openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0) as client:
        while True:
            text, calls = _turn(client, model, messages, stream)
            if not calls:
                return text
            messages.append({"role": "assistant", "tool_calls": calls})
            for call in calls:
                arguments = json.loads(call["function"]["arguments"])
                path = (
                    f"/orders/{arguments['order_id']}"
                    if call["function"]["name"] == "lookup_order"
                    else f"/policy?region={arguments['region']}"
                )
                with urllib.request.urlopen(url + path) as response:
                    result = response.read().decode()
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})


def _turn(
    client: openai.OpenAI, model: str, messages: list[Any], stream: bool
) -> tuple[str, list[dict[str, Any]]]:
    if not stream:
        message = (
            client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
            .choices[0]
            .message
        )
        calls = [c.model_dump(include={"id", "type", "function"}) for c in message.tool_calls or []]
        return message.content or "", calls
    text, calls = "", {}
    for chunk in client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, stream=True,
        stream_options={"include_usage": True},
    ):  # fmt: skip
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})  # fmt: skip
                call["id"] = delta.id or call["id"]
                call["function"]["name"] += (delta.function and delta.function.name) or ""
                call["function"]["arguments"] += (delta.function and delta.function.arguments) or ""
    return text, list(calls.values())


@dataclass
class Shop:
    """Records and forks runs of the shop agent on the test's cassette."""

    store: SqliteStore
    start_proxy: Callable[..., Any]
    url: str

    def record(self, name: str, *, model: str = "gpt-4o", stream: bool = False) -> Run:
        thread = self.start_proxy(self.url)
        run = thread.record(name=name).run
        shop_agent(thread.proxy.url, model=model, stream=stream)
        thread.close()
        return self.store.get_run(run.id)

    def fork(
        self, parent: Run, name: str, *, at: int = FORK_STEP, model: str | None = None,
        stream: bool = False,
    ) -> Run:  # fmt: skip
        thread = self.start_proxy(self.url)
        run = thread.fork(
            parent.id, at=at, change=Change(model=model), name=name
        ).run
        shop_agent(thread.proxy.url, stream=stream)
        thread.close()
        return self.store.get_run(run.id)

    def replay(self, parent: Run, name: str) -> Run:
        thread = self.start_proxy(None)
        run = thread.replay(parent.id, name=name).run
        shop_agent(thread.proxy.url)
        thread.close()
        return self.store.get_run(run.id)


@pytest.fixture
def shop(start_upstream, start_proxy, store) -> Shop:  # type: ignore[no-untyped-def]
    upstream = ScriptedUpstream(shop_script)
    upstream.app.router.add_get("/orders/{id}", order)
    upstream.app.router.add_get("/policy", policy)
    return Shop(store, start_proxy, start_upstream(upstream).url)
