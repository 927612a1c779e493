"""JSON lines: a run byte for byte, for scripts and other tools (`jq`, pandas).

The first line is the run, every other line one exchange with its bodies exactly as they crossed
the wire (UTF-8 text, else base64) and a stream's chunks as `[offset ms, size in bytes]`.

    {"forkpoint": 1, "run": {"id": "01J…", "name": "ticket-1", …}}
    {"exchange": {"step": 0, "method": "POST", "route": "/v1/chat/completions", …}}
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from forkpoint.cassettes.formats.interop import (
    Invalid,
    Parts,
    Where,
    build_exchange,
    chunk_sizes,
    held_whole,
    need,
    optional,
    run_from_json,
    run_to_json,
)
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Exchange, Headers, Origin, Run

__all__ = ["FORMAT_VERSION", "dumps", "loads"]

FORMAT_VERSION = 1


def dumps(run: Run, exchanges: Sequence[Exchange]) -> str:
    lines = [{"forkpoint": FORMAT_VERSION, "run": run_to_json(run)}]
    lines += [{"exchange": _exchange_json(e)} for e in held_whole(exchanges, "JSON lines")]
    return "".join(orjson.dumps(line).decode() + "\n" for line in lines)


def _exchange_json(e: Exchange) -> dict[str, Any]:
    return {
        "step": e.step,
        "method": e.method,
        "route": e.route,
        "upstream": e.upstream,
        "request_headers": [list(pair) for pair in e.request_headers],
        "request_body": _body_json(e.request_body),
        "status": e.status,
        "response_headers": [list(pair) for pair in e.response_headers],
        "response_body": _body_json(e.response_body),
        "chunks": None if e.chunks is None else [[c.offset_ms, len(c.data)] for c in e.chunks],
        "complete": e.complete,
        "error": e.error,
        "note": e.note,
        "origin": e.origin.value,
        "started_at": e.started_at,
        "ttfb_ms": e.ttfb_ms,
        "duration_ms": e.duration_ms,
    }


def _body_json(body: bytes) -> dict[str, str]:
    try:
        return {"text": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(body).decode("ascii")}


def loads(
    text: str, *, source: str = "<string>", routes: Mapping[str, str] | None = None
) -> tuple[Run, list[Exchange]]:
    """The run in a file `dumps` wrote; `routes` is unused (every line names its route)."""
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise CassetteError(f"{source}: empty; a JSON lines cassette starts with its run")
    run: Run | None = None
    exchanges: list[Exchange] = []
    for number, line in lines:
        try:
            value = orjson.loads(line)
            if run is None:
                run = _run(value, source, number, Path(source).stem)
            else:
                parts = _parts(need(value, "exchange", dict, ()), ("exchange",))
                exchanges.append(build_exchange(run.id, len(exchanges), parts, ()))
        except orjson.JSONDecodeError as error:
            raise CassetteError(f"{source}, line {number}: not valid JSON ({error})") from None
        except Invalid as error:
            where = ".".join(str(key) for key in error.path)
            at = f" at {where}" if where else ""
            raise CassetteError(f"{source}, line {number}{at}: {error}") from None
    assert run is not None
    return run, exchanges


def _run(value: Any, source: str, number: int, name: str) -> Run:
    found = need(value, "forkpoint", int, ())
    if found > FORMAT_VERSION:
        raise SchemaVersionError(
            f"{source}, line {number}: written by a newer forkpoint (JSON lines format {found}; "
            f"this forkpoint reads up to {FORMAT_VERSION}): upgrade forkpoint to read it",
            found=found,
            expected=FORMAT_VERSION,
        )
    return run_from_json(need(value, "run", dict, ()), ("run",), default_name=name)


def _parts(data: dict[str, Any], path: Where) -> Parts:
    try:
        origin = Origin(data.get("origin", Origin.LIVE))
    except ValueError as error:
        raise Invalid((*path, "origin"), str(error)) from None
    return Parts(
        method=need(data, "method", str, path),
        route=need(data, "route", str, path),
        upstream=optional(data, "upstream", str, path),
        request_headers=_headers(data.get("request_headers"), (*path, "request_headers")),
        request_body=_body(data.get("request_body"), (*path, "request_body")),
        status=optional(data, "status", int, path),
        response_headers=_headers(data.get("response_headers"), (*path, "response_headers")),
        response_body=_body(data.get("response_body"), (*path, "response_body")),
        chunks=chunk_sizes(data.get("chunks"), (*path, "chunks")),
        complete=bool(data.get("complete", True)),
        error=optional(data, "error", str, path),
        note=optional(data, "note", str, path),
        origin=origin,
        started_at=optional(data, "started_at", (int, float), path) or 0.0,
        ttfb_ms=optional(data, "ttfb_ms", (int, float), path),
        duration_ms=optional(data, "duration_ms", (int, float), path),
    )


def _headers(value: Any, path: Where) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in value
    ):
        raise Invalid(path, "headers should be a list of [name, value]")
    return tuple((name, text) for name, text in value)


def _body(value: Any, path: Where) -> bytes:
    if value is None:
        return b""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"]).encode("utf-8")
    if isinstance(value, dict) and isinstance(value.get("base64"), str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except ValueError:
            raise Invalid(path, "invalid base64") from None
    raise Invalid(path, 'a body should be {"text": …} or {"base64": …}')
