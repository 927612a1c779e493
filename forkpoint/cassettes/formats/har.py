"""HAR 1.2: a run as browsers' developer tools and HTTP debuggers show it, and HAR files they
captured as runs.

HAR holds bodies decoded (`content.text`, base64 when not text), so a compressed response is
written decompressed and without its `Content-Encoding`, and read back the same way. forkpoint's
extras ride in `_forkpoint` fields, which HAR reserves for tools: the run on the log, each
entry's step, route, origin and a stream's chunks.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson

from forkpoint.cassettes.formats.interop import (
    NO_UPSTREAM,
    Invalid,
    Parts,
    Where,
    build_exchange,
    chunk_sizes,
    decoded_body,
    held_whole,
    need,
    optional,
    route_for,
    run_from_json,
    run_to_json,
    uri_for,
)
from forkpoint.engine.encoding import header
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Exchange, Headers, Origin, Run

__all__ = ["FORMAT_VERSION", "dumps", "loads"]

FORMAT_VERSION = 1  # of the `_forkpoint` extras


def dumps(run: Run, exchanges: Sequence[Exchange]) -> str:
    log = {
        "version": "1.2",
        "creator": {"name": "forkpoint", "version": "0.1.0"},
        "pages": [],
        "entries": [_entry(e) for e in held_whole(exchanges, "HAR")],
        "_forkpoint": {"format_version": FORMAT_VERSION, "run": run_to_json(run)},
    }
    return orjson.dumps({"log": log}, option=orjson.OPT_INDENT_2).decode() + "\n"


def _entry(e: Exchange) -> dict[str, Any]:
    # HAR holds bodies decoded; a stream stays as sent, since its chunk sizes count those bytes.
    request_headers, request_body = decoded_body(e.request_headers, e.request_body)
    response_headers, response_body = (
        (e.response_headers, e.response_body)
        if e.streamed
        else decoded_body(e.response_headers, e.response_body)
    )
    url = uri_for(e)
    ttfb = e.ttfb_ms or 0.0
    duration = e.duration_ms or ttfb
    request: dict[str, Any] = {
        "method": e.method,
        "url": url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": _har_headers(request_headers),
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query, True)],
        "headersSize": -1,
        "bodySize": len(e.request_body),
    }
    if request_body:
        request["postData"] = {
            "mimeType": header(request_headers, "content-type") or "",
            "text": request_body.decode("utf-8", errors="replace"),
        }
    extras: dict[str, Any] = {
        "step": e.step,
        "route": e.route,
        "origin": e.origin.value,
        "complete": e.complete,
        "error": e.error,
        "note": e.note,
    }
    if e.chunks is not None:
        extras["chunks"] = [[round(c.offset_ms, 3), len(c.data)] for c in e.chunks]
    # HAR holds decoded text; where that is not the bytes that crossed the wire, they are kept
    # beside it, so an import replays them exactly.
    raw = {
        side: {"headers": [list(pair) for pair in headers], "body": _b64(body)}
        for side, headers, body, shown in (
            ("request", e.request_headers, e.request_body, (request_headers, request_body)),
            ("response", e.response_headers, e.response_body, (response_headers, response_body)),
        )
        if shown != (headers, body) or not _is_utf8(body)
    }
    if raw:
        extras["raw"] = raw
    return {
        "startedDateTime": _started(e.started_at),
        "time": duration,
        "request": request,
        "response": {
            "status": e.status or 0,
            "statusText": _reason(e.status),
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": _har_headers(response_headers),
            "content": _content(response_headers, response_body),
            "redirectURL": "",
            "headersSize": -1,
            "bodySize": len(e.response_body),
        },
        "cache": {},
        "timings": {"send": 0, "wait": ttfb, "receive": max(duration - ttfb, 0.0)},
        "_forkpoint": extras,
    }


def _content(headers: Headers, body: bytes) -> dict[str, Any]:
    content: dict[str, Any] = {
        "size": len(body),
        "mimeType": header(headers, "content-type") or "",
    }
    try:
        content["text"] = body.decode("utf-8")
    except UnicodeDecodeError:
        content["text"], content["encoding"] = base64.b64encode(body).decode("ascii"), "base64"
    return content


def _b64(body: bytes) -> str:
    return base64.b64encode(body).decode("ascii")


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _har_headers(headers: Headers) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in headers]


def _reason(status: int | None) -> str:
    try:
        return HTTPStatus(status or 0).phrase
    except ValueError:
        return ""


def loads(
    text: str, *, source: str = "<string>", routes: Mapping[str, str] | None = None
) -> tuple[Run, list[Exchange]]:
    """The run in a HAR file, forkpoint's or another tool's; `routes` as for `text.loads`."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise CassetteError(f"{source}: not valid JSON ({error})") from None
    try:
        log = need(document, "log", dict, ())
        meta = optional(log, "_forkpoint", dict, ("log",)) or {}
        found = optional(meta, "format_version", int, ("log", "_forkpoint")) or FORMAT_VERSION
        if found > FORMAT_VERSION:
            raise SchemaVersionError(
                f"{source}: written by a newer forkpoint (HAR extras format {found}; this "
                f"forkpoint reads up to {FORMAT_VERSION}): upgrade forkpoint to read it",
                found=found,
                expected=FORMAT_VERSION,
            )
        run = run_from_json(
            optional(meta, "run", dict, ("log", "_forkpoint")),
            ("log", "_forkpoint", "run"),
            default_name=Path(source).stem,
        )
        entries = need(log, "entries", list, ("log",))
        exchanges = [
            build_exchange(run.id, step, _parts(entry, routes or {}, path), path)
            for step, entry in enumerate(entries)
            for path in [("log", "entries", step)]
        ]
    except Invalid as error:
        where = ".".join(str(key) for key in error.path) or "top level"
        raise CassetteError(f"{source}, at {where}: {error}") from None
    return run, exchanges


