"""Secrets never reach the cassette: credential headers and query parameters are masked.

Redaction runs before fingerprinting, so a replay without credentials matches a recording
made with them.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from forkpoint.models import Headers

REDACTED = "[redacted]"
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
    }
)
CREDENTIAL_QUERY = frozenset({"key", "api_key", "api-key", "access_token"})
# Connection-level headers (RFC 9110 §7.6.1): they describe one hop, never the message.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


def redact_headers(headers: Headers, names: frozenset[str] = CREDENTIAL_HEADERS) -> Headers:
    return tuple([(k, REDACTED) if k.lower() in names else (k, v) for k, v in headers])


def redact_route(route: str, names: frozenset[str] = CREDENTIAL_QUERY) -> str:
    if "?" not in route:
        return route
    parts = urlsplit(route)
    if not parts.query:
        return route
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(k.lower() in names for k, _ in pairs):
        return route
    query = urlencode([(k, REDACTED if k.lower() in names else v) for k, v in pairs])
    return urlunsplit(parts._replace(query=query))


def end_to_end(headers: Headers, *, drop: frozenset[str] = frozenset()) -> Headers:
    """The headers to pass on to the next hop: hop-by-hop ones (and those that `Connection`
    names) removed, plus any in `drop`."""
    names = [k.lower() for k, _ in headers]
    skip = HOP_BY_HOP | drop
    if "connection" in names:
        skip |= {
            token.strip().lower()
            for name, (_, v) in zip(names, headers, strict=True)
            if name == "connection"
            for token in v.split(",")
        }
    return tuple([pair for name, pair in zip(names, headers, strict=True) if name not in skip])
