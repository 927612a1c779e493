"""Secrets never reach the cassette: credentials in headers, query parameters, URLs' userinfo
and request or response bodies are masked before anything is written.

What is a secret is decided by name, with rules rather than a closed list, since every API
names its keys its own way (`X-Subscription-Token`, `Ocp-Apim-Subscription-Key`, `?sig=`,
`"client_secret"`): a name is split into words (`-`, `_`, `.`, camelCase) and is a secret when
a word says so (token, secret, password, signature, credential…), or it ends in `key` after a
word that makes it a credential (`api-key`, `x-functions-key`, `subscription-key`). Users name
more with `Redaction(names=…)` (`--redact NAME`). Body fields are masked only where their
value is a string, so `max_tokens: 100` stays as it is; under a name that says secret,
credential or password (or one a user named), every string of an object or list value is.

A credential is also known by its shape, where no name says what it is (a key pasted into a
prompt, a token a tool printed): the formats their issuers publish (`sk-…`, `AKIA…`, `ghp_…`,
a JWT, a private key block), in any body that is text, up to SHAPED_MAX, and in error texts.
A file's bytes (an upload, a body not text) are never changed: masking would corrupt them.

Masking keeps every other byte: a JSON body has only its secret values replaced, in place.
Matching reads the request as masked the same way, so a replay whose key differs from the
recording's still matches.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from forkpoint.engine.encoding import UndecodableBody, decode_body, encode_body, header
from forkpoint.models import Chunk, Headers

REDACTED = "[redacted]"
_MASK = REDACTED.encode()
_USERINFO = "%5Bredacted%5D"  # the mask, as a URL's userinfo may hold it
_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "apikey", "credential", "credentials",
     "signature", "sig", "auth", "authorization", "cookie"}
)  # fmt: skip
# `…-key` is a credential after these words (`x-api-key`, not `idempotency-key`).
_KEY_WORDS = frozenset(
    {"api", "access", "secret", "private", "subscription", "functions", "auth", "client",
     "master", "account", "signing", "license", "admin", "goog"}
)  # fmt: skip
_QUERY_NAMES = frozenset({"key", "code", "apikey"})  # `?key=` (Google), `?code=` (Azure)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# A JSON member whose value is a string: its name, the separator, the string.
_MEMBER = re.compile(rb'"((?:[^"\\]|\\.){1,80})"(\s*:\s*)"((?:[^"\\]|\\.)*)"')
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,;:)\]]")
_FORM = re.compile(rb"[\w.~%+\-]+=[^&]*(?:&[\w.~%+\-]+=[^&]*)*")
# The published formats, in seven patterns that each begin with a literal, so `re` scans for
# them at memchr speed (about 2-3 ns a byte for them all), and bounded on both sides (`_shapes`)
# so no longer word and no base64 run is cut. A body over SHAPED_MAX (an image, mostly) is
# not scanned.
_SHAPES = tuple(
    re.compile(pattern, re.DOTALL)
    for pattern in (
        # from the `k` of OpenAI's and Anthropic's `sk-…` and Stripe's `sk_live_…`, `rk_test_…`
        rb"k(?:-(?:ant-|proj-|svcacct-|admin-)?[\w-]{20,}|_(?:live|test)_[A-Za-z0-9]{16,})(?![\w-])",
        rb"A(?:KIA[0-9A-Z]{16}|SIA[0-9A-Z]{16}|Iza[\w-]{35})(?![\w-])",  # AWS key ids, Google
        rb"ek_[A-Za-z0-9]{20,}(?![\w-])",  # OpenAI's ephemeral (realtime) keys
        rb"gh(?:[pousr]_[A-Za-z0-9]{36,}|ithub_pat_\w{22,})(?![\w-])",  # GitHub
        rb"xox[abposr]-[A-Za-z0-9-]{10,}(?![\w-])",  # Slack
        rb"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}(?![\w-])",  # a JWT
        rb"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
    )
)
_KEYS = _SHAPES[0]  # found from their second letter: `s` (or for Stripe `r`) comes before
_WORDISH = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
SHAPED_MAX = 1 << 20
_TEXT_TYPES = ("text/", "application/json", "application/x-ndjson", "application/xml",
               "application/x-www-form-urlencoded", "application/graphql")  # fmt: skip
# A member with a string value in JSON carried inside a JSON string (a tool's answer sent
# back to the model): its quotes are `\"`, and each of its own escapes is escaped again.
_CARRIED = rb'(?:[^"\\]|\\\\(?:\\["\\]|[^"\\]))'
_ESCAPED_MEMBER = re.compile(
    rb'\\"(' + _CARRIED + rb'{1,80})\\"(\s*:\s*)\\"(' + _CARRIED + rb'*)\\"'
)
_UNESCAPE = re.compile(rb'\\(["\\])')
# A member whose value is an object or a list, and the tokens of JSON a container is read by.
_CONTAINER = re.compile(rb'"((?:[^"\\]|\\.){1,80})"\s*:\s*[\[{]')
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_COLON = re.compile(rb"\s*:")
_HOLDING = frozenset({"secret", "secrets", "password", "passwd", "credential", "credentials"})
_HOLDING_HINTS = (b"secret", b"passw", b"credential")
_HINTS = (b"token", b"secret", b"passw", b"key", b"credential", b"auth", b"sig", b"cookie")
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


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(name)]


@functools.lru_cache(maxsize=4096)
def secret_name(name: str) -> bool:
    """Whether a header, query parameter or field named `name` holds a credential."""
    words = _words(name)
    if any(word in _SECRET_WORDS for word in words):
        return True
    return len(words) > 1 and words[-1] == "key" and any(w in _KEY_WORDS for w in words[:-1])


def _named_string(hint: bytes, holding: bool) -> re.Pattern[bytes]:
    """`hint` in what may be the name of a member whose value is a string (with `holding`,
    or an object or a list), in the body or in JSON carried in one of its strings: most
    bodies name `max_tokens` or `prompt_tokens` with a number, and need no member-by-member
    pass."""
    value = rb'["\[{]' if holding else rb'"'
    ending = rb'(?:"\s*:\s*' + value + rb'|\\"\s*:\s*\\")'  # or in JSON carried in a string
    return re.compile(re.escape(hint) + rb'(?:[^"\\]|\\.){0,80}' + ending)


@dataclasses.dataclass(frozen=True, slots=True)
class Redaction:
    """The built-in rules, plus `names` (any case) a user says are secret too."""

    names: frozenset[str] = frozenset()
    # What a body holding a secret must contain: the rules' word stems and the names; and
    # each of them in what may be the name of a member with a string value.
    hints: tuple[bytes, ...] = dataclasses.field(init=False, repr=False, compare=False)
    # each with whether it may name a member holding a secret as an object or a list
    named: tuple[tuple[re.Pattern[bytes], bool], ...] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(n.lower() for n in self.names))
        users = tuple(n.encode() for n in sorted(self.names))
        object.__setattr__(self, "hints", (*_HINTS, *users))
        holding = (*_HOLDING_HINTS, *users)
        named = tuple([(_named_string(h, h in holding), h in holding) for h in self.hints])
        object.__setattr__(self, "named", named)

    def header(self, name: str) -> bool:
        return name.lower() in self.names or secret_name(name)

    def query(self, name: str) -> bool:
        return name.lower() in self.names or name.lower() in _QUERY_NAMES or secret_name(name)

    def field(self, name: str) -> bool:
        return name.lower() in self.names or secret_name(name)

    def holds(self, name: str) -> bool:
        """Whether every string under a member so named is a secret: its name says secret,
        credential or password (not `auth` or `token`, which name schemes and counts too)."""
        return name.lower() in self.names or any(w in _HOLDING for w in _words(name))

    def headers(self, headers: Headers) -> Headers:
        return tuple([(k, REDACTED) if self.header(k) else (k, v) for k, v in headers])

    def route(self, route: str) -> str:
        """A route or URL with credential query parameters and userinfo masked."""
        if "?" not in route and "@" not in route:
            return route
        parts = urlsplit(route)
        netloc = parts.netloc
        if "@" in netloc:  # `https://user:pass@host/…`
            netloc = f"{_USERINFO}@{netloc.rpartition('@')[2]}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(self.query(k) for k, _ in pairs):
                query = urlencode([(k, REDACTED if self.query(k) else v) for k, v in pairs])
        if (netloc, query) == (parts.netloc, parts.query):
            return route
        return urlunsplit(parts._replace(netloc=netloc, query=query))

    def body(self, body: bytes, headers: Headers) -> bytes:
        """A body with its secret values masked (JSON members, form fields), every other byte
        kept; a body that cannot be read is kept as it is."""
        if not body:
            return body
        encoding = header(headers, "content-encoding")
        try:
            plain = decode_body(body, encoding) if encoding else body
        except UndecodableBody:
            return body
        content_type = (header(headers, "content-type") or "").lower()
        if content_type.startswith("application/x-www-form-urlencoded") or (
            not content_type and _FORM.fullmatch(plain)
        ):
            lowered = plain.lower()
            masked = self._form(plain) if any(h in lowered for h in self.hints) else plain
            masked = _spliced(masked, _joined(_shapes(masked)))
        elif _is_text(content_type, plain):
            masked = _spliced(plain, self._spans(plain, plain.lower()))
        else:  # a file's bytes: masking would corrupt them
            return body
        if masked == plain:
            return body
        return encode_body(masked, encoding) if encoding else masked

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
        spans = self._spans(body, body.lower())
        return _recut(chunks, spans) if spans else chunks

    def text(self, text: str) -> str:
        """A message with the URLs and the credentials in it masked (an upstream's error
        names the URL it failed, and may quote the key it refused)."""
        if "://" in text:
            text = _URL.sub(lambda match: self.route(match.group(0)), text)
        raw = text.encode()
        spans = _joined(_shapes(raw))
        return _spliced(raw, spans).decode() if spans else text

    def _spans(self, plain: bytes, lowered: bytes) -> list[tuple[int, int]]:
        """Where `plain`'s secrets are, in order: the string values of its secret members and
        the credentials known by their shape."""
        spans = _shapes(plain)
        found = [holding for pattern, holding in self.named if pattern.search(lowered)]
        if found:
            spans += [
                match.span(3)
                for match in _MEMBER.finditer(plain)
                if match.group(3) != _MASK and self.field(_name(match.group(1)))
            ]
        if any(found):
            spans += self._held(plain)
        if found and b'\\"' in plain:
            spans += self._carried(plain)
        return _joined(spans)

    def _carried(self, plain: bytes) -> list[tuple[int, int]]:
        """The string values of the secret members of JSON carried inside a string."""
        return [
            match.span(3)
            for match in _ESCAPED_MEMBER.finditer(plain)
            if match.group(3) != _MASK and self.field(_name(_UNESCAPE.sub(rb"\1", match.group(1))))
        ]

    def _held(self, plain: bytes) -> list[tuple[int, int]]:
        """The strings under each member that `holds` a secret as an object or a list (a
        service account's `"credentials": {…}`, `"client_secret": {"value": …}`)."""
        spans = []
        for match in _CONTAINER.finditer(plain):
            if not self.holds(_name(match.group(1))):
                continue
            start = match.end() - 1
            end = _closing(plain, start)
            for string in _STRING.finditer(plain, start, end):
                if not _COLON.match(plain, string.end()) and string.group(1) != _MASK:
                    spans.append(string.span(1))  # a value, not a member's name
        return spans

    def _form(self, body: bytes) -> bytes:
        try:
            text = body.decode("ascii")
        except UnicodeDecodeError:
            return body
        pairs = parse_qsl(text, keep_blank_values=True)
        if not any(self.query(k) for k, _ in pairs):
            return body
        return urlencode([(k, REDACTED if self.query(k) else v) for k, v in pairs]).encode()


DEFAULT = Redaction()


def _is_text(content_type: str, plain: bytes) -> bool:
    """Whether a body is text a credential could be written in, not a file's bytes."""
    if not content_type:
        return b"\x00" not in plain[:4096]
    kind = content_type.partition(";")[0].strip()
    return kind.startswith(_TEXT_TYPES) or kind.endswith(("+json", "+xml"))


def _shapes(plain: bytes) -> list[tuple[int, int]]:
    """Where the credentials known by their shape are in `plain` (each begins where a word
    does), family by family."""
    if len(plain) > SHAPED_MAX:
        return []
    found = []
    for shape in _SHAPES:
        for match in shape.finditer(plain):
            begin, end = match.span()
            if shape is _KEYS:
                before = b"sr" if plain[begin + 1] == 0x5F else b"s"  # `_`: Stripe's
                if begin == 0 or plain[begin - 1] not in before:
                    continue
                begin -= 1
            if begin and plain[begin - 1] in _WORDISH and plain[begin] != 0x2D:  # `-----BEGIN`
                continue
            found.append((begin, end))
    return found


def _closing(plain: bytes, start: int) -> int:
    """Where the object or list opening at `start` ends (past its closing bracket); the end of
    `plain` if it never closes (a body cut short)."""
    depth = 0
    for token in _TOKEN.finditer(plain, start):
        opening = token.group()
        if opening[0] == 0x22:  # a string: its brackets are text
            continue
        depth += 1 if opening in (b"{", b"[") else -1
        if depth == 0:
            return token.end()
    return len(plain)


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


def _name(raw: bytes) -> str:
    """A member's name as JSON reads it (`"api\\u005fkey"` is `api_key`)."""
    if b"\\" in raw:
        try:
            return str(orjson.loads(b'"%s"' % raw))
        except orjson.JSONDecodeError:
            pass
    return raw.decode("utf-8", errors="replace")


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