def _parts(entry: Any, routes: Mapping[str, str], path: Where) -> Parts:
    request = need(entry, "request", dict, path)
    response = need(entry, "response", dict, path)
    extras = optional(entry, "_forkpoint", dict, path) or {}
    rq, rs, xp = (*path, "request"), (*path, "response"), (*path, "_forkpoint")
    url = need(request, "url", str, rq)
    chunks = chunk_sizes(extras.get("chunks"), (*xp, "chunks"))
    response_headers = _headers(response.get("headers"), (*rs, "headers"))
    if chunks is None:  # the content is decoded: its encoding header no longer applies
        response_headers = tuple(
            (k, v) for k, v in response_headers if k.lower() != "content-encoding"
        )
    post = optional(request, "postData", dict, rq) or {}
    timings = optional(entry, "timings", dict, path) or {}
    try:
        origin = Origin(extras.get("origin", Origin.LIVE))
    except ValueError as error:
        raise Invalid((*xp, "origin"), str(error)) from None
    raw = optional(extras, "raw", dict, xp) or {}
    parts = Parts(
        method=need(request, "method", str, rq),
        route=optional(extras, "route", str, xp) or route_for(url, routes),
        upstream=None if url.startswith(NO_UPSTREAM) else url,
        request_headers=tuple(
            (k, v)
            for k, v in _headers(request.get("headers"), (*rq, "headers"))
            if k.lower() != "content-encoding"
        ),
        request_body=str(post.get("text") or "").encode("utf-8"),
        status=optional(response, "status", int, rs),
        response_headers=response_headers,
        response_body=_content_bytes(optional(response, "content", dict, rs) or {}, rs),
        chunks=chunks,
        complete=bool(extras.get("complete", True)),
        error=optional(extras, "error", str, xp),
        note=optional(extras, "note", str, xp),
        origin=origin,
        started_at=_timestamp(entry.get("startedDateTime")),
        ttfb_ms=optional(timings, "wait", (int, float), (*path, "timings")),
        duration_ms=optional(entry, "time", (int, float), path),
    )
    request, response = (
        optional(raw, side, dict, (*xp, "raw")) for side in ("request", "response")
    )
    if request is not None:
        headers, body = _raw(request, (*xp, "raw", "request"))
        parts = replace(parts, request_headers=headers, request_body=body)
    if response is not None:
        headers, body = _raw(response, (*xp, "raw", "response"))
        parts = replace(parts, response_headers=headers, response_body=body)
    return parts


def _raw(kept: dict[str, Any], path: Where) -> tuple[Headers, bytes]:
    """The headers and body bytes kept beside a side's decoded text."""
    pairs = []
    for index, pair in enumerate(need(kept, "headers", list, path)):
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            raise Invalid((*path, "headers", index), "a header should be [name, value]")
        pairs.append((pair[0], pair[1]))
    try:
        return tuple(pairs), base64.b64decode(need(kept, "body", str, path), validate=True)
    except ValueError:
        raise Invalid((*path, "body"), "invalid base64") from None


def _headers(value: Any, path: Where) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise Invalid(path, "headers should be a list of {name, value}")
    pairs = []
    for index, item in enumerate(value):
        name = need(item, "name", str, (*path, index))
        text = need(item, "value", str, (*path, index))
        # HTTP/2 captures list pseudo-headers (`:authority`); they are not headers to replay.
        if not name.startswith(":"):
            pairs.append((name, text))
    return tuple(pairs)


def _content_bytes(content: dict[str, Any], path: Where) -> bytes:
    text = content.get("text") or ""
    if content.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise Invalid((*path, "content"), "invalid base64 in `text`") from None
    return str(text).encode("utf-8")


def _started(timestamp: float) -> str:
    """A start time as HAR's ISO date; one no date can hold (a damaged row) as the epoch."""
    try:
        return datetime.fromtimestamp(timestamp, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return datetime.fromtimestamp(0, UTC).isoformat()


def _timestamp(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
