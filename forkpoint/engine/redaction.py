"""Secrets never reach the cassette: credentials in headers, query parameters, URLs' userinfo
and request or response bodies are masked before anything is written.

What is a secret is decided by name (`secret_names`: headers in any case, query parameters,
JSON and form fields, multipart text fields), by shape wherever a credential can be written
(`shapes`: any body that is text, whatever its size, header values, routes, error texts), and
by value (`known`): what a request sent as a secret is masked wherever else its exchange holds
it, an upstream's echo of it included. Users name more with `Redaction(names=…)`
(`--redact NAME`). Body fields are masked only where their value is a string, so
`max_tokens: 100` stays as it is; under a name that says secret, credential or password (or
one a user named), every string of an object or list value is (`members`).
A file's bytes (an upload, a body not text) are never changed: masking would corrupt them.

Masking keeps every other byte: a JSON body has only its secret values replaced, in place.
Matching reads the request as masked the same way, so a replay whose key differs from the
recording's still matches.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, unquote_plus, urlencode, urlsplit, urlunsplit

from forkpoint.engine import known, members, multipart, shapes
from forkpoint.engine.encoding import UndecodableBody, decode_body, encode_body, header
from forkpoint.engine.secret_names import QUERY_NAMES, holding, secret_header, secret_name
from forkpoint.models import Chunk, Headers

REDACTED = "[redacted]"
_MASK = members.MASK
_USERINFO = "%5Bredacted%5D"  # the mask, as a URL's userinfo may hold it
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,;:)\]]")
_FORM = re.compile(rb"[\w.~%+\-]+=[^&]*(?:&[\w.~%+\-]+=[^&]*)*")
_TEXT_TYPES = ("text/", "application/json", "application/x-ndjson", "application/xml",
               "application/x-www-form-urlencoded", "application/graphql")  # fmt: skip
_HOLDING_HINTS = (b"secret", b"passw", b"passphrase", b"credential")
_HINTS = (b"token", b"secret", b"passw", b"passphrase", b"key", b"credential", b"auth", b"sig",
          b"cookie", b"bearer", b"jwt")  # fmt: skip
Spans = list[tuple[int, int]]
Search = Callable[[bytes], bool]
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


@functools.lru_cache(maxsize=64)
def _hinted(names: frozenset[str]) -> tuple[tuple[bytes, ...], Search, Search, Search | None]:
    """The hints and member searches of a set of secret names: compiled once, not for each
    exchange's `Redaction` (`knowing` makes one per request)."""
    users = tuple(n.encode() for n in sorted(names))
    hints = (*_HINTS, *users)
    holding = (*_HOLDING_HINTS, *users)
    pairs = [(hint, hint in holding) for hint in hints]
    named = members.named_search(pairs)
    held = members.named_search([(hint, True) for hint in hints if hint in holding])
    return hints, named, held, members.named_or(pairs, shapes.candidates())


