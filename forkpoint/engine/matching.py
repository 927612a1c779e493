"""Request fingerprints for replay, in two tiers.

The exact fingerprint is method + route + normalized body: JSON keys sorted, ignored fields
dropped (`--ignore`), user normalizers applied in order (`--normalize`). A multipart body is
read part by part, since its boundary is new on every request. Normalizers are plain functions
in a tuple, so a user adds one without subclassing anything.

The similar fingerprint is the exact one's input with what a client generates set aside (ids,
times, directories: `engine.generated`). It is only computed when the exact one finds nothing,
so the live path and an exact replay pay nothing for it.

A request body too large to hold (`engine.pieces.in_pieces`: an upload) is matched by its
bytes as recorded, a multipart boundary set aside (`Digest`), read as it passes: the doors
never hold it whole, and a body read whole (from a file) gets the same fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import orjson

from forkpoint.engine import fields, generated, mcp, multipart
from forkpoint.engine.encoding import UNREAD, UndecodableBody, decode_body, header
from forkpoint.engine.generated import DIGEST
from forkpoint.engine.optional import DEFAULT_OPTIONAL
from forkpoint.engine.pieces import Eraser, in_pieces
from forkpoint.engine.redaction import DEFAULT as DEFAULT_REDACTION
from forkpoint.engine.redaction import Redaction
from forkpoint.models import Exchange, Headers

# (method, route, parsed JSON body) -> the body to fingerprint
Normalizer = Callable[[str, str, Any], Any]


# Fields that change between two runs of the same agent without changing what it asks: the
# OpenAI Agents SDK sends a random `prompt_cache_key` per run when talking to api.openai.com.
DEFAULT_VOLATILE = ("prompt_cache_key",)
MULTIPART = "multipart/form-data"
TEXT = "body (text)"
IN_PIECES = "body (in pieces)"


@dataclass(frozen=True, slots=True)
class MatchConfig:
    """How requests are matched.

    `volatile_fields`: JSON paths the exact tier drops (`engine.fields`). `normalizers`: applied
    in order to every body. `optional_routes`: `[METHOD ]GLOB`s of side calls that are answered
    with an empty success when the recording lacks them (`engine.optional`). `redaction` says
    which values are secrets: masked before matching, so a replay with another key matches a
    recording made with this one.
    """

    volatile_fields: tuple[str, ...] = DEFAULT_VOLATILE
    normalizers: tuple[Normalizer, ...] = ()
    optional_routes: tuple[str, ...] = DEFAULT_OPTIONAL
    redaction: Redaction = DEFAULT_REDACTION


def normalized_route(route: str) -> str:
    """Path plus query parameters in sorted order, so `?b=1&a=2` matches `?a=2&b=1`."""
    parts = urlsplit(route)
    if not parts.query:
        return parts.path
    return f"{parts.path}?{urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))}"


def parse_json(body: bytes, content_encoding: str | None = None) -> Any:
    """The JSON value of a body, or None when it is not JSON (or not decodable)."""
    if not body:
        return None
    try:
        return orjson.loads(decode_body(body, content_encoding))
    except (orjson.JSONDecodeError, UndecodableBody):
        return None


def body_value(body: bytes, content_encoding: str | None, content_type: str | None) -> Any:
    """What matching reads of a body: its JSON value; a multipart body's parts
    (`{"multipart/form-data": [...]}`); else None (the bytes are matched as they are)."""
    value = parse_json(body, content_encoding)
    if value is not None:
        return value
    mark = multipart.boundary(content_type)
    if mark is None:
        return None
    try:
        found = multipart.parts(decode_body(body, content_encoding), mark)
    except UndecodableBody:
        return None
    return None if found is None else {MULTIPART: [part.comparable() for part in found]}


def normalized_body(method: str, route: str, value: Any, config: MatchConfig) -> Any:
    value = mcp.comparable(value)  # a JSON-RPC message without its ids
    for path in config.volatile_fields:
        value = fields.drop(value, path)
    for normalizer in config.normalizers:
        value = normalizer(method, route, value)
    return value


def fingerprint(
    method: str,
    route: str,
    body: bytes,
    headers: Headers = (),
    config: MatchConfig = MatchConfig(),
    *,
    masked: bool = False,
    parsed: Any = UNREAD,
) -> str:
    """What a request is matched by, whatever its body's Content-Encoding: its method, route
    and normalized body, secrets masked (`masked`: they are already, as decide records it).
    `parsed`: with `masked`, the JSON value of `body` as it is (it has no Content-Encoding),
    where the caller read it already (`engine.derive`); a user's normalizer may change it."""
    if not masked:
        body = config.redaction.body(body, headers)
    if in_pieces(headers, body):  # as the door reads it as it passes
        passing = Digest(method, route, headers)
        passing.update(body)
        return passing.hexdigest()
    if masked and parsed is not UNREAD and parsed is not None:
        value, encoding = parsed, None  # read from the body as it is: not content-encoded
    else:
        encoding = header(headers, "content-encoding")
        value = body_value(body, encoding, header(headers, "content-type"))
    if value is None and config.normalizers:  # a text body is normalized as text
        value = _text(body, encoding)
    canonical = None if value is None else _canonical(normalized_body(method, route, value, config))
    if canonical is None:  # not JSON, or JSON nested too deep to write back: its bytes
        return raw_fingerprint(method, route, body)
    digest = hashlib.sha256(f"{method.upper()} {normalized_route(route)}\n".encode())
    digest.update(b"json:" + canonical)
    return digest.hexdigest()


