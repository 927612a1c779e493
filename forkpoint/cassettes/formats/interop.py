"""What the file formats share: runs as plain values, URIs and routes, readable bodies, one way
to build an exchange from a file's parts, and reading a file one exchange at a time.

Every format module (text, jsonl, har) reads its own envelope and hands the parts, each value
checked (`checks`), to `build_exchange`, which redacts credentials again (a foreign file may
hold them), recomputes the fingerprint and the summary from the bodies (so a hand edit is what
gets matched), and cuts a stream into its chunks. A format reads a file in two steps, so an
import holds one exchange at a time whatever the file's size: `read_run` (the run's own
fields, its format version checked) and then `read_exchanges`, one at a time in step order.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol
from urllib.parse import urlsplit

from forkpoint.cassettes.formats import checks
from forkpoint.cassettes.formats.checks import Invalid, Where
from forkpoint.engine import matching
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.encoding import UndecodableBody, decode_body, header
from forkpoint.engine.redaction import DEFAULT as REDACTION
from forkpoint.errors import CassetteError
from forkpoint.models import Chunk, Exchange, Headers, Mode, Origin, Run, RunStatus, new_run_id

# The URI of an exchange that never went upstream (replayed, mocked, refused): a reserved name
# (RFC 2606), so nothing can ever answer it by accident.
NO_UPSTREAM = "http://forkpoint.invalid"
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class NotThisFormat(CassetteError):
    """A file whose shape is not the format it was read as (a JSON file that is no HAR): the
    caller says which format it tried and why."""


class Format(Protocol):
    """A file format's reader, as `loads` and `transfer.import_file` use it."""

    def read_run(self, file: IO[bytes], *, source: str) -> Run:
        """The file's run, its version checked, without building its exchanges."""
        ...

    def read_exchanges(
        self, file: IO[bytes], run_id: str, *, source: str, routes: Mapping[str, str]
    ) -> Iterator[Exchange]:
        """Its exchanges for the run `run_id`, one at a time, in step order; each checked, so a
        bad one raises CassetteError naming the file, the exchange and the field."""
        ...


def loads(
    read_run: Callable[..., Run], read_exchanges: Callable[..., Iterator[Exchange]], text: str,
    *, source: str, routes: Mapping[str, str] | None,
) -> tuple[Run, list[Exchange]]:  # fmt: skip
    """The run in `text` and all its exchanges, by a format's two readers (a file read whole:
    a test's cassette)."""
    data = text.encode("utf-8")
    run = read_run(io.BytesIO(data), source=source)
    exchanges = read_exchanges(io.BytesIO(data), run.id, source=source, routes=routes or {})
    return run, list(exchanges)


def field(path: Where, container: int = 0) -> str:
    """Where a value sits, as a message names it: `response.status.code` for a path below
    the exchange's, which is the first `container` keys of `path`."""
    return ".".join(str(key) for key in path[container:])


def held_whole(exchanges: Sequence[Exchange], fmt: str) -> Sequence[Exchange]:
    """`exchanges`, checked whole: a file holds every body in one document, in memory, so a
    body too large to hold (in pieces in its store) is refused, never cut short."""
    for e in exchanges:
        if e.pieces or e.request_pieces:
            which, size, held = (
                ("response", e.body_size, e.response_body) if e.pieces
                else ("request", e.request_size, e.request_body)
            )  # fmt: skip
            raise CassetteError(
                f"run {e.run_id} step {e.step} has a {which} body of {size} bytes, "
                f"{size - len(held)} of them in pieces: a {fmt} file holds "
                "bodies whole, too large a one is not exported (move the run between stores "
                "with `forkpoint copy`)",
                run_id=e.run_id, step=e.step,
            )  # fmt: skip
    return exchanges


def need(container: Any, key: str | int, kind: type | tuple[type, ...], path: Where) -> Any:
    """`container[key]`, which must be of `kind`; raises Invalid naming where it is missing."""
    where = (*path, key)
    try:
        value = container[key]
    except (KeyError, IndexError, TypeError):
        raise Invalid(path, f"missing `{key}`") from None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise Invalid(where, f"`{key}` should be {names}, not {type(value).__name__}")
    return value