@dataclasses.dataclass(frozen=True, slots=True)
class Redaction:
    """The built-in rules, plus `names` (any case) a user says are secret too, and `known`:
    the secret values one exchange's request sent (`request`), in the forms to look for."""

    names: frozenset[str] = frozenset()
    known: tuple[bytes, ...] = ()
    # What a body holding a secret must contain: the rules' word stems and the names; and
    # whether one of them is in what may be the name of a member with a string value, or
    # (`held`: those that may name a member holding secrets) an object or a list.
    hints: tuple[bytes, ...] = dataclasses.field(init=False, repr=False, compare=False)
    named: Search = dataclasses.field(init=False, repr=False, compare=False)
    held: Search = dataclasses.field(init=False, repr=False, compare=False)
    # One pass that says whether a body may hold a secret member or a shape's candidate (None
    # without RE2, or with more names than one automaton takes): most hold neither, and are
    # then read once, not once by each search.
    anything: Search | None = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = frozenset(n.lower() for n in self.names)
        object.__setattr__(self, "names", names)
        hints, named, held, anything = _hinted(names)
        object.__setattr__(self, "hints", hints)
        object.__setattr__(self, "named", named)
        object.__setattr__(self, "held", held)
        object.__setattr__(self, "anything", anything)

    def __reduce__(self) -> tuple[type[Redaction], tuple[frozenset[str], tuple[bytes, ...]]]:
        # what it is made of: its searches are made again (compiled RE2 does not pickle), as
        # the writer process is handed its match settings
        return Redaction, (self.names, self.known)

    def header(self, name: str) -> bool:
        return secret_header(name) or (bool(self.names) and name.lower() in self.names)

    def query(self, name: str) -> bool:
        return name.lower() in self.names or name.lower() in QUERY_NAMES or secret_name(name)

    def field(self, name: str) -> bool:
        return name.lower() in self.names or secret_name(name)

    def holds(self, name: str) -> bool:
        """Whether every string under a member so named is a secret."""
        return name.lower() in self.names or holding(name)

    def request(self, route: str, headers: Headers, body: bytes) -> tuple[Redaction, bytes]:
        """The redaction of one exchange: these rules knowing the secret values its request
        sent (in credential headers, secret query parameters and userinfo, the body's secret
        fields and shapes), and the request's body masked."""
        exchange = self._sending(headers)
        found: list[str | bytes] = []
        if "?" in route or "@" in route:
            parts = urlsplit(route)
            if parts.password:
                found.append(parts.password)
            if parts.query and any(self.query(k) for k, _ in parse_qsl(parts.query)):
                pairs = parse_qsl(parts.query, keep_blank_values=True)
                found += [v for k, v in pairs if self.query(k)]
        plain, encoding, spans = self._body_spans(body, headers)
        for begin, end in spans:  # as sent, as JSON reads it, as a form does
            value = plain[begin:end]
            found += [value, members.name(value), unquote_plus(value.decode("latin-1"))]
        if found:
            exchange = exchange.knowing(known.values(found))
        if exchange.known:
            spans = _joined([*spans, *known.spans(plain, exchange.known)])
        return exchange, _encoded(body, plain, _spliced(plain, spans), encoding)

    def knowing(self, values: tuple[bytes, ...]) -> Redaction:
        """These rules knowing `values` too (a websocket message: its upgrade's and its own)."""
        if not values or set(values) <= set(self.known):
            return self
        merged = sorted({*self.known, *values}, key=lambda form: (-len(form), form))
        return Redaction(self.names, tuple(merged))

    def headers(self, headers: Headers) -> Headers:
        """Credential headers masked whole; in the others, credentials by shape and the known
        values (a JWT in `X-Amzn-Oidc-Data`, a `Location` with the key in its query)."""
        key = (self.names, self.known, headers)
        masked = _MASKED.get(key)
        if masked is None:
            masked = self._headers(headers)
            if _small(headers, self.known):
                _remember(_MASKED, key, masked)
        return masked

    def _headers(self, headers: Headers) -> Headers:
        secret = [self.header(k) for k, _ in headers]
        kept = [v for (_, v), masked in zip(headers, secret, strict=True) if not masked]
        joined = "\n".join(kept).encode("utf-8", "surrogateescape")
        pairs = zip(headers, secret, strict=True)
        if not self._text_spans(joined):
            return tuple([(k, REDACTED) if hit else (k, v) for (k, v), hit in pairs])
        return tuple([(k, REDACTED if hit else self._masked(v)) for (k, v), hit in pairs])

    def _sending(self, headers: Headers) -> Redaction:
        """These rules knowing the secret values a request's headers carry (its credential
        headers' tokens)."""
        key = (self.names, self.known, headers)
        sending = _SENDING.get(key)
        if sending is None:
            sent = [part for k, v in headers if self.header(k) for part in known.header_parts(v)]
            sending = self.knowing(known.values(sent))
            if _small(headers, self.known):
                _remember(_SENDING, key, sending)
        return sending

    def route(self, route: str) -> str:
        """A route or URL with credential query parameters and userinfo masked, and the
        credentials known by shape or value in it."""
        if len(route) > ROUTE_REMEMBERED:
            return self._route(route)
        key = (self.names, self.known, route)
        masked = _ROUTES.get(key)
        if masked is None:
            masked = self._route(route)
            if _small((), self.known):
                _remember(_ROUTES, key, masked, most=ROUTES_REMEMBERED)
        return masked

    def _route(self, route: str) -> str:
        masked = route
        if "?" in route or "@" in route:
            parts = urlsplit(route)
            netloc = parts.netloc
            if "@" in netloc:  # `https://user:pass@host/…`
                netloc = f"{_USERINFO}@{netloc.rpartition('@')[2]}"
            query = parts.query
            if query:
                pairs = parse_qsl(query, keep_blank_values=True)
                if any(self.query(k) for k, _ in pairs):
                    query = urlencode([(k, REDACTED if self.query(k) else v) for k, v in pairs])
            if (netloc, query) != (parts.netloc, parts.query):
                masked = urlunsplit(parts._replace(netloc=netloc, query=query))
        return self._masked(masked) if self.known or len(masked) > 16 else masked

    def body(self, body: bytes, headers: Headers) -> bytes:
        """A body with its secret values masked (JSON members, form and multipart fields,
        shapes, known values), every other byte kept; a body that cannot be read is kept as
        it is."""
        plain, encoding, spans = self._body_spans(body, headers)
        if self.known and plain:
            spans = _joined([*spans, *known.spans(plain, self.known)])
        return _encoded(body, plain, _spliced(plain, spans), encoding)

    def chunks(self, chunks: list[Chunk], headers: Headers) -> list[Chunk]:
        """A stream's chunks with its secret values masked, each chunk at its time: a value
        cut across chunks is masked in the chunk where it begins, and a chunk left with
        nothing is dropped. A compressed stream cannot be cut again where it was: masked,
        it is kept as one chunk, at the first one's time. A stream that is not text (audio, a
        file of unknown length) and one with nothing to mask: `chunks` itself."""
        if not chunks:
            return chunks
        body = b"".join([chunk.data for chunk in chunks])
        if header(headers, "content-encoding"):
            masked = self.body(body, headers)
            return chunks if masked is body else [Chunk(chunks[0].offset_ms, masked)]
        if not _is_text((header(headers, "content-type") or "").lower(), body):
            return chunks
        spans = _joined([*self._spans(body), *known.spans(body, self.known)])
        return _recut(chunks, spans) if spans else chunks

    def text(self, text: str) -> str:
        """A message with the URLs and the credentials in it masked (an upstream's error
        names the URL it failed, and may quote the key it refused)."""
        if "://" in text:
            text = _URL.sub(lambda match: self.route(match.group(0)), text)
        return self._masked(text)

    def _masked(self, text: str) -> str:
        """`text` with the credentials known by shape or value in it masked."""
        raw = text.encode("utf-8", "surrogateescape")
        spans = self._text_spans(raw)
        return _spliced(raw, spans).decode("utf-8", "surrogateescape") if spans else text

    def _text_spans(self, raw: bytes) -> Spans:
        return _joined([*shapes.find(raw), *known.spans(raw, self.known)])

    def _body_spans(self, body: bytes, headers: Headers) -> tuple[bytes, str | None, Spans]:
        """A body as plain bytes (decoded), its content-encoding, and where the secrets its
        rules find are in it; no spans for a body that is not text or cannot be read."""
        encoding = header(headers, "content-encoding") if body else None
        try:
            plain = decode_body(body, encoding) if encoding else body
        except UndecodableBody:
            return body, None, []
        if not plain:
            return plain, encoding, []
        content_type = (header(headers, "content-type") or "").lower()
        if content_type.startswith("application/x-www-form-urlencoded") or (
            not content_type and _FORM.fullmatch(plain)
        ):
            lowered = plain.lower()
            named = self._form(plain) if any(h in lowered for h in self.hints) else []
            return plain, encoding, _joined([*named, *shapes.find(plain)])
        if (bounded := multipart.boundary(content_type)) is not None:
            return plain, encoding, _joined(self._fields(plain, bounded))
        if _is_text(content_type, plain):
            return plain, encoding, self._spans(plain)
        return plain, encoding, []  # a file's bytes: masking would corrupt them

    def _spans(self, plain: bytes) -> Spans:
        """Where `plain`'s secrets are, in order: the string values of its secret members and
        the credentials known by their shape."""
        if self.anything is not None and not self.anything(plain):
            return _joined(shapes.key_blocks(plain))  # found apart: not candidates
        spans = shapes.find(plain)
        if self.named(plain):
            spans += members.strings(plain, self.field)
            if self.held(plain):
                spans += members.held(plain, self.holds)
            if b'\\"' in plain:
                spans += members.carried(plain, self.field)
        return _joined(spans)

    def _form(self, body: bytes) -> Spans:
        """The values of a form's secret fields, where they stand."""
        spans, at = [], 0
        for pair in body.split(b"&"):
            name, sep, _ = pair.partition(b"=")
            decoded = parse_qsl(name.decode("latin-1") + "=", keep_blank_values=True)
            if sep and decoded and self.query(decoded[0][0]) and len(pair) > len(name) + 1:
                spans.append((at + len(name) + 1, at + len(pair)))
            at += len(pair) + 1
        return spans

    def _fields(self, plain: bytes, boundary: str) -> Spans:
        """The secrets of a multipart body's text fields: a field named so, whole; in the
        others, secrets by shape, and in JSON by name. A file's bytes are left alone."""
        spans = []
        for part, at in multipart.fields(plain, boundary):
            end = at + len(part.data)
            if part.name is not None and self.field(part.name) and part.data:
                spans.append((at, end))
            else:
                spans += [(at + b, at + e) for b, e in self._spans(part.data)]
        return spans


