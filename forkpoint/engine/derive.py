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
from forkpoint.engine.matching import MatchConfig, fingerprint, raw_fingerprint
from forkpoint.models import Exchange, Kind, Summary


def derive(
    exchange: Exchange, match: MatchConfig, *, fell_back: Callable[[str], None] | None = None
) -> Exchange:
    """Fill in the summary and fingerprint an exchange lacks; returns it. Its request is as
    recorded, secrets masked already. Never raises: `fell_back` hears what could not be read
    (a user's normalizer that fails, JSON too deep to parse again)."""
    if exchange.summary is None:
        try:
            exchange.summary = summarize_exchange(exchange)
        except Exception as error:  # recorded as a generic exchange instead
            exchange.summary = Summary(kind=Kind.OTHER, dialect="generic")
            if fell_back is not None:
                fell_back(f"its summary ({type(error).__name__}: {error})")
    if not exchange.fingerprint:
        try:
            exchange.fingerprint = fingerprint(
                exchange.method, exchange.route, exchange.asked, exchange.request_headers,
                match, masked=True,
            )  # fmt: skip
        except Exception as error:  # matched by its bytes instead
            exchange.fingerprint = raw_fingerprint(exchange.method, exchange.route, exchange.asked)
            if fell_back is not None:
                fell_back(f"its fingerprint ({type(error).__name__}: {error})")
    return exchange
