"""HAR 1.2: a run as browsers' developer tools and HTTP debuggers show it, and HAR files they
captured as runs.

HAR holds bodies decoded (`content.text`, base64 when not text), so a compressed response is
written decompressed and without its `Content-Encoding`, and read back the same way. forkpoint's
extras ride in `_forkpoint` fields, which HAR reserves for tools: the run on the log, each
entry's step, route, origin and a stream's chunks.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit

import ijson
import orjson

from forkpoint.cassettes.formats import checks, interop
from forkpoint.cassettes.formats.checks import Invalid, Where
from forkpoint.cassettes.formats.interop import (
    NO_UPSTREAM,
    NotThisFormat,
    Parts,
    build_exchange,
    choice,
    chunk_sizes,
    decoded_body,
    field,
    held_whole,
    millis,
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

__all__ = ["FORMAT_VERSION", "dumps", "loads", "read_exchanges", "read_run"]

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
    return interop.loads(read_run, read_exchanges, text, source=source, routes=routes)


def read_run(file: IO[bytes], *, source: str) -> Run:
    """The file's run (forkpoint's `log._forkpoint`, else a finished run named after the
    file), its version checked. The whole file is parsed, its entries passed over unbuilt:
    HAR puts nothing first, and a file that is no JSON is refused before anything is stored."""
    meta: Any = None
    shape = {"log": False, "log.entries": False}  # each seen, and of the right kind
    try:
        events = ijson.parse(file, use_float=True)
        if next(events, None) != ("", "start_map", None):
            raise NotThisFormat(f"{source}: not a HAR file: it is not a JSON object ({_SHAPE})")
        for prefix, event, value in events:
            if event != "map_key" or prefix not in ("", "log"):
                continue
            key = f"{prefix}.{value}".lstrip(".")
            if key in shape:
                shape[key] = next(events)[1] == ("start_map" if key == "log" else "start_array")
            elif key == "log._forkpoint":
                meta = _built(events)
    except ijson.JSONError as error:
        raise CassetteError(f"{source}: not valid JSON ({_first_line(error)})") from None
    if not all(shape.values()):
        missing = "`log` object" if not shape["log"] else "`log.entries` list"
        raise NotThisFormat(f"{source}: not a HAR file: it has no {missing} ({_SHAPE})")
    try:
        if meta is not None and not isinstance(meta, dict):
            raise Invalid(("log", "_forkpoint"), "`_forkpoint` should be an object")
        found = optional(meta or {}, "format_version", int, ("log", "_forkpoint")) or FORMAT_VERSION
        if found > FORMAT_VERSION:
            raise SchemaVersionError(
                f"{source}: written by a newer forkpoint (HAR extras format {found}; this "
                f"forkpoint reads up to {FORMAT_VERSION}): upgrade forkpoint to read it",
                found=found,
                expected=FORMAT_VERSION,
            )
        return run_from_json(
            optional(meta or {}, "run", dict, ("log", "_forkpoint")),
            ("log", "_forkpoint", "run"),
            default_name=Path(source).stem,
        )
    except Invalid as error:
        raise CassetteError(f"{source}: {field(error.path)}: {error}") from None


def read_exchanges(
    file: IO[bytes], run_id: str, *, source: str, routes: Mapping[str, str]
) -> Iterator[Exchange]:
    """The file's entries as exchanges of the run `run_id`, one at a time."""
    step = 0
    entries = ijson.items(file, "log.entries.item", use_float=True)
    while True:
        try:
            entry = next(entries, None)
        except ijson.JSONError as error:
            raise CassetteError(
                f"{source}: entry {step}: not valid JSON ({_first_line(error)})"
            ) from None
        if entry is None:
            return
        path = ("log", "entries", step)
        try:
            yield build_exchange(run_id, step, _parts(entry, routes, path), path)
        except Invalid as error:
            where = ", ".join(part for part in (f"entry {step}", field(error.path, 3)) if part)
            raise CassetteError(f"{source}: {where}: {error}") from None
        step += 1


# What a HAR is, as an error says it.
_SHAPE = 'a HAR is {"log": {"entries": [...]}}'