DEFAULT = Redaction()

# Header lists masked lately, and the rules knowing the secrets requests' headers carried, by
# the rules and the list: an agent sends the same headers with every request (its key among
# them), and an API often answers with the same ones, so each is worked out once, not once an
# exchange (and the exchanges of an agent share one `Redaction`, immutable). At most
# REMEMBERED lists of each, of at most REMEMBERED_BYTES each: what a process
# remembers stays small whatever its agents send (a list past it is worked out every time).
REMEMBERED = 256
REMEMBERED_BYTES = 16 * 1024
_MASKED: dict[tuple[frozenset[str], tuple[bytes, ...], Headers], Headers] = {}
_SENDING: dict[tuple[frozenset[str], tuple[bytes, ...], Headers], Redaction] = {}


def _small(headers: Headers, values: tuple[bytes, ...]) -> bool:
    """Whether a list and the known values its rules hold are small enough to remember."""
    size = sum(len(k) + len(v) for k, v in headers) + sum(len(value) for value in values)
    return size <= REMEMBERED_BYTES


def _remember(memo: dict[Any, Any], key: Any, value: Any, *, most: int = REMEMBERED) -> None:
    if len(memo) >= most:
        memo.clear()  # any thread may: the next calls work theirs out again
    memo[key] = value


# The longest route whose masking is remembered, for at most ROUTES_REMEMBERED routes and
# upstream URLs, which an agent sends to again and again (with the same key, its rules are
# the same): what a process remembers stays small whatever its agents send.
ROUTE_REMEMBERED = 2048
ROUTES_REMEMBERED = 1024
_ROUTES: dict[tuple[frozenset[str], tuple[bytes, ...], str], str] = {}


