"""What is read off a finished exchange rather than seen on the wire: its summary (model,
usage, tool calls, text) and its request's fingerprint.

The live path leaves both to the recorder, off the event loop: a summary decodes and parses
the body, a fingerprint canonicalizes the request's JSON.
"""

from __future__ import annotations

from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.matching import MatchConfig, fingerprint
from forkpoint.models import Exchange


def derive(exchange: Exchange, match: MatchConfig) -> Exchange:
    """Fill in the summary and fingerprint an exchange lacks; returns it. Its request is as
    recorded, secrets masked already."""
    if exchange.summary is None:
        exchange.summary = summarize_exchange(exchange)
    if not exchange.fingerprint:
        exchange.fingerprint = fingerprint(
            exchange.method, exchange.route, exchange.request_body, exchange.request_headers,
            match, masked=True,
        )  # fmt: skip
    return exchange
