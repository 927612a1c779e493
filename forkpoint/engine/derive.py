"""What is read off a finished exchange rather than seen on the wire: its summary (model,
usage, tool calls, text) and its request's fingerprint.

The live path leaves both to the recorder, off the event loop: a summary decodes and parses
the body, a fingerprint canonicalizes the request's JSON. Neither may cost the exchange its
place on record: what cannot be read is summarized as a generic exchange and matched by its
bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.dialects._read import loads
from forkpoint.engine.encoding import UNREAD, header
from forkpoint.engine.matching import MatchConfig, fingerprint, raw_fingerprint
from forkpoint.models import Exchange, Kind, Summary


def derive(
    exchange: Exchange, match: MatchConfig, *, fell_back: Callable[[str], None] | None = None
) -> Exchange:
    """Fill in the summary and fingerprint an exchange lacks; returns it. Its request is as
    recorded, secrets masked already. Never raises: `fell_back` hears what could not be read
    (a user's normalizer that fails, JSON too deep to parse again)."""
    both = exchange.summary is None and not exchange.fingerprint
    parsed = _request_json(exchange) if both else UNREAD
    if exchange.summary is None:
        try:
            exchange.summary = summarize_exchange(exchange, parsed)
        except Exception as error:  # recorded as a generic exchange instead
            exchange.summary = Summary(kind=Kind.OTHER, dialect="generic")
            if fell_back is not None:
                fell_back(f"its summary ({type(error).__name__}: {error})")
    if not exchange.fingerprint:
        try:
            exchange.fingerprint = fingerprint(
                exchange.method, exchange.route, exchange.asked, exchange.request_headers,
                match, masked=True, parsed=parsed,
            )  # fmt: skip
        except Exception as error:  # matched by its bytes instead
            exchange.fingerprint = raw_fingerprint(exchange.method, exchange.route, exchange.asked)
            if fell_back is not None:
                fell_back(f"its fingerprint ({type(error).__name__}: {error})")
    return exchange


def _request_json(exchange: Exchange) -> object:
    """The request body's JSON value (None: not JSON), read once for both the summary and the
    fingerprint where they read the same bytes: the body went upstream as its agent sent it
    (no fork rewrote it) and is not content-encoded. Else `UNREAD`: each reads its own."""
    body = exchange.request_body
    if exchange.asked_body is not None or header(exchange.request_headers, "content-encoding"):
        return UNREAD
    return loads(body) if body else None