def optional(container: Any, key: str, kind: type | tuple[type, ...], path: Where) -> Any:
    """Like `need`, but an absent or null value is None."""
    if not isinstance(container, Mapping):
        raise Invalid(path, f"should be a mapping, not {type(container).__name__}")
    return None if container.get(key) is None else need(container, key, kind, path)


# runs


def run_to_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "name": run.name,
        "labels": run.labels,
        "status": run.status.value,
        "mode": run.mode.value,
        "parent_id": run.parent_id,
        "fork_step": run.fork_step,
        "change": run.change,
        "created_at": run.created_at,
        "ended_at": run.ended_at,
        "error": run.error,
    }


def run_from_json(data: Mapping[str, Any] | None, path: Where, *, default_name: str) -> Run:
    """A run from `run_to_json`'s shape; a file without one (vcrpy's) gets a finished run."""
    if data is None:
        return Run(id=new_run_id(), name=default_name, status=RunStatus.FINISHED)
    labels = optional(data, "labels", dict, path) or {}
    for key, value in labels.items():
        if not isinstance(value, str | int | float | bool):
            raise Invalid((*path, "labels", key), "a label's value should be text")
    change = optional(data, "change", dict, path)
    return Run(
        id=optional(data, "id", str, path) or new_run_id(),
        name=optional(data, "name", str, path) or default_name,
        labels={str(k): str(v) for k, v in labels.items()},
        status=choice(RunStatus, data, "status", RunStatus.FINISHED, path),
        mode=choice(Mode, data, "mode", Mode.RECORD, path),
        parent_id=optional(data, "parent_id", str, path),
        fork_step=checks.count(optional(data, "fork_step", int, path), (*path, "fork_step")),
        change=None if change is None else checks.json_value(change, (*path, "change")),
        created_at=seconds(data, "created_at", path) or time.time(),
        ended_at=seconds(data, "ended_at", path),
        error=optional(data, "error", str, path),
    )


def choice[E: (RunStatus, Mode, Origin)](
    kind: type[E], data: Mapping[str, Any], key: str, default: E, path: Where
) -> E:
    """`data[key]` as one of the values of the str Enum `kind`, `default` when absent."""
    value = optional(data, key, str, path)
    try:
        return default if value is None else kind(value)
    except ValueError:
        known = ", ".join(member.value for member in kind)
        raise Invalid((*path, key), f"{value!r} is not one of {known}") from None


def seconds(data: Mapping[str, Any], key: str, path: Where) -> float | None:
    """`data[key]`, a moment in seconds since the epoch, or None."""
    return checks.timestamp(optional(data, key, (int, float), path), (*path, key))


def millis(data: Mapping[str, Any], key: str, path: Where) -> float | None:
    """`data[key]`, a duration in milliseconds, or None."""
    return checks.millis(optional(data, key, (int, float), path), (*path, key))


# where an exchange went


def uri_for(exchange: Exchange) -> str:
    """The URL the exchange was sent to, or a reserved placeholder when it never left."""
    return exchange.upstream or NO_UPSTREAM + exchange.route


def route_for(uri: str, routes: Mapping[str, str]) -> str:
    """The gateway route an agent uses for `uri`: `/NAME/...` under a named route, else the path.

    `routes` maps a prefix to its base URL, as `--route NAME=URL` does.
    """
    parts = urlsplit(uri)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    for name, base in routes.items():
        b = urlsplit(base)
        prefix = b.path.rstrip("/")
        if (b.scheme, b.netloc) == (parts.scheme, parts.netloc) and (
            parts.path == prefix or parts.path.startswith(prefix + "/")
        ):
            return f"/{name}{tail[len(prefix) :]}"
    return tail or "/"


# bodies


def decoded_body(headers: Headers, body: bytes) -> tuple[Headers, bytes]:
    """The body without its content-encoding (and without the header), where it decodes."""
    encoding = header(headers, "content-encoding")
    if not encoding:
        return headers, body
    try:
        body = decode_body(body, encoding)
    except UndecodableBody:
        return headers, body
    kept = tuple((k, v) for k, v in headers if k.lower() != "content-encoding")
    return fit_length(kept, body), body


def fit_length(headers: Headers, body: bytes) -> Headers:
    """`Content-Length` set to the body's size, where the headers have one."""
    return tuple((k, str(len(body)) if k.lower() == "content-length" else v) for k, v in headers)


def text_or_bytes(body: bytes) -> str | bytes:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body


