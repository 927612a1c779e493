"""Credentials known by their shape, where no name says what they are: a key pasted into a
prompt, a token a tool printed, a JWT in a header value.

`SHAPES` are the formats their issuers publish (`sk-…`, `AKIA…`, `ghp_…`, `gsk_…`, `hf_…`, a
JWT, a private key block…), each beginning with a literal. A match counts where a word begins
(after a character that is not `[A-Za-z0-9_-]`, an escape such as JSON's `\\n` or a URL's
`%20`, or at the start) and ends where the word does, and where it holds a digit or both
cases, so `sk-learn-is-a-library`, `risk-assessment` and base64 that happens to hold `AKIA`
are text, not keys.

Every body that is text is scanned, whatever its size, at a cost per byte: with `google-re2`
installed (the `fast` extra) the shapes are one automaton, one pass over the body however many
there are; else each is a `re` pattern whose leading literal `re` looks for at memchr speed.
`benchmarks/redaction.py` prints both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum, auto

from forkpoint.errors import MissingExtra
from forkpoint.importing import require_extra

_WORDISH = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_UPPER = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = frozenset(b"abcdefghijklmnopqrstuvwxyz")


class Edge(Enum):
    WORD = auto()  # begins where a word does; ends where it does
    ANY = auto()  # its own delimiters say where it is (a key block, a URL's userinfo)
    DIGITS = auto()  # follows digits (a Telegram bot's id): begins at its own `:`


@dataclass(frozen=True, slots=True)
class Shape:
    pattern: bytes
    edge: Edge = Edge.WORD
    trim: tuple[int, int] = (0, 0)  # what of the match is not masked, at its start and end


SHAPES: tuple[Shape, ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-, sk-admin-), Anthropic (sk-ant-), OpenRouter (sk-or-),
    # DeepSeek, Langfuse (sk-lf-); Cerebras
    Shape(rb"sk-[\w-]{20,}"),
    Shape(rb"csk-[\w-]{20,}"),
    # Stripe's secret and restricted keys and webhook secrets; ElevenLabs
    Shape(rb"sk_(?:live|test)_[A-Za-z0-9]{16,}"),
    Shape(rb"rk_(?:live|test)_[A-Za-z0-9]{16,}"),
    Shape(rb"whsec_[A-Za-z0-9+/=]{24,}"),
    Shape(rb"sk_[A-Za-z0-9]{32,}"),
    # OpenAI's ephemeral (realtime) keys
    Shape(rb"ek_[A-Za-z0-9]{20,}"),
    # AWS access key ids; Google API keys, OAuth access and refresh tokens
    Shape(rb"A(?:KIA|SIA)[0-9A-Z]{16}"),
    Shape(rb"AIza[\w-]{35}"),
    Shape(rb"ya29\.[\w-]{20,}"),
    Shape(rb"1//0[\w-]{30,}"),
    # GitHub, GitLab, Grafana
    Shape(rb"gh[pousr]_[A-Za-z0-9]{36,}"),
    Shape(rb"github_pat_\w{22,}"),
    Shape(rb"gl(?:pat|dt|rt|ptt|cbt|imt|ft|soat|oas|agent|ffct)-[\w-]{20,}"),
    Shape(rb"gl(?:sa|c)_[\w-]{20,}"),
    # Slack
    Shape(rb"xox[abposre]-[A-Za-z0-9-]{10,}"),
    Shape(rb"xapp-[A-Za-z0-9-]{10,}"),
    # Model and tool APIs: Groq, xAI, Hugging Face, Perplexity, Replicate, Fireworks, Tavily,
    # LangSmith, Pinecone
    Shape(rb"gsk_[A-Za-z0-9]{40,}"),
    Shape(rb"xai-[A-Za-z0-9]{40,}"),
    Shape(rb"hf_[A-Za-z0-9]{30,}"),
    Shape(rb"api_org_[A-Za-z0-9]{30,}"),
    Shape(rb"pplx-[A-Za-z0-9]{40,}"),
    Shape(rb"r8_[A-Za-z0-9]{30,}"),
    Shape(rb"fw_[A-Za-z0-9]{20,}"),
    Shape(rb"tvly-[\w-]{20,}"),
    Shape(rb"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}"),
    Shape(rb"pcsk_\w{30,}"),
    # Registries and clouds: npm, PyPI, Docker Hub, DigitalOcean, Databricks, HashiCorp Vault
    Shape(rb"npm_[A-Za-z0-9]{36}"),
    Shape(rb"pypi-AgE[\w-]{50,}"),
    Shape(rb"dckr_pat_[\w-]{20,}"),
    Shape(rb"do[opr]_v1_[a-f0-9]{64}"),
    Shape(rb"dapi[a-f0-9]{32}"),
    Shape(rb"hv[sbr]\.[\w-]{20,}"),
    # Services: SendGrid, Shopify, Linear, Notion, Figma, Sentry, New Relic, Postman, Airtable,
    # Atlassian, Mailgun, 1Password service accounts, age
    Shape(rb"SG\.[\w-]{16,}\.[\w-]{30,}"),
    Shape(rb"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"),
    Shape(rb"lin_api_[A-Za-z0-9]{30,}"),
    Shape(rb"ntn_[A-Za-z0-9]{30,}"),
    Shape(rb"secret_[A-Za-z0-9]{43}"),
    Shape(rb"figd_[\w-]{30,}"),
    Shape(rb"sntr[ysu]_[\w+/=]{30,}"),
    Shape(rb"NRAK-[A-Z0-9]{27}"),
    Shape(rb"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    Shape(rb"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}"),
    Shape(rb"ATATT3[\w=-]{100,}"),
    Shape(rb"key-[a-f0-9]{32}"),
    Shape(rb"ops_eyJ[\w+/=]{100,}"),
    Shape(rb"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
    # A JWT: an ID token, a load balancer's or an identity-aware proxy's assertion
    Shape(rb"eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}"),
    # Webhook URLs whose path is their secret; a Telegram bot's token (`123456:AA…`)
    Shape(rb"hooks\.slack\.com/(?:services|workflows|triggers)/[\w/]{20,}"),
    Shape(rb"discord(?:app)?\.com/api/webhooks/[0-9]+/[\w-]{40,}"),
    Shape(rb":AA[\w-]{33}", Edge.DIGITS, trim=(1, 0)),
    # A bearer token written out (a curl command pasted into a prompt)
    Shape(rb"Bearer [\w.~+/-]{20,}=*", trim=(7, 0)),
    # The userinfo of a URL in text (a database URL), also as JSON escapes its slashes
    Shape(rb"://[^\s/?#@:\"'<>\\]{1,128}:[^\s/?#@\"'<>\\]{1,256}@", Edge.ANY, trim=(3, 1)),
    Shape(rb":\\/\\/[^\s/?#@:\"'<>\\]{1,128}:[^\s/?#@\"'<>\\]{1,256}@", Edge.ANY, trim=(5, 1)),
)

Spans = list[tuple[int, int]]
Scanner = Callable[[bytes], Spans]
_BEGIN = b"-----BEGIN"
_KEY_BLOCK = re.compile(rb"-----BEGIN[A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,40}-----")
_KEY_BLOCK_END = re.compile(rb"-----END[A-Z ]{0,40}PRIVATE KEY[A-Z ]{0,40}-----")
_COUNTED = re.compile(rb"\{(\d+)(?:,\d*)?\}")
_LOOSE = 8  # the most characters of a class a candidate needs
# Where a word begins, as `_word_begins` says, for RE2 (which has no look-behind)
_WORD_BEGINS = rb"(?:^|[^\w-]|\\[nrtbf]|%[0-9A-Fa-f]{2}|\\u[0-9A-Fa-f]{4})"


def candidates(shapes: Sequence[Shape] = SHAPES, group: bytes = b"(?:%s)") -> bytes:
    """A pattern, in the syntax RE2 and `re` share, that matches where a candidate of any of
    `shapes` is: each loosened, each in `group`, the word-bound ones where a word begins."""
    order = _order(shapes)
    words = sum(shapes[index].edge is Edge.WORD for index in order)
    groups = [group % _loosened(shapes[index].pattern) for index in order]
    return b"|".join([_WORD_BEGINS + b"(?:" + b"|".join(groups[:words]) + b")", *groups[words:]])


def _order(shapes: Sequence[Shape]) -> list[int]:
    """The shapes' indexes as `candidates` lists them: the word-bound ones first."""
    return sorted(range(len(shapes)), key=lambda index: shapes[index].edge is not Edge.WORD)