def _built(events: Iterator[tuple[str, str, Any]]) -> Any:
    """The value whose events come next (a map's, a list's or a scalar's), built."""
    builder = ijson.ObjectBuilder()
    depth = 0
    for _, event, value in events:
        builder.event(event, value)
        depth += event in ("start_map", "start_array")
        depth -= event in ("end_map", "end_array")
        if depth == 0:
            break
    return builder.value


def _first_line(error: Exception) -> str:
    """yajl's message without the lines that point at the text."""
    text = error.args[0] if error.args else ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return str(text).strip().splitlines()[0] if str(text).strip() else "cut short"


def _parts(entry: Any, routes: Mapping[str, str], path: Where) -> Parts:
    request = need(entry, "request", dict, path)
    response = need(entry, "response", dict, path)
    extras = optional(entry, "_forkpoint", dict, path) or {}
    rq, rs, xp = (*path, "request"), (*path, "response"), (*path, "_forkpoint")
    url = checks.url(need(request, "url", str, rq), (*rq, "url"))
    chunks = chunk_sizes(extras.get("chunks"), (*xp, "chunks"))
    response_headers = _headers(response.get("headers"), (*rs, "headers"))
    if chunks is None:  # the content is decoded: its encoding header no longer applies
        response_headers = tuple(
            (k, v) for k, v in response_headers if k.lower() != "content-encoding"
        )
    post = optional(request, "postData", dict, rq) or {}
    timings = optional(entry, "timings", dict, path) or {}
    raw = optional(extras, "raw", dict, xp) or {}
    route = optional(extras, "route", str, xp)
    status = optional(response, "status", int, rs)
    checks.count(optional(extras, "step", int, xp), (*xp, "step"))  # a reading aid
    parts = Parts(
        method=checks.method(need(request, "method", str, rq), (*rq, "method")),
        route=checks.route(
            route or route_for(url, routes), (*xp, "route") if route else (*rq, "url")
        ),
        upstream=None if url.startswith(NO_UPSTREAM) else url,
        request_headers=tuple(
            (k, v)
            for k, v in _headers(request.get("headers"), (*rq, "headers"))
            if k.lower() != "content-encoding"
        ),
        request_body=(optional(post, "text", str, (*rq, "postData")) or "").encode("utf-8"),
        # HAR's 0: no response
        status=checks.status(status or None, (*rs, "status")),
        response_headers=response_headers,
        response_body=_content_bytes(optional(response, "content", dict, rs) or {}, rs),
        chunks=chunks,
        complete=optional(extras, "complete", bool, xp) is not False,
        error=optional(extras, "error", str, xp),
        note=optional(extras, "note", str, xp),
        origin=choice(Origin, extras, "origin", Origin.LIVE, xp),
        started_at=_timestamp(
            optional(entry, "startedDateTime", str, path), (*path, "startedDateTime")
        ),
        ttfb_ms=_millis(timings, "wait", (*path, "timings")),
        duration_ms=_millis(entry, "time", path),
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


def _millis(container: dict[str, Any], key: str, path: Where) -> float | None:
    """A HAR time in ms; its -1, "not applicable", is None."""
    return None if container.get(key) == -1 else millis(container, key, path)


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
        body = base64.b64decode(need(kept, "body", str, path), validate=True)
    except ValueError:
        raise Invalid((*path, "body"), "invalid base64") from None
    return checks.headers(pairs, (*path, "headers")), body


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
    return checks.headers(pairs, path)


def _content_bytes(content: dict[str, Any], path: Where) -> bytes:
    text = optional(content, "text", str, (*path, "content")) or ""
    if optional(content, "encoding", str, (*path, "content")) == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise Invalid((*path, "content", "text"), "invalid base64 in `text`") from None
    return text.encode("utf-8")


def _started(timestamp: float) -> str:
    """A start time as HAR's ISO date; one no date can hold (a damaged row) as the epoch."""
    try:
        return datetime.fromtimestamp(timestamp, UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return datetime.fromtimestamp(0, UTC).isoformat()


def _timestamp(value: str | None, path: Where) -> float:
    """HAR's ISO date as seconds since the epoch (none given: 0)."""
    if value is None:
        return 0.0
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        raise Invalid(path, f"{checks.shown(value)} is not an ISO date") from None
    return checks.timestamp(moment, path) or 0.0
