"""A customer-support agent: the OpenAI SDK's Chat Completions with function tools over HTTP.

It reads OPENAI_API_KEY and OPENAI_BASE_URL as the SDK does,
so it runs against OpenAI itself, against the offline fake LLM, or through `forkpoint record`
and `forkpoint replay`, which point it at their proxy. Its tools are HTTP calls to the tool
service (tools_service.py); under forkpoint they go through the proxy too, by FORKPOINT_URL,
so a replay serves the tools' answers as well as the model's. Its one line of forkpoint is
`attach`, which keeps its conversation in a state forkpoint can snapshot and restore (a resume
after a crash, a fork, a wake); without forkpoint it is a plain dict.

A refund over the approval limit needs a person's yes: before issuing it, the agent asks the
tool service's approval endpoint (`POST /approvals`, the refund's details) and waits for the
answer, which the tool service gives itself. Under `forkpoint record --park 'POST
/tools/approvals*'` that request parks the run instead (the agent's process is ended while
the person thinks), and `forkpoint answer RUN --body '{"approved": true, "by": "alice"}'`
wakes it to go on from there.

    python examples/support_agent/agent.py "Please refund order A1001, the shoes don't fit."

Env: SUPPORT_MODEL (default gpt-4o-mini), SUPPORT_TOOLS_URL (default $FORKPOINT_URL/tools,
else http://127.0.0.1:8790), SUPPORT_APPROVAL_LIMIT (default 100: a refund over it needs
approval).
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
APPROVAL_LIMIT = 100.0  # a refund over this needs a person's approval (SUPPORT_APPROVAL_LIMIT)
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
    if path == "/refunds" and float(payload["amount"]) > approval_limit():
        return _approved_refund(base_url, payload)
    return _http(base_url, method, path, payload)


def approval_limit() -> float:
    return float(os.environ.get("SUPPORT_APPROVAL_LIMIT", APPROVAL_LIMIT))


def _approved_refund(base_url: str, refund: dict[str, Any]) -> str:
    """A refund over the limit: a person approves it first (`POST /approvals`, waiting as long
    as they take), then it is issued with the approval noted, or refused saying who denied it
    (any answer but `"approved": true` is a no: a deadline's timeout, an error)."""
    limit = approval_limit()
    print(f"agent: a refund of ${refund['amount']:.2f} is over the ${limit:.2f} limit: "
          "asking for approval", file=sys.stderr, flush=True)  # fmt: skip
    asked = {"action": "refund", **refund, "limit": limit}
    try:
        answer = json.loads(_http(base_url, "POST", "/approvals", asked, timeout=None))
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {}
    by = str(answer.get("by") or "the approver")
    if answer.get("approved") is not True:
        why = answer.get("note") or answer.get("error") or "no reason given"
        if isinstance(why, dict):  # an error in an API's shape (a deadline's timeout)
            why = why.get("message", why)
        print(f"agent: not approved ({by})", file=sys.stderr)
        return json.dumps(
            {"error": f"a refund over ${limit:.2f} needs approval, and {by} did not give it: {why}"}
        )
    print(f"agent: approved by {by}", file=sys.stderr)
    issued = json.loads(_http(base_url, "POST", "/refunds", refund))
    if isinstance(issued, dict) and "error" not in issued:
        issued["approved_by"] = by
    return json.dumps(issued)


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


def _http(
    base_url: str, method: str, path: str, payload: Any = None, *, timeout: float | None = 30
) -> str:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(
        base_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
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


def unanswered(messages: list[ChatCompletionMessageParam]) -> list[ToolCall]:
    """The tool calls of the last assistant message that have no result after it yet."""
    for at in range(len(messages) - 1, -1, -1):
        message: Any = messages[at]
        if message["role"] == "assistant":
            done = {m.get("tool_call_id") for m in messages[at + 1 :]}
            return [
                ToolCall(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in message.get("tool_calls") or ()
                if c["id"] not in done
            ]
    return []


def handle(ticket: str) -> str:
    """Work the ticket to an answer: call the model, run the tools it asks for, repeat.

    The conversation and the tools called so far live in `state`, which forkpoint snapshots at
    each model call (and as a run parks, mid-call) and gives back on a fork, a resume or a wake
    (outside forkpoint it is a plain dict). Returns the answer, or "" when the model still
    wants tools after MAX_TURNS calls.
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
    tokens, answer = 0, ""
    while True:
        # the model's calls still without a result: none, unless the state was pulled while
        # a tool ran (a park waiting on approval), so a woken agent goes on from that call
        for call in unanswered(messages):
            result = run_tool(base_url, call)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            called.append(f"{call.name}({call.arguments})")
            if len(called) == crash_after:
                print(f"agent: crashing on purpose after {crash_after} tool calls", file=sys.stderr)
                os.kill(os.getpid(), signal.SIGKILL)
        if state["model_calls"] >= MAX_TURNS:
            break
        turn = model_turn(client, model, messages)
        state["model_calls"] += 1
        tokens += turn.tokens
        if not turn.calls:
            answer = turn.text
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