def raw_fingerprint(method: str, route: str, body: bytes) -> str:
    """The fingerprint of a request matched by its bytes as they are."""
    digest = hashlib.sha256(f"{method.upper()} {normalized_route(route)}\n".encode())
    digest.update(b"raw:" + body)
    return digest.hexdigest()


class Digest:
    """The fingerprint of a request body in pieces, fed its bytes as recorded as they pass:
    its method and route, then the body with a multipart boundary taken out (a client draws a
    new one for each upload, of the same length), so an upload of the same file matches."""

    def __init__(self, method: str, route: str, headers: Headers):
        self._digest = hashlib.sha256(f"{method.upper()} {normalized_route(route)}\n".encode())
        self._digest.update(b"pieces:")
        mark = multipart.boundary(header(headers, "content-type"))
        self._eraser = None if mark is None else Eraser(b"--" + mark.encode())

    def update(self, data: bytes) -> None:
        self._digest.update(data if self._eraser is None else self._eraser.feed(data))

    def hexdigest(self) -> str:
        if self._eraser is not None:
            self._digest.update(self._eraser.close())
        return self._digest.hexdigest()


def _canonical(value: Any) -> bytes | None:
    """`value` as JSON with its keys sorted; None when it nests deeper than orjson writes
    (it reads 1,024 levels, writes 254)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (TypeError, RecursionError):
        return None


def fingerprint_exchange(exchange: Exchange, config: MatchConfig) -> str:
    """The fingerprint of a recorded exchange's request as its agent sent it (one in pieces:
    as recorded, read off the whole body as it passed)."""
    if exchange.request_pieces:
        return exchange.fingerprint
    return fingerprint(
        exchange.method, exchange.route, exchange.asked, exchange.request_headers, config
    )


def similar_fingerprint(method: str, route: str, value: Any) -> str:
    """The fingerprint of a request (its `comparable` body) with what its client generates set
    aside: two requests that differ only in ids, times, directories and the proxy's port have
    the same one."""
    masked_route = generated.masked_route(normalized_route(route))
    digest = hashlib.sha256(f"{method.upper()} {masked_route}\n".encode())
    digest.update(orjson.dumps(generated.masked(route, value), option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()


def comparable(method: str, route: str, body: bytes, headers: Headers, config: MatchConfig) -> Any:
    """What matching sees of a body, as a value a diff can show: the normalized JSON (or
    parts), else the body as text where it is text, else its size and digest."""
    body = config.redaction.body(body, headers)
    if in_pieces(headers, body):
        return _in_pieces(len(body), fingerprint(method, route, body, headers, config, masked=True))
    encoding = header(headers, "content-encoding")
    value = body_value(body, encoding, header(headers, "content-type"))
    if value is not None and _canonical(value) is None:
        value = None  # JSON nested deeper than can be written back: read as its text
    if value is None:
        value = _text(body, encoding)
    if value is not None:
        return normalized_body(method, route, value, config)
    return {"body (binary)": {"size": len(body), DIGEST: hashlib.sha256(body).hexdigest()}}


def comparable_exchange(exchange: Exchange, config: MatchConfig) -> Any:
    if exchange.request_pieces:  # its fingerprint is the whole body's
        return _in_pieces(exchange.request_size, exchange.fingerprint)
    return comparable(
        exchange.method, exchange.route, exchange.asked, exchange.request_headers, config
    )


def _in_pieces(size: int, key: str) -> dict[str, dict[str, object]]:
    """What matching and a report see of a body in pieces: its size and digest."""
    return {IN_PIECES: {"size": size, DIGEST: key}}


def _text(body: bytes, content_encoding: str | None) -> dict[str, str] | None:
    """A body that is text, as `{"body (text)": text}`; None for bytes that are not."""
    try:
        return {TEXT: decode_body(body, content_encoding).decode()}
    except (UndecodableBody, UnicodeDecodeError):
        return None
