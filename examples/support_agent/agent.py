"""A customer-support agent: the OpenAI SDK's Chat Completions with function tools over HTTP.

It reads OPENAI_API_KEY and OPENAI_BASE_URL as the SDK does,
so it runs against OpenAI itself, against the offline fake LLM, or through `forkpoint record`
and `forkpoint replay`, which point it at their proxy. Its tools are HTTP calls to the tool
service (tools_service.py); under forkpoint they go through the proxy too, by FORKPOINT_URL,
so a replay serves the tools' answers as well as the model's. Its one line of forkpoint is
`attach`, which keeps its conversation in a state forkpoint can snapshot and restore (a resume
after a crash, a fork); without forkpoint it is a plain dict.

    python examples/support_agent/agent.py "Please refund order A1001, the shoes don't fit."

Env: SUPPORT_MODEL (default gpt-4o-mini), SUPPORT_TOOLS_URL (default $FORKPOINT_URL/tools,
else http://127.0.0.1:8790).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from forkpoint.adapters.agent import attach

DEFAULT_TICKET = (
    "Hi, I ordered trail running shoes (order A1001) and they don't fit. Can I get my money back?"
)
MAX_TURNS = 8  # a model that keeps calling tools is stopped here rather than looping forever
SYSTEM = (
    "You are a customer-support agent for an online shop. Use the tools: look the order up, "
    "read the refund policy, and issue a refund only if the policy allows it, for at most the "
    "order amount. Then answer the customer briefly, naming the order, your decision and the "
    "amount."
)


def _function(name: str, description: str, **properties: dict[str, str]) -> ChatCompletionToolParam:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    _function(
        "lookup_order",
        "Look an order up: item, amount, status and delivery date.",
        order_id={"type": "string", "description": "The order number, e.g. A1001."},
    ),
    _function("refund_policy", "The shop's refund policy."),
    _function(
        "issue_refund",
        "Refund an order. Only call this when the refund policy allows it.",
        order_id={"type": "string", "description": "The order number."},
        amount={"type": "number", "description": "Amount to refund, in the order's currency."},
    ),
]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


def tools_url() -> str:
    """Where the tool service is: set explicitly, else through forkpoint's proxy, else local."""
    if url := os.environ.get("SUPPORT_TOOLS_URL"):
        return url.rstrip("/")
    if proxy := os.environ.get("FORKPOINT_URL"):
        return proxy.rstrip("/") + "/tools"
    return "http://127.0.0.1:8790"


def run_tool(base_url: str, call: ToolCall) -> str:
    """Call one tool over HTTP; its JSON answer (errors included) goes back to the model."""
    try:
        method, path, payload = _tool_request(call.name, json.loads(call.arguments or "{}"))
    except (ValueError, KeyError, TypeError) as error:  # the model's mistake: tell it
        return json.dumps({"error": f"bad call to {call.name}: {error!r}"})
    return _http(base_url, method, path, payload)


def _tool_request(name: str, arguments: dict[str, Any]) -> tuple[str, str, Any]:
    """The HTTP method, path and JSON payload that carry out one tool call."""
    if name == "lookup_order":
        return "GET", "/orders/" + urllib.parse.quote(str(arguments["order_id"]), safe=""), None
    if name == "refund_policy":
        return "GET", "/refund-policy", None
    if name == "issue_refund":
        return (
            "POST",
            "/refunds",
            {"order_id": arguments["order_id"], "amount": arguments["amount"]},
        )
    raise ValueError(f"no tool named {name!r}")


def _http(base_url: str, method: str, path: str, payload: Any = None) -> str:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        base_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read().decode()
    except urllib.error.HTTPError as error:  # a refusal or a bad request: the model should see it
        with error:
            return error.read().decode()


@dataclass
class Turn:
    text: str
    calls: list[ToolCall]
    tokens: int


def model_turn(client: OpenAI, model: str, messages: list[ChatCompletionMessageParam]) -> Turn:
    """One streamed model call: print its text as it arrives, collect its tool calls."""
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    turn = Turn("", [], 0)
    calls: dict[int, ToolCall] = {}
    for chunk in stream:
        if chunk.usage is not None:
            turn.tokens = chunk.usage.total_tokens
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        if delta.content:
            turn.text += delta.content
            print(delta.content, end="", flush=True)
        for part in delta.tool_calls or ():  # a call arrives in pieces, keyed by its index
            call = calls.setdefault(part.index, ToolCall("", "", ""))
            call.id += part.id or ""
            if part.function is not None:
                call.name += part.function.name or ""
                call.arguments += part.function.arguments or ""
    if turn.text:
        print()
    turn.calls = list(calls.values())
    return turn


def handle(ticket: str) -> str:
    """Work the ticket to an answer: call the model, run the tools it asks for, repeat.

    The conversation and the tools called so far live in `state`, which forkpoint snapshots at
    each model call and gives back on a fork or a resume (outside forkpoint it is a plain
    dict). Returns the answer, or "" when the model still wants tools after MAX_TURNS calls.
    """
    client = OpenAI()
    model = os.environ.get("SUPPORT_MODEL", "gpt-4o-mini")
    base_url = tools_url()
    crash_after = int(os.environ.get("SUPPORT_CRASH_AFTER_TOOLS", "0"))  # demo: die mid-run
    state = attach(default={
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ticket}],
        "called": [],
        "model_calls": 0,
    })  # fmt: skip
    if state.restored_step is not None:
        print(f"agent: resumed from step {state.restored_step}, "
              f"{len(state['called'])} tool calls already done", file=sys.stderr)  # fmt: skip
    messages: list[ChatCompletionMessageParam] = state["messages"]
    called: list[str] = state["called"]
    tokens, turn = 0, None
    while state["model_calls"] < MAX_TURNS:
        turn = model_turn(client, model, messages)
        state["model_calls"] += 1
        tokens += turn.tokens
        if not turn.calls:
            break
        messages.append({
            "role": "assistant",
            "content": turn.text or None,
            "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.calls
            ],
        })  # fmt: skip
        for call in turn.calls:
            result = run_tool(base_url, call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            called.append(f"{call.name}({call.arguments})")
            if len(called) == crash_after:
                print(f"agent: crashing on purpose after {crash_after} tool calls", file=sys.stderr)
                os.kill(os.getpid(), signal.SIGKILL)
    answer = "" if turn is None or turn.calls else turn.text
    print(
        f"agent: {state['model_calls']} model calls, {tokens} tokens this time; "
        f"tools: {', '.join(called) or 'none'}" + ("" if answer else "; no answer"),
        file=sys.stderr,
    )
    return answer


def main() -> None:
    ticket = " ".join(sys.argv[1:]) or DEFAULT_TICKET
    sys.exit(0 if handle(ticket) else 1)


if __name__ == "__main__":
    main()
