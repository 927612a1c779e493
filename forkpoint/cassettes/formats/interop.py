"""What the file formats share: runs as plain values, URIs and routes, readable bodies, and
one way to build an exchange from a file's parts.

Every format module (text, jsonl, har) reads its own envelope and hands the parts to
`build_exchange`, which redacts credentials again (a foreign file may hold them), recomputes
the fingerprint and the summary from the bodies (so a hand edit is what gets matched), and cuts
a stream into its chunks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

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

Where = tuple[str | int, ...]  # where in a document a value sits: ("interactions", 3, "request")


def held_whole(exchanges: Sequence[Exchange], fmt: str) -> Sequence[Exchange]:
    """`exchanges`, checked whole: a file holds every body in one document, in memory, so a
    body too large to hold (in pieces in its store) is refused, never cut short."""
    for e in exchanges:
        if e.pieces:
            raise CassetteError(
                f"run {e.run_id} step {e.step} has a response body of {e.body_size} bytes, "
                f"{e.body_size - len(e.response_body)} of them in pieces: a {fmt} file holds "
                "bodies whole, too large a one is not exported (move the run between stores "
                "with `forkpoint copy`)",
                run_id=e.run_id, step=e.step,
            )  # fmt: skip
    return exchanges


class Invalid(ValueError):
    """A value in a cassette file that cannot be read; `path` says where it sits."""

    def __init__(self, path: Where, message: str):
        super().__init__(message)
        self.path = path


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


def optional(
    container: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: Where
) -> Any:
    """Like `need`, but an absent or null value is None."""
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
    try:
        status, mode = RunStatus(data.get("status", "finished")), Mode(data.get("mode", "record"))
    except ValueError as error:
        raise Invalid(path, str(error)) from None
    labels = optional(data, "labels", dict, path) or {}
    return Run(
        id=optional(data, "id", str, path) or new_run_id(),
        name=optional(data, "name", str, path) or default_name,
        labels={str(k): str(v) for k, v in labels.items()},
        status=status,
        mode=mode,
        parent_id=optional(data, "parent_id", str, path),
        fork_step=optional(data, "fork_step", int, path),
        change=optional(data, "change", dict, path),
        created_at=optional(data, "created_at", (int, float), path) or time.time(),
        ended_at=optional(data, "ended_at", (int, float), path),
        error=optional(data, "error", str, path),
    )


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
    """A stream's `[[offset ms, size in bytes], …]`, checked."""
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
            and pair[1] >= 0
        ):
            message = f"a chunk should be [offset ms, size in bytes], not {pair!r}"
            raise Invalid((*path, index), message)
        sizes.append((float(pair[0]), pair[1]))
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
    exchange = Exchange(
        run_id=run_id,
        step=step,
        method=parts.method.upper(),
        route=route,
        request_headers=request_headers,
        request_body=request_body,
        fingerprint=matching.fingerprint(
            parts.method, route, request_body, request_headers, masked=True
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
