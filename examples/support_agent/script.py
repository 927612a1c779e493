"""The model's side of the support agent, scripted, so the example runs offline and free.

`support_script` plays a model that works a refund ticket the way a good one would: look the
order up, read the refund policy, issue the refund if the order qualifies, then answer (naming
who approved a refund that needed approval, or why it was not issued). It
decides from what the tools returned (the history), not from a fixed order, so a ticket for an
ineligible order skips the refund. The answer's wording depends on the model name: "mini" and
"nano" models are terse, others chatty, so a fork with `--model` shows in the output.
"""

from __future__ import annotations

import json
import re
from typing import Any

from forkpoint.testing.script import Prompt, Reply, ToolCallSpec

ORDER_ID = re.compile(r"\b[A-Z]\d{4}\b")


def support_script(prompt: Prompt) -> Reply:
    """The next model turn for the support agent's conversation so far."""
    ticket = next((m.text for m in prompt.messages if m.role == "user"), "")
    found = ORDER_ID.search(ticket.upper())
    if found is None:
        return Reply(text="Could you tell me your order number (it looks like A1001)?")
    order_id = found.group()
    results = _tool_results(prompt)
    if "lookup_order" not in results:
        return _call("lookup_order", order_id=order_id)
    order = results["lookup_order"]
    if "error" in order:
        return Reply(text=f"I could not find order {order_id}: {order['error']}.")
    if "refund_policy" not in results:
        return _call("refund_policy")
    refusal = _refusal(order, results["refund_policy"])
    if refusal is None and "issue_refund" not in results:
        return _call("issue_refund", order_id=order_id, amount=order["amount"])
    refund = results.get("issue_refund")
    if refund is not None and "error" in refund:
        refusal = refund["error"]
    terse = any(size in prompt.model for size in ("mini", "nano"))
    return Reply(text=_answer(order, refund, refusal, terse=terse))


def _call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=(ToolCallSpec(name, arguments),))


def _tool_results(prompt: Prompt) -> dict[str, dict[str, Any]]:
    """The latest result of each tool, parsed; a non-JSON result reads as an error."""
    results: dict[str, dict[str, Any]] = {}
    for message in prompt.messages:
        if message.tool_name and message.tool_result is not None:
            try:
                parsed = json.loads(message.tool_result)
            except ValueError:
                parsed = {"error": message.tool_result}
            results[message.tool_name] = parsed if isinstance(parsed, dict) else {}
    return results


def _refusal(order: dict[str, Any], policy: dict[str, Any]) -> str | None:
    """Why the policy rules the order out, or None when it may be refunded."""
    if order.get("status") != "delivered":
        return f"the order is {order.get('status', 'in an unknown state')}, not delivered"
    days, window = order.get("days_since_delivery"), policy.get("window_days", 30)
    if days is None or days > window:
        return f"it was delivered {days} days ago, outside the {window}-day refund window"
    return None


def _answer(
    order: dict[str, Any], refund: dict[str, Any] | None, refusal: str | None, *, terse: bool
) -> str:
    order_id, amount = order["order_id"], f"${order['amount']:.2f}"
    if refusal is None and refund is not None:
        approved = f", approved by {refund['approved_by']}" if refund.get("approved_by") else ""
        issued = f"{refund['refund_id']}{approved}"
        if terse:
            return f"Refund of {amount} issued for order {order_id} ({issued})."
        return (
            f"Good news! Order {order_id} ({order['item']}) was delivered "
            f"{order['days_since_delivery']} days ago, which is within our refund window, so "
            f"I have issued a full refund of {amount} (refund {issued}). "
            "It should reach your original payment method within 5-10 business days."
        )
    if terse:
        return f"No refund for order {order_id} ({amount}): {refusal}."
    return (
        f"I'm sorry, but I can't refund order {order_id} ({order['item']}, {amount}): "
        f"{refusal}. If something is wrong with the item, reply and I'll look into other options."
    )
