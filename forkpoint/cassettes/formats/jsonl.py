"""JSON lines: a run byte for byte, for scripts and other tools (`jq`, pandas).

The first line is the run, every other line one exchange with its bodies exactly as they crossed
the wire (UTF-8 text, else base64) and a stream's chunks as `[offset ms, size in bytes]`.

    {"forkpoint": 1, "run": {"id": "01J…", "name": "ticket-1", …}}
    {"exchange": {"step": 0, "method": "POST", "route": "/v1/chat/completions", …}}
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from forkpoint.cassettes.formats import checks, interop
from forkpoint.cassettes.formats.checks import Invalid, Where
from forkpoint.cassettes.formats.interop import (
    Parts,
    build_exchange,
    choice,
    chunk_sizes,
    field,
    held_whole,
    millis,
    need,
    optional,
    run_from_json,
    run_to_json,
    seconds,
)
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Exchange, Headers, Origin, Run

__all__ = ["FORMAT_VERSION", "dumps", "loads", "read_exchanges", "read_run"]

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
        **({} if e.asked_body is None else {"asked_body": _body_json(e.asked_body)}),
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
    return interop.loads(read_run, read_exchanges, text, source=source, routes=routes)


def read_run(file: IO[bytes], *, source: str) -> Run:
    """The run on the file's first line, its format version checked."""
    for number, line in _lines(file, source):
        found = _parse(line, source, number, "")
        try:
            version = need(found, "forkpoint", int, ())
            if version > FORMAT_VERSION:
                raise SchemaVersionError(
                    f"{source}, line {number}: written by a newer forkpoint (JSON lines format "
                    f"{version}; this forkpoint reads up to {FORMAT_VERSION}): upgrade forkpoint "
                    "to read it",
                    found=version,
                    expected=FORMAT_VERSION,
                )
            return run_from_json(
                need(found, "run", dict, ()), ("run",), default_name=Path(source).stem
            )
        except Invalid as error:
            raise _located(source, number, "", error) from None
    raise CassetteError(f"{source}: empty; a JSON lines cassette starts with its run")


def read_exchanges(
    file: IO[bytes], run_id: str, *, source: str, routes: Mapping[str, str]
) -> Iterator[Exchange]:
    """The exchanges on the lines after the run's, one a line, one at a time."""
    lines = _lines(file, source)
    next(lines, None)  # the run's: read by `read_run`
    for step, (number, line) in enumerate(lines):
        item = f"exchange {step}"
        value = _parse(line, source, number, item)
        try:
            parts = _parts(need(value, "exchange", dict, ()), ("exchange",))
            yield build_exchange(run_id, step, parts, ())
        except Invalid as error:
            raise _located(source, number, item, error) from None


def _lines(file: IO[bytes], source: str) -> Iterator[tuple[int, bytes]]:
    """The file's lines that are not blank, numbered from 1."""
    try:
        for number, line in enumerate(file, 1):
            if line.strip():
                yield number, line
    except OSError as error:
        raise CassetteError(f"cannot read {source}: {error}") from None


def _parse(line: bytes, source: str, number: int, item: str) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as error:
        at = f" {item}:" if item else ""
        raise CassetteError(f"{source}, line {number}:{at} not valid JSON ({error})") from None


def _located(source: str, number: int, item: str, error: Invalid) -> CassetteError:
    """The error as a user reads it: the file, the line, the exchange and the field."""
    where = ", ".join(part for part in (item, field(error.path, 1 if item else 0)) if part)
    return CassetteError(
        f"{source}, line {number}: " + (f"{where}: " if where else "") + str(error)
    )


def _parts(data: dict[str, Any], path: Where) -> Parts:
    return Parts(
        method=checks.method(need(data, "method", str, path), (*path, "method")),
        route=checks.route(need(data, "route", str, path), (*path, "route")),
        upstream=_url(optional(data, "upstream", str, path), (*path, "upstream")),
        request_headers=_headers(data.get("request_headers"), (*path, "request_headers")),
        request_body=_body(data.get("request_body"), (*path, "request_body")),
        status=checks.status(optional(data, "status", int, path), (*path, "status")),
        response_headers=_headers(data.get("response_headers"), (*path, "response_headers")),
        response_body=_body(data.get("response_body"), (*path, "response_body")),
        chunks=chunk_sizes(data.get("chunks"), (*path, "chunks")),
        complete=optional(data, "complete", bool, path) is not False,
        error=optional(data, "error", str, path),
        note=optional(data, "note", str, path),
        origin=choice(Origin, data, "origin", Origin.LIVE, path),
        started_at=seconds(data, "started_at", path) or 0.0,
        ttfb_ms=millis(data, "ttfb_ms", path),
        duration_ms=millis(data, "duration_ms", path),
        asked_body=None if "asked_body" not in data else _body(
            data["asked_body"], (*path, "asked_body")
        ),
    )


def _url(value: str | None, path: Where) -> str | None:
    return None if value is None else checks.url(value, path)


def _headers(value: Any, path: Where) -> Headers:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in value
    ):
        raise Invalid(path, "headers should be a list of [name, value]")
    return checks.headers(((name, text) for name, text in value), path)


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