def as_bytes(value: Any, path: Where) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise Invalid(path, f"a body should be text or !!binary, not {type(value).__name__}")


def is_event_stream(headers: Headers) -> bool:
    return (header(headers, "content-type") or "").startswith("text/event-stream")


def chunk_sizes(value: Any, path: Where) -> list[tuple[float, int]] | None:
    """A stream's `[[offset ms, size in bytes], …]`, checked: offsets finite and not
    negative, sizes whole and not negative (that they add up to the body is checked with it)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise Invalid(path, "`chunks` should be a list of [offset ms, size in bytes]")
    sizes = []
    for index, pair in enumerate(value):
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], int | float)
            and isinstance(pair[1], int)
            and not isinstance(pair[0], bool)
            and not isinstance(pair[1], bool)
        ):
            message = f"a chunk should be [offset ms, size in bytes], not {checks.shown(pair)}"
            raise Invalid((*path, index), message)
        offset = checks.millis(pair[0], (*path, index, 0))
        sizes.append((float(offset or 0.0), checks.count(pair[1], (*path, index, 1)) or 0))
    return sizes


# building an exchange


@dataclass(frozen=True, slots=True)
class Parts:
    """An exchange as a file holds it; `chunks` are (offset ms, size in bytes) or None."""

    method: str
    route: str
    upstream: str | None
    request_headers: Headers
    request_body: bytes
    status: int | None
    response_headers: Headers
    response_body: bytes
    chunks: Sequence[tuple[float, int]] | None = None
    complete: bool = True
    error: str | None = None
    note: str | None = None
    origin: Origin = Origin.LIVE
    started_at: float = 0.0
    ttfb_ms: float | None = None
    duration_ms: float | None = None
    asked_body: bytes | None = None  # where a fork's change rewrote what went upstream


def build_exchange(run_id: str, step: int, parts: Parts, path: Where) -> Exchange:
    """An exchange ready for a store: redacted, fingerprinted, summarized, its stream cut."""
    route = REDACTION.route(parts.route)
    chunks = _chunks(parts, path)
    response_headers = REDACTION.headers(parts.response_headers)
    response_body = parts.response_body
    if chunks is None:  # a file from elsewhere may hold secrets in a body too
        response_body = REDACTION.body(response_body, response_headers)
        response_headers = fit_length(response_headers, response_body)
    request_headers = REDACTION.headers(parts.request_headers)
    request_body = REDACTION.body(parts.request_body, request_headers)
    asked = None if parts.asked_body is None else REDACTION.body(parts.asked_body, request_headers)
    exchange = Exchange(
        run_id=run_id,
        step=step,
        method=parts.method.upper(),
        route=route,
        request_headers=request_headers,
        request_body=request_body,
        fingerprint=matching.fingerprint(
            parts.method, route, request_body if asked is None else asked, request_headers,
            masked=True,
        ),
        status=parts.status,
        response_headers=response_headers,
        response_body=response_body,
        chunks=chunks,
        complete=parts.complete,
        error=parts.error,
        note=parts.note,
        origin=parts.origin,
        upstream=None if parts.upstream is None else REDACTION.route(parts.upstream),
        started_at=parts.started_at,
        ttfb_ms=parts.ttfb_ms,
        duration_ms=parts.duration_ms,
        asked_body=asked,
    )
    exchange.summary = summarize_exchange(exchange)
    return exchange


def _chunks(parts: Parts, path: Where) -> list[Chunk] | None:
    body = parts.response_body
    if parts.chunks is None:
        if not is_event_stream(parts.response_headers):
            return None
        # A stream recorded whole (by vcrpy, or edited by hand): serve it event by event.
        cuts = [m.end() for m in _EVENT_END.finditer(body)]
        bounds = zip([0, *cuts], [*cuts, len(body)], strict=True)
        return [Chunk(0.0, body[a:b]) for a, b in bounds if b > a]
    total = sum(size for _, size in parts.chunks)
    if total != len(body):
        raise Invalid(
            path,
            f"the stream's chunk sizes add up to {total} bytes but its body has {len(body)}: "
            "after editing a stream's body, delete its `chunks` (it is then served event by "
            "event) or fix the sizes",
        )
    chunks, position = [], 0
    for offset_ms, size in parts.chunks:
        chunks.append(Chunk(float(offset_ms), body[position : position + size]))
        position += size
    return chunks