def _is_text(content_type: str, plain: bytes) -> bool:
    """Whether a body is text a credential could be written in, not a file's bytes."""
    if not content_type:
        return b"\x00" not in plain[:4096]
    kind = content_type.partition(";")[0].strip()
    return kind.startswith(_TEXT_TYPES) or kind.endswith(("+json", "+xml"))


def _encoded(body: bytes, plain: bytes, masked: bytes, encoding: str | None) -> bytes:
    """`masked` as the body was sent: `body` itself when nothing was masked."""
    if masked is plain or masked == plain:
        return body
    return encode_body(masked, encoding) if encoding else masked


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans in order, overlapping ones joined (a secret member's value may be a key too)."""
    merged: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if merged and begin < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((begin, end))
    return merged


def _spliced(plain: bytes, spans: list[tuple[int, int]]) -> bytes:
    """`plain` with each span replaced by the mask."""
    if not spans:
        return plain
    parts, cursor = [], 0
    for begin, end in spans:
        parts += [plain[cursor:begin], _MASK]
        cursor = end
    parts.append(plain[cursor:])
    return b"".join(parts)


def _recut(chunks: list[Chunk], spans: list[tuple[int, int]]) -> list[Chunk]:
    """`chunks` with each span of their joined bytes replaced by the mask: put where the span
    begins, the rest of it dropped from the chunks it runs on into."""
    recut: list[Chunk] = []
    offset, index = 0, 0  # where the chunk begins in the joined bytes; the first span not done
    for chunk in chunks:
        data, end = chunk.data, offset + len(chunk.data)
        parts, cursor = [], offset
        while index < len(spans) and spans[index][0] < end:
            begin, stop = spans[index]
            if begin >= cursor:  # it begins in this chunk
                parts += [data[cursor - offset : begin - offset], _MASK]
            cursor = max(cursor, min(stop, end))
            if stop > end:
                break  # it runs on into the next chunk
            index += 1
        parts.append(data[cursor - offset :])
        kept = b"".join(parts)
        if kept:
            recut.append(Chunk(chunk.offset_ms, kept))
        offset = end
    return recut


def end_to_end(headers: Headers, *, drop: frozenset[str] = frozenset()) -> Headers:
    """The headers to pass on to the next hop: hop-by-hop ones (and those that `Connection`
    names) removed, plus any in `drop`."""
    names = [k.lower() for k, _ in headers]
    skip = _skipped(drop)
    if "connection" in names:
        skip = skip | {
            token.strip().lower()
            for name, (_, v) in zip(names, headers, strict=True)
            if name == "connection"
            for token in v.split(",")
        }
    return tuple([pair for name, pair in zip(names, headers, strict=True) if name not in skip])


@functools.lru_cache(maxsize=16)
def _skipped(drop: frozenset[str]) -> frozenset[str]:
    return HOP_BY_HOP | drop