def re2_scanner(shapes: Sequence[Shape] = SHAPES) -> Scanner:
    """One RE2 automaton finds the candidates of every shape at once, where a word begins:
    one pass over the body whatever their number; each is then checked against its own `re`
    pattern. The automaton asks for at most `_LOOSE` characters of a class (`[a-f0-9]{64}`
    would make its states too many), so it stays small, in memory and in time. Most bodies
    hold no candidate: the same automaton without its groups says so first (8 us through a
    4 KB prompt, against 13 asking which shape each candidate is)."""
    [re2] = require_extra("fast", "RE2's scanner of credential shapes", modules=("re2",))

    order = _order(shapes)
    # Bytes as Latin-1, one character a byte as `re` reads them: as UTF-8, a byte that is not
    # would hide the key after it.
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    loose = re2.compile(candidates(shapes, b"(%s)"), options)
    any_candidate = re2.compile(candidates(shapes), options).search
    exact = [re.compile(shape.pattern) for shape in shapes]
    by_first: dict[int, list[int]] = {}
    for index, shape in enumerate(shapes):
        by_first.setdefault(shape.pattern[0], []).append(index)

    def scan(plain: bytes) -> Spans:
        found = key_blocks(plain)
        if any_candidate(plain) is None:
            return found
        for candidate in loose.finditer(plain):
            first = order[candidate.lastindex - 1]
            begin = candidate.start(candidate.lastindex)
            for index in (first, *by_first[shapes[first].pattern[0]]):
                match = exact[index].match(plain, begin)
                if match is None:
                    continue
                span = _kept(plain, shapes[index], begin, match.end())
                if span is not None:
                    found.append(span)
                    break
        return found

    return scan


