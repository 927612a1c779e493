"""Secret values known from a request, looked for wherever else its exchange holds them.

An upstream may give a credential back where no name or shape says what it is: a debugging
endpoint that echoes its request, an error quoting the key it refused, a `Location` with the
query in it, a websocket's greeting naming its token. Once a value is known to be a secret
(sent in a credential header, a secret query parameter, a secret body field, or found by its
shape), the exchange's records are masked of it everywhere: the request's other parts and the
response's headers, body, chunks, messages and error.

A value is looked for as it was sent and as it is written once escaped (JSON, `\\/`, a URL's
`%2F` or `+`), each with `bytes.find`, so a body holding none of them costs one pass per form;
it is masked where it stands alone (not inside a longer word, not inside a number). Values
shorter than `SHORTEST`, or that read as a word (no digit, one case, under 16 characters), are
masked where they are named but not looked for elsewhere: they would be found in ordinary text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

import orjson

Spans = list[tuple[int, int]]
SHORTEST = 8
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_PAIRS = re.compile(r"[;,]")


def header_parts(value: str) -> list[str]:
    """The credentials a credential header's value holds: the token after its scheme
    (`Bearer …`; for `Basic`, also the password it encodes), each value of a list of pairs
    (cookies, `Credential=…, Signature=…`), else the value itself."""
    value = value.strip()
    scheme, space, rest = value.partition(" ")
    if space and scheme.isalpha() and rest.strip() and "=" not in scheme:
        token = rest.strip()
        parts = [token]
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(token, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return parts
            return [*parts, decoded, decoded.partition(":")[2]]
        return parts
    if "=" in value:
        pairs = [pair.partition("=") for pair in _PAIRS.split(value)]
        return [pair[2].strip().strip('"') for pair in pairs if pair[1]]
    return [value]


def values(found: Iterable[str | bytes]) -> tuple[bytes, ...]:
    """The forms to look for of the secret values in `found`, longest first: as sent, and as
    JSON or a URL would write them."""
    forms: set[bytes] = set()
    for value in found:
        forms.update(_remembered(value) if len(value) <= REMEMBERED else _forms(value))
    return tuple(sorted(forms, key=lambda form: (-len(form), form)))


# The longest value whose forms are remembered (a key sent with every request is); at most
# 1,024 of them, so what a process remembers stays small whatever its agents send.
REMEMBERED = 512


def _forms(value: str | bytes) -> tuple[bytes, ...]:
    raw = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    if not _worth_looking_for(raw):
        return ()
    text = raw.decode("utf-8", "surrogateescape")
    json = orjson.dumps(text)[1:-1] if text.isprintable() else raw
    quoted = (quote(text, safe="").encode(), quote_plus(text, safe="").encode())
    return (raw, json, json.replace(b"/", b"\\/"), *quoted)


# the forms of a value an agent sends with every request (its key), worked out once
_remembered = functools.lru_cache(maxsize=1024)(_forms)


def _worth_looking_for(raw: bytes) -> bool:
    if len(raw) < SHORTEST:
        return False
    if len(raw) >= 16 or any(c in b"0123456789" for c in raw):
        return True
    return raw.lower() != raw and raw.upper() != raw  # both cases


def spans(plain: bytes, known: tuple[bytes, ...]) -> Spans:
    """Where the known values stand alone in `plain`."""
    found = []
    for form in known:
        at = plain.find(form)
        while at >= 0:
            end = at + len(form)
            if _alone(plain, at, end, form):
                found.append((at, end))
            at = plain.find(form, at + 1)
    return found


def _alone(plain: bytes, begin: int, end: int, form: bytes) -> bool:
    """Not part of a longer word or number: the bytes around a value that begins or ends with
    a letter or digit are not ones."""
    if form[0] in _ALNUM and begin and plain[begin - 1] in _ALNUM:
        return False
    return not (form[-1] in _ALNUM and end < len(plain) and plain[end] in _ALNUM)
