"""Which names hold a credential: headers, query parameters, body fields.

Rules rather than a closed list, since every API names its keys its own way
(`X-Subscription-Token`, `Ocp-Apim-Subscription-Key`, `?sig=`, `"client_secret"`): a name is
split into words (`-`, `_`, `.`, camelCase) and is a secret when a word says so (token, secret,
password, signature, credential…) or ends so (`accesstoken`, `clientsecret`: a name written
in lowercase has no camelCase to split it), or when it ends in `key` after a word that makes it
a credential (`api-key`, `x-functions-key`, `x-rapidapi-key`, `subscription-key`).

A header's name is judged in lowercase only (Node and HTTP/2 send every name so), and any
header ending in `-key` is a secret but an ordinary few (`idempotency-key`); a few say nothing
of what they hold and are named here (`X-Honeycomb-Team`).
"""

from __future__ import annotations

import functools
import re

_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "passphrase", "apikey", "credential",
     "credentials", "signature", "sig", "sign", "auth", "authorization", "cookie", "bearer",
     "jwt"}
)  # fmt: skip
# What a word may end in and still say secret (`accesstoken`, `clientsecret`, `hapikey`), where
# `auth` and `sig` may not (`oauth`).
_SECRET_ENDINGS = (
    "token", "secret", "password", "passwd", "passphrase", "apikey", "credential",
    "credentials", "signature", "authorization", "cookie",
)  # fmt: skip
# `…-key` is a credential after a word that ends so (`x-api-key`, `x-rapidapi-key`, not
# `idempotency-key`).
_KEY_WORDS = (
    "api", "access", "secret", "private", "subscription", "functions", "auth", "client",
    "master", "account", "signing", "license", "admin", "goog", "app", "application",
    "consumer", "encryption", "session",
)  # fmt: skip
# A header `…-key` that holds no credential
_PLAIN_KEYS = frozenset(
    {"idempotency", "cache", "websocket", "dedupe", "dedup", "deduplication", "partition",
     "sort", "routing", "public", "primary", "foreign", "group", "object", "prompt", "request",
     "trace", "correlation", "message", "event"}
)  # fmt: skip
_HEADERS = frozenset({"x-honeycomb-team"})  # names that say nothing of what they hold
QUERY_NAMES = frozenset({"key", "code", "apikey", "appid"})  # Google, Azure, OpenWeatherMap
_HOLDING = frozenset(
    {"secret", "secrets", "password", "passwd", "passphrase", "credential", "credentials"}
)  # fmt: skip
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_SEPARATED = re.compile(r"[a-z0-9]+")


def words(name: str) -> list[str]:
    """A name's words, split at separators and camelCase, in lowercase."""
    return [word.lower() for word in _WORD.findall(name)]


def _says_secret(split: list[str]) -> bool:
    if any(word in _SECRET_WORDS or word.endswith(_SECRET_ENDINGS) for word in split):
        return True
    if not split or not split[-1].endswith("key"):
        return False
    stem = split[-1].removesuffix("key")
    before = stem if stem else (split[-2] if len(split) > 1 else "")
    return bool(before) and before.endswith(_KEY_WORDS)


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Whether a query parameter or body field named `name` holds a credential."""
    return _says_secret(words(name)) or _says_secret(_SEPARATED.findall(name.lower()))


@functools.lru_cache(maxsize=4096)
def secret_header(name: str) -> bool:
    """Whether a header named `name`, in any case, holds a credential."""
    lowered = name.lower()
    split = _SEPARATED.findall(lowered)
    if lowered in _HEADERS or _says_secret(split):
        return True
    return bool(split) and split[-1] == "key" and (len(split) < 2 or split[-2] not in _PLAIN_KEYS)


def holding(name: str) -> bool:
    """Whether a name says every string under it is a secret (secret, credential, password;
    not `auth` or `token`, which name schemes and counts too)."""
    return any(word in _HOLDING for word in words(name))
