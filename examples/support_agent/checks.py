"""Checks for `forkpoint experiment --check`: did the support agent decide by the policy?

    forkpoint experiment --select label:batch=demo --at first-llm --model gpt-4o-mini \\
        --check examples.support_agent.checks:refund_follows_policy -- ...

A check gets a `forkpoint.compare.experiment_check.CheckRun` (the run, its exchanges, its
parent) and returns True or False (or a score). This one reads what the tools answered in the
run itself (the order, the policy) rather than a copy of the rules, so a fork that mocks a
stricter policy is judged by the policy its agent was shown.
"""

from __future__ import annotations

import json
from typing import Any

from forkpoint.compare.experiment_check import CheckRun


def refund_follows_policy(run: CheckRun) -> bool:
    """True when a refund was issued exactly when the policy allows it, for at most the order's
    amount: the order was delivered (not shipped, not refunded already) within the window."""
    orders = [
        o for o in run.responses("*/orders/*", "GET") if isinstance(o, dict) and "status" in o
    ]
    if not orders:
        return False  # a decision taken without looking the order up follows no policy
    order = orders[0]  # as the agent found it, before any refund of its own
    policies = [p for p in run.responses("*/refund-policy", "GET") if isinstance(p, dict)]
    window = policies[-1].get("window_days", 30) if policies else 30
    refunds = [_arguments(c.arguments) for c in run.tool_calls if c.name == "issue_refund"]
    allowed = _allowed(order, window)
    if not refunds:
        return not allowed
    return allowed and all(float(r.get("amount", 0)) <= order["amount"] for r in refunds)


def _allowed(order: dict[str, Any], window: int) -> bool:
    days = order.get("days_since_delivery")
    return order.get("status") == "delivered" and days is not None and days <= window


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
