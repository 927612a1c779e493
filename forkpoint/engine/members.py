"""The members of JSON text a secret may be the value of, found without parsing it: a body is
masked in place, every other byte kept, and may not be JSON at all (cut short, JSON lines, a
form of text that holds some).

A name says a member is secret (see `secret_names`): its string value is masked; under a name
that says secret, credential or password (`holds`), every string of an object or list value
is. JSON carried inside a JSON string (a tool's answer sent back to the model) has its quotes
escaped as `\\"`, and its members are found there too.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Sequence

import orjson

Spans = list[tuple[int, int]]
MASK = b"[redacted]"
# What a JSON string holds: `(?:[^"\\]|\\.)*`, unrolled, so `re` runs through a long value
# (a prompt) a class at a time instead of trying two branches at every byte: 8 times faster.
_CONTENT = rb'[^"\\]*(?:\\.[^"\\]*)*'
# A member whose value is a string: its name, the separator, the string.
_MEMBER = re.compile(rb'"((?:[^"\\]|\\.){1,80})"(\s*:\s*)"(' + _CONTENT + rb')"')
# A member with a string value in JSON carried inside a JSON string: its quotes are `\"`, and
# each of its own escapes is escaped again.
_CARRIED = rb'(?:[^"\\]|\\\\(?:\\["\\]|[^"\\]))'
_ESCAPED_MEMBER = re.compile(
    rb'\\"(' + _CARRIED + rb'{1,80})\\"(\s*:\s*)\\"(' + _CARRIED + rb'*)\\"'
)
_UNESCAPE = re.compile(rb'\\(["\\])')
# A member whose value is an object or a list, and the tokens of JSON a container is read by.
_CONTAINER = re.compile(rb'"((?:[^"\\]|\\.){1,80})"\s*:\s*[\[{]')
_STRING = re.compile(rb'"(' + _CONTENT + rb')"')
_TOKEN = re.compile(rb'"' + _CONTENT + rb'"|[\[\]{}]')
_COLON = re.compile(rb"\s*:")


# What `\s` is to `re` in bytes, spelled out (no look-around, no back-reference: RE2 and `re`
# find the same), since RE2's `\s` leaves out `\v`
_SPACE = rb"[ \t\n\r\f\v]*"
_RE2 = importlib.util.find_spec("re2") is not None
# Names one RE2 automaton looks for at most: with 50, its DFA outgrows RE2's memory (and says
# so on stderr); more names take more passes.
_RE2_GROUP = 24


def named_search(hints: Sequence[tuple[bytes, bool]]) -> Callable[[bytes], bool]:
    """Whether JSON text may hold a member one of `hints` (in lowercase) names in any case,
    with a string value (or, for a hint with `True`, an object or a list), in the body or in
    JSON carried in one of its strings: most bodies name `max_tokens` or `prompt_tokens` with
    a number, and need no member-by-member pass. RE2's one pass for every hint where
    `google-re2` is installed, else `re`'s search for each in turn. A hint's ASCII letters
    match either case, as in the text lowered (which is not made: a copy of every body, and a
    pass over it)."""
    patterns = [_named(hint, holding) for hint, holding in hints]
    if not patterns:
        return lambda _: False
    if not _RE2:
        searches = [re.compile(pattern).search for pattern in patterns]
        return lambda text: any(search(text) for search in searches)
    automata = [
        _re2_search(group)
        for group in (patterns[at : at + _RE2_GROUP] for at in range(0, len(patterns), _RE2_GROUP))
    ]
    return lambda text: any(search(text) is not None for search in automata)


def named_or(hints: Sequence[tuple[bytes, bool]], other: bytes) -> Callable[[bytes], bool] | None:
    """Whether text may hold what `named_search(hints)` looks for or a match of the pattern
    `other`, in one RE2 pass: a body that holds neither (most) is read once, not once for each.
    None without RE2, or with more hints than one automaton takes."""
    if not _RE2 or len(hints) > _RE2_GROUP:
        return None
    search = _re2_search([other, *(_named(hint, holding) for hint, holding in hints)])
    return lambda text: search(text) is not None


def _re2_search(patterns: Sequence[bytes]) -> Callable[[bytes], object]:
    """One RE2 automaton for `patterns` as alternatives, reading bytes as Latin-1 (one
    character a byte, as `re` does: as UTF-8, it would find nothing around a byte that is not
    UTF-8)."""
    import re2  # type: ignore[import-not-found, unused-ignore]

    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    search: Callable[[bytes], object] = re2.compile(
        b"|".join([b"(?:%s)" % pattern for pattern in patterns]), options
    ).search
    return search


def _named(hint: bytes, holding: bool) -> bytes:
    value = rb'["\[{]' if holding else rb'"'
    ending = rb'(?:"%s:%s%s|\\"%s:%s\\")' % (_SPACE, _SPACE, value, _SPACE, _SPACE)
    return _either_case(hint) + rb'(?:[^"\\]|\\.){0,80}' + ending


def _either_case(literal: bytes) -> bytes:
    """A pattern for `literal` whose ASCII letters match in either case (`[tT][oO]…`), and
    only those, as `bytes.lower` folds them: no flag, so RE2 and `re` fold alike."""
    return b"".join(
        b"[%c%c]" % (byte, byte - 32) if 0x61 <= byte <= 0x7A else re.escape(bytes([byte]))
        for byte in literal
    )


def strings(plain: bytes, secret: Callable[[str], bool]) -> Spans:
    """The string values of the members `secret` names."""
    return [
        match.span(3)
        for match in _MEMBER.finditer(plain)
        if match.group(3) != MASK and secret(name(match.group(1)))
    ]


def carried(plain: bytes, secret: Callable[[str], bool]) -> Spans:
    """The string values of the members `secret` names in JSON carried inside a string."""
    return [
        match.span(3)
        for match in _ESCAPED_MEMBER.finditer(plain)
        if match.group(3) != MASK and secret(name(_UNESCAPE.sub(rb"\1", match.group(1))))
    ]


def held(plain: bytes, holds: Callable[[str], bool]) -> Spans:
    """The strings under each member that `holds` a secret as an object or a list (a
    service account's `"credentials": {…}`, `"client_secret": {"value": …}`)."""
    spans = []
    for match in _CONTAINER.finditer(plain):
        if not holds(name(match.group(1))):
            continue
        start = match.end() - 1
        end = _closing(plain, start)
        for string in _STRING.finditer(plain, start, end):
            if not _COLON.match(plain, string.end()) and string.group(1) != MASK:
                spans.append(string.span(1))  # a value, not a member's name
    return spans


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


def name(raw: bytes) -> str:
    """A member's name (or a string) as JSON reads it (`"api\\u005fkey"` is `api_key`)."""
    if b"\\" in raw:
        try:
            return str(orjson.loads(b'"%s"' % raw))
        except orjson.JSONDecodeError:
            pass
    return raw.decode("utf-8", errors="replace")
