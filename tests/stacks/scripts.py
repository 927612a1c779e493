"""What the scripted model answers in the stack tests: one support task, whatever the stack.

The plan is a list of tool calls; the model makes the next planned call among the tools the
request offers that the history has no result for, then answers from the results. A framework
that hands off between agents (the Agents SDK) sees the same plan through each agent's tools.
The answer names the model, so a fork with a swapped model shows in the output.
"""

from __future__ import annotations

import json

from forkpoint.testing.upstream import Prompt, Reply, ToolCallSpec

ORDER = "A1001"
PLAN = (
    ToolCallSpec("lookup_order", {"order_id": ORDER}),
    ToolCallSpec("transfer_to_billing", {}),
    ToolCallSpec("issue_refund", {"order_id": ORDER}),
)


def support_script(prompt: Prompt) -> Reply:
    done = {m.tool_name for m in prompt.messages if m.tool_result is not None}
    for call in PLAN:
        if call.name in prompt.tools and call.name not in done:
            return Reply(tool_calls=(call,))
    results = " / ".join(prompt.tool_results)
    return Reply(text=f"[{prompt.model}] Refund for {ORDER} done: {results}")


def structured_script(prompt: Prompt) -> Reply:
    """Look the order up when the tool is offered, then answer in the requested JSON schema."""
    done = {m.tool_name for m in prompt.messages if m.tool_result is not None}
    if "lookup_order" in prompt.tools and "lookup_order" not in done:
        return Reply(tool_calls=(PLAN[0],))
    if prompt.output_schema is None:
        return Reply(text="no schema was asked for")  # the test's parse then fails, loudly
    status = prompt.tool_results[-1] if prompt.tool_results else "not looked up"
    decision = {"order_id": ORDER, "status": status, "refund": True, "answered_by": prompt.model}
    return Reply(text=json.dumps(decision))
