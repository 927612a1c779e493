"""A recorded body as a person reads it: JSON as a tree that folds, a stream as its events with
the time each arrived, text as text, anything else as its size and first bytes.

Every piece of a body is escaped here (`markupsafe.escape`) before it becomes markup: a body
holding `<script>` shows as those characters. Sizes are bounded: a body too large for a tree
is shown as indented text, and past `SHOWN` bytes it is cut with a note, so one huge answer
cannot make a page of hundreds of megabytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson
from markupsafe import Markup, escape

from forkpoint.engine.encoding import decode_body, header
from forkpoint.models import Chunk, Headers

# Bytes of a body shown at most; the rest is named, not shown.
SHOWN = 1 << 20
# A JSON body with more values than this is shown as indented text, not as a tree.
TREE_NODES = 4000
# Levels of a JSON tree shown open; deeper ones start folded.
OPEN_DEPTH = 3
# Events of a stream shown at most.
EVENTS = 2000

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True, slots=True)
class Event:
    """One server-sent event: when the chunk that completed it arrived, its name and data."""

    offset_ms: float
    name: str
    data: str


def decoded(body: bytes, headers: Headers) -> tuple[bytes, str | None]:
    """The body with its content-encoding undone, and a note when that failed."""
    coding = header(headers, "content-encoding")
    if not coding or not body:
        return body, None
    try:
        return decode_body(body, coding, partial=True, limit=SHOWN * 4), None
    except Exception as error:  # any codec error: show the bytes as stored, and say why
        return body, f"shown as stored: not decoded as {coding} ({error})"


def body_html(body: bytes, headers: Headers) -> Markup:
    """A request or response body held whole."""
    if not body:
        return Markup('<p class="muted">(empty)</p>')
    plain, note = decoded(body, headers)
    parts = [_note(note)] if note else []
    cut = len(plain) > SHOWN
    shown = plain[:SHOWN]
    value = _json(shown) if not cut else _NOT_JSON
    if value is not _NOT_JSON:
        parts.append(json_html(value))
    elif _is_text(shown):
        text = shown.decode("utf-8", errors="replace")
        parts.append(Markup('<pre class="body">{}</pre>').format(text))
    else:
        parts.append(
            Markup(
                '<p class="muted">{} bytes, not text; the first 256:</p><pre class="body">{}</pre>'
            ).format(len(plain), shown[:256].hex(" "))
        )
    if cut:
        parts.append(_note(f"{len(plain) - SHOWN} more bytes not shown"))
    return Markup("").join(parts)


def json_html(value: object) -> Markup:
    """A JSON value as nested `<details>`: objects and arrays fold, scalars are typed spans."""
    if _count(value, TREE_NODES + 1) > TREE_NODES:  # too many nodes to fold: indented text
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
        return Markup('<pre class="body json">{}</pre>').format(text)
    out: list[str] = ['<div class="json">']
    _tree(value, None, 0, out)
    out.append("</div>")
    return Markup("".join(out))


def events(chunks: list[Chunk]) -> tuple[list[Event], bytes]:
    """A stream's server-sent events, each at the offset of the chunk that completed it, and
    what followed the last complete event (a stream cut short)."""
    found: list[Event] = []
    pending = b""
    for chunk in chunks:
        pending += chunk.data
        while (end := _EVENT_END.search(pending)) is not None:
            block, pending = pending[: end.start()], pending[end.end() :]
            if block.strip():
                found.append(_event(chunk.offset_ms, block))
    return found, pending


def events_html(chunks: list[Chunk]) -> Markup:
    """A stream as a table of its events: offset, name, data (JSON folded to one line)."""
    found, rest = events(chunks)
    if not found:  # a stream but no events: not SSE (an NDJSON or a raw byte stream)
        rows = [(chunk.offset_ms, "", chunk.data.decode("utf-8", "replace")) for chunk in chunks]
    else:
        rows = [(event.offset_ms, event.name, event.data) for event in found]
    shown = rows[:EVENTS]
    html = [
        Markup(
            '<table class="events"><thead><tr><th>ms</th><th>event</th><th>data</th></tr>'
            "</thead><tbody>"
        )
    ]
    for offset, name, data in shown:
        html.append(
            Markup('<tr><td class="num">{}</td><td>{}</td><td><code>{}</code></td></tr>').format(
                f"{offset:.0f}", name, data
            )
        )
    html.append(Markup("</tbody></table>"))
    if len(rows) > EVENTS:
        html.append(_note(f"{len(rows) - EVENTS} more events not shown"))
    if found and rest.strip():
        html.append(_note("after the last complete event:"))
        html.append(Markup('<pre class="body">{}</pre>').format(rest.decode("utf-8", "replace")))
    return Markup("").join(html)


def _event(offset_ms: float, block: bytes) -> Event:
    name, data = "message", []
    for line in block.decode("utf-8", "replace").splitlines():
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return Event(offset_ms, name, "\n".join(data))


_NOT_JSON = object()


def _json(body: bytes) -> object:
    stripped = body.lstrip()
    if not stripped or (stripped[:1] not in b'{["' and not stripped[:1].isdigit()):
        return _NOT_JSON
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return _NOT_JSON


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:  # cut mid-character at the end is still text
        return error.start >= len(data) - 3
    return b"\x00" not in data


def _count(value: object, limit: int) -> int:
    """How many values `value` holds, counting no further than `limit`."""
    seen, stack = 0, [value]
    while stack and seen < limit:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return seen


def _tree(value: object, key: str | None, depth: int, out: list[str]) -> None:
    """`value` (named `key` in its parent) as escaped markup: a container folds, with its key
    and opening bracket on the line that folds it."""
    label = f'<span class="j-key">{escape(key)}</span>: ' if key is not None else ""
    if not isinstance(value, dict | list):
        kind = "null" if value is None else type(value).__name__
        text = f'"{value}"' if isinstance(value, str) else orjson.dumps(value).decode()
        out.append(f'<div>{label}<span class="j-{kind}">{escape(text)}</span></div>')
        return
    opening, closing, noun = ("{", "}", "key") if isinstance(value, dict) else ("[", "]", "item")
    if not value:
        out.append(f"<div>{label}{opening}{closing}</div>")
        return
    count = f"{len(value)} {noun}{'' if len(value) == 1 else 's'}"
    state = " open" if depth < OPEN_DEPTH else ""
    out.append(
        f'<details{state}><summary>{label}{opening}<span class="folded"> … {closing} '
        f'<i>{count}</i></span></summary><div class="members">'
    )
    members = value.items() if isinstance(value, dict) else enumerate(value)
    for name, item in members:
        _tree(item, str(name), depth + 1, out)
    out.append(f"</div>{closing}</details>")


def _note(text: str) -> Markup:
    return Markup('<p class="muted">{}</p>').format(text)