def re_scanner(shapes: Sequence[Shape] = SHAPES) -> Scanner:
    """A `re` pattern per shape, each found from its leading literal."""
    compiled = [(re.compile(shape.pattern), shape) for shape in shapes]

    def scan(plain: bytes) -> Spans:
        found = key_blocks(plain)
        for pattern, shape in compiled:
            for match in pattern.finditer(plain):
                span = _kept(plain, shape, *match.span())
                if span is not None:
                    found.append(span)
        return found

    return scan


def _loosened(pattern: bytes) -> bytes:
    return _COUNTED.sub(
        lambda m: m.group(0) if int(m.group(1)) <= _LOOSE else b"{%d,}" % _LOOSE, pattern
    )


def key_blocks(plain: bytes) -> Spans:
    """Private key blocks (PEM, OpenSSH, PGP): from each `-----BEGIN … PRIVATE KEY-----` to
    the next `-----END … PRIVATE KEY-----`, found by `find` so a body of many beginnings and
    no end is read once, not once a beginning."""
    found: Spans = []
    at = plain.find(_BEGIN)
    while at >= 0:
        begin = _KEY_BLOCK.match(plain, at)
        end = begin and _KEY_BLOCK_END.search(plain, begin.end())
        if end is None:
            if begin is not None:
                break  # no block ends after this one: nor after any later one
            at = plain.find(_BEGIN, at + 1)
            continue
        found.append((at, end.end()))
        at = plain.find(_BEGIN, end.end())
    return found


def _kept(plain: bytes, shape: Shape, begin: int, end: int) -> tuple[int, int] | None:
    """The span to mask of a match, or None where it is not a credential after all."""
    masked = begin + shape.trim[0], end - shape.trim[1]
    if shape.edge is Edge.ANY:
        return masked
    if end < len(plain) and plain[end] in _WORDISH:
        return None  # a longer word
    if shape.edge is Edge.DIGITS:
        begins = begin > 0 and plain[begin - 1] in _DIGITS
    else:
        begins = _word_begins(plain, begin)
    return masked if begins and _random(plain[masked[0] : masked[1]]) else None


def _word_begins(plain: bytes, begin: int) -> bool:
    """Whether a word begins at `begin`: at the start, after a character no word holds, or
    right after an escape (JSON's `\\n` or `\\u0020`, a URL's `%20`)."""
    if begin == 0 or plain[begin - 1] not in _WORDISH:
        return True
    if begin >= 2 and plain[begin - 2] == 0x5C:  # `\n`, `\t`…
        return plain[begin - 1] in b"nrtbf"
    if begin >= 3 and plain[begin - 3] == 0x25:  # `%20`
        return plain[begin - 2] in _HEX and plain[begin - 1] in _HEX
    if begin >= 6 and plain[begin - 6 : begin - 4] == b"\\u":
        return all(c in _HEX for c in plain[begin - 4 : begin])
    return False


def _random(value: bytes) -> bool:
    """Whether a match reads as made up rather than written: a digit, or both cases."""
    seen = frozenset(value)
    return bool(seen & _DIGITS) or bool(seen & _UPPER and seen & _LOWER)


def default_scanner() -> Scanner:
    """RE2's where the `fast` extra (`google-re2`) is installed, else `re`'s: slower, the same
    spans."""
    try:
        return re2_scanner()
    except MissingExtra:
        return re_scanner()


find = default_scanner()
