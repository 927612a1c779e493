"""The support agent's tool API: orders, the refund policy, refunds and approvals, over HTTP.

A stand-in for a shop's backend, so the example agent has real HTTP tools for forkpoint to
record and replay. Delivery dates are relative to today, so the refund window behaves the same
whenever the demo runs. State lives in memory: an issued refund marks its order refunded.
`POST /approvals` is where a person would approve a large refund; with no one to ask, the
service approves it itself, so the example runs without forkpoint (under `--park`, forkpoint
keeps the request for a person's `forkpoint answer` instead).

    python examples/support_agent/tools_service.py --port 8790
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from typing import Any

from aiohttp import web

from forkpoint.runtime.loop_thread import until_stopped

DEFAULT_PORT = 8790
REFUND_WINDOW_DAYS = 30
POLICY = (
    f"Refunds are available within {REFUND_WINDOW_DAYS} days of delivery, up to the full order "
    "amount. Orders that are not delivered yet, or already refunded, cannot be refunded."
)

# order id -> (item, amount, status, days since delivery or None if not delivered)
_ORDERS: dict[str, tuple[str, float, str, int | None]] = {
    "A1001": ("Trail running shoes", 89.90, "delivered", 12),
    "A1002": ("Espresso machine", 249.00, "shipped", None),
    "A1003": ("Wool scarf", 35.50, "delivered", 45),
    "A1004": ("Desk lamp", 42.00, "refunded", 20),
    "A1005": ("Noise-cancelling headphones", 199.99, "delivered", 3),
}

ORDERS = web.AppKey("orders", dict[str, dict[str, Any]])
REFUNDS = web.AppKey("refunds", list[dict[str, Any]])
APPROVALS = web.AppKey("approvals", list[dict[str, Any]])
# What the service answers an approval request itself: a yes, saying no one was asked.
AUTO_APPROVAL = {"approved": True, "by": "auto-approval", "note": "no one to ask"}


def create_app(today: datetime.date | None = None) -> web.Application:
    """A fresh service: its own copy of the orders, so each app starts with none refunded."""
    today = today or datetime.date.today()
    app = web.Application()
    app[ORDERS] = {
        order_id: _order(order_id, item, amount, status, days, today)
        for order_id, (item, amount, status, days) in _ORDERS.items()
    }
    app[REFUNDS] = []
    app[APPROVALS] = []
    app.router.add_get("/orders/{order_id}", lookup_order)
    app.router.add_get("/refund-policy", refund_policy)
    app.router.add_post("/refunds", issue_refund)
    app.router.add_post("/approvals", approve)
    return app


def _order(
    order_id: str, item: str, amount: float, status: str, days: int | None, today: datetime.date
) -> dict[str, Any]:
    delivered = None if days is None else (today - datetime.timedelta(days=days)).isoformat()
    return {
        "order_id": order_id,
        "item": item,
        "amount": amount,
        "currency": "USD",
        "status": status,
        "delivered_on": delivered,
        "days_since_delivery": days,
    }


async def lookup_order(request: web.Request) -> web.Response:
    order = request.app[ORDERS].get(request.match_info["order_id"].upper())
    if order is None:
        return _error(404, f"no order {request.match_info['order_id']!r}")
    return web.json_response(order)


async def refund_policy(request: web.Request) -> web.Response:
    return web.json_response({"policy": POLICY, "window_days": REFUND_WINDOW_DAYS})


async def issue_refund(request: web.Request) -> web.Response:
    try:
        body = await request.json()
        order_id, amount = str(body["order_id"]).upper(), float(body["amount"])
    except (ValueError, KeyError, TypeError):
        return _error(400, "send JSON with order_id and amount")
    order = request.app[ORDERS].get(order_id)
    if order is None:
        return _error(404, f"no order {order_id!r}")
    if reason := _refusal(order, amount):
        return _error(422, reason)
    refunds = request.app[REFUNDS]
    refund = {
        "refund_id": f"RF-{7001 + len(refunds)}",
        "order_id": order_id,
        "amount": amount,
        "currency": order["currency"],
        "status": "issued",
    }
    refunds.append(refund)
    order["status"] = "refunded"
    return web.json_response(refund, status=201)


async def approve(request: web.Request) -> web.Response:
    """An approval request (what it would do, with its details): approved, as no one is here."""
    try:
        asked = await request.json()
    except ValueError:
        return _error(400, "send the action to approve as JSON")
    request.app[APPROVALS].append(asked)
    return web.json_response(AUTO_APPROVAL)


def _refusal(order: dict[str, Any], amount: float) -> str | None:
    """Why the policy refuses this refund, or None when it allows it."""
    if order["status"] != "delivered":
        return f"order {order['order_id']} is {order['status']}, not delivered"
    if order["days_since_delivery"] > REFUND_WINDOW_DAYS:
        return f"order {order['order_id']} was delivered over {REFUND_WINDOW_DAYS} days ago"
    if not 0 < amount <= order["amount"]:
        return f"amount must be more than 0 and at most {order['amount']}"
    return None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve until SIGINT or SIGTERM; print the URL first, so scripts can read the free port."""
    runner = web.AppRunner(create_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    print(f"support tools serving on http://{bound_host}:{bound_port}", flush=True)
    try:
        await until_stopped()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free one")
    asyncio.run(serve(parser.parse_args(argv).port))


if __name__ == "__main__":
    main()
