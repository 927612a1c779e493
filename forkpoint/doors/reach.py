"""Who can reach a proxy: whether the address it binds is beyond this machine, and the token
it then requires (`forkpoint.doors.auth` checks it). Plain functions, no aiohttp: a command
computes the token before it starts its agent, and before it imports the proxy.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets

TOKEN_HEADER = "X-Forkpoint-Token"
TOKEN_PREFIX = "/t/"
LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address, as written: a name is not resolved (it could
    resolve elsewhere by the time it is used)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_for(host: str, given: str | None) -> tuple[str | None, bool]:
    """The token a proxy listening on `host` requires, and whether it was made up here:
    `given`; else, beyond loopback, a new one (the caller shows it to its user)."""
    if given:
        return given, False
    if is_loopback(host):
        return None, False
    return secrets.token_urlsafe(24), True


def same(presented: str, token: str) -> bool:
    return hmac.compare_digest(presented.encode(), token.encode())
