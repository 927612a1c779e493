"""Text cassettes: one run per YAML file, for reviewers to read in a pull request and for vcrpy
to play.

The envelope is vcrpy's (`interactions` of `request` and `response`, `version: 1`), so
`vcr.use_cassette(path)` plays the file in-process. What only forkpoint needs sits under
`forkpoint` keys that vcrpy ignores: the run at the top, and per exchange its step, route,
origin, timings and, for a stream, its chunks as `[offset ms, size in bytes]` over the body.
Every body is kept byte for byte, since an agent may hand a tool's raw bytes to its model:
a JSON body is shown indented only where that loses no byte (`json_forms`: the file names
how to write it back), streams stay as their events, compressed bodies as `!!binary`. Files
recorded by vcrpy itself load too.

    run, exchanges = read("tests/cassettes/test_agent/test_refund.yaml")
    write(path, run, exchanges)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any

import yaml

from forkpoint.cassettes.formats import checks, interop, json_forms
from forkpoint.cassettes.formats.checks import Invalid, Where
from forkpoint.cassettes.formats.interop import (
    NO_UPSTREAM,
    Parts,
    as_bytes,
    build_exchange,
    choice,
    chunk_sizes,
    field,
    held_whole,
    millis,
    need,
    optional,
    route_for,
    run_from_json,
    run_to_json,
    seconds,
    text_or_bytes,
    uri_for,
)
from forkpoint.cassettes.formats.yaml_values import INTERACTIONS, Document, Entry
from forkpoint.engine.redaction import REDACTED
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Exchange, Headers, Origin, Run

__all__ = ["FORMAT_VERSION", "dumps", "loads", "read", "read_exchanges", "read_run", "write"]

FORMAT_VERSION = 1  # forkpoint's extras; bumped when an older forkpoint would misread a file
VCR_VERSION = 1  # vcrpy's envelope
ONE_LINE = 100  # bytes: a body this short is shown as it is, never indented

# libyaml when PyYAML has it.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[misc, valid-type]
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a cassette has no anchors or aliases: the reader refuses them


class _Flow(list):  # type: ignore[type-arg]
    """A list written on one line: a chunk's `[offset, size]`, a header's values."""


class _FlowMap(dict):  # type: ignore[type-arg]
    """A mapping written on one line: an exchange's extras, a status."""


def _represent_str(dumper: Any, value: str) -> Any:
    # Multi-line text (pretty JSON, SSE events) as a block: one line in the file per line.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_flow(dumper: Any, value: _Flow) -> Any:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=True)


def _represent_flow_map(dumper: Any, value: _FlowMap) -> Any:
    return dumper.represent_mapping("tag:yaml.org,2002:map", value.items(), flow_style=True)


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(_Flow, _represent_flow)
_Dumper.add_representer(_FlowMap, _represent_flow_map)


# writing


def dumps(run: Run, exchanges: Sequence[Exchange]) -> str:
    document = {
        "forkpoint": {"format_version": FORMAT_VERSION, "run": _run(run)},
        "interactions": [_interaction(e) for e in held_whole(exchanges, "vcr")],
        "version": VCR_VERSION,
    }
    text = yaml.dump(
        document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100, indent=2
    )
    return text


def write(path: str | os.PathLike[str], run: Run, exchanges: Sequence[Exchange]) -> None:
    """Write the file whole, through a temporary file, so a crash never leaves half of one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own, so xdist workers recording one shared cassette never mix their bytes.
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        temporary.write_text(dumps(run, exchanges), encoding="utf-8")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _interaction(e: Exchange) -> dict[str, Any]:
    """vcrpy's request and response, and forkpoint's extras: the route (one upstream may
    serve several), and what differs from what a reader assumes (a live, complete exchange),
    so a cassette is no larger than it needs to be."""
    uri = uri_for(e)
    extras: dict[str, Any] = {"step": e.step}
    if e.route != route_for(uri, {}):  # else a reader takes it from the uri
        extras["route"] = e.route
    if e.origin is not Origin.LIVE:
        extras["origin"] = e.origin.value
    if not e.complete:
        extras["complete"] = False
    if e.error is not None:
        extras["error"] = e.error
    if e.note is not None:
        extras["note"] = e.note
    extras.update(started_at=e.started_at, ttfb_ms=e.ttfb_ms, duration_ms=e.duration_ms)
    if e.chunks is not None:
        extras["chunks"] = [_Flow([round(c.offset_ms, 3), len(c.data)]) for c in e.chunks]
    # The request is what a reviewer reads (the prompt, the conversation): indented where that
    # changes no byte. An answer is kept as it came, on one line, as vcrpy keeps it.
    request_shown = _shown(e.request_body, extras, "request_json")
    return {
        "request": {
            "method": e.method,
            "uri": uri,
            "body": request_shown if e.request_body else None,
            # a masked credential says nothing a replay needs: left out, as vcrpy filters it
            "headers": _vcr_headers(tuple(p for p in e.request_headers if p[1] != REDACTED)),
        },
        "response": {
            "status": _FlowMap(code=e.status, message=_reason(e.status)),
            "headers": _vcr_headers(e.response_headers),
            "body": {"string": text_or_bytes(e.response_body)},
        },
        # on one line, but a stream's chunks stay one to a line, for whoever edits its body
        "forkpoint": _set(extras) if e.chunks is not None else _FlowMap(_set(extras)),
    }


def _set(values: dict[str, Any]) -> dict[str, Any]:
    """The entries a reader does not default: no None, no empty label set."""
    return {k: v for k, v in values.items() if v is not None and v != {}}


def _run(run: Run) -> dict[str, Any]:
    """The run, less what a reader defaults to (a finished recording)."""
    values = _set(run_to_json(run))
    if values["status"] == "finished":
        del values["status"]
    if values["mode"] == "record":
        del values["mode"]
    for key in ("created_at", "ended_at"):
        if key in values:
            values[key] = _ms(values[key])
    return values


def _ms(timestamp: float) -> float:
    """A time to the millisecond: the file's own precision."""
    return round(timestamp, 3)


def _shown(body: bytes, extras: dict[str, Any], key: str) -> str | bytes:
    """How a body is written: indented JSON where its form gives back its bytes (noted in
    `extras[key]`), else text, else `!!binary`."""
    if len(body) <= ONE_LINE:  # as readable as it is: indenting would only add bytes
        return text_or_bytes(body)
    form = json_forms.exact_form(body)
    if form is None:
        return text_or_bytes(body)
    extras[key] = form
    return json_forms.pretty(body)


def _vcr_headers(headers: Headers) -> dict[str, _Flow]:
    grouped: dict[str, _Flow] = {}
    for name, value in headers:
        grouped.setdefault(name, _Flow()).append(value)
    return grouped


def _reason(status: int | None) -> str:
    try:
        return HTTPStatus(status or 0).phrase
    except ValueError:
        return ""


# reading


def read(
    path: str | os.PathLike[str], *, routes: Mapping[str, str] | None = None
) -> tuple[Run, list[Exchange]]:
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CassetteError(f"no cassette at {source}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CassetteError(f"cannot read {source}: {error}") from None
    return loads(text, source=str(source), routes=routes)


def loads(
    text: str, *, source: str = "<string>", routes: Mapping[str, str] | None = None
) -> tuple[Run, list[Exchange]]:
    """The run in a forkpoint or vcrpy YAML cassette; `source` names the file in errors.

    `routes` (prefix → base URL) gives a vcrpy file's requests the routes an agent would use
    through the gateway, e.g. `{"anthropic": "https://api.anthropic.com"}`.
    """
    return interop.loads(read_run, read_exchanges, text, source=source, routes=routes)


def read_run(file: IO[bytes], *, source: str) -> Run:
    """The file's run (forkpoint's `forkpoint.run`, else a finished run named after the file),
    its versions checked; the interactions are passed over, never built."""
    document = Document(file, source)
    for entry in _read(document, interactions=False):
        found = _meta(document, entry, Path(source).stem)
        if found is not None:
            return found
    return run_from_json(None, (), default_name=Path(source).stem)


def read_exchanges(
    file: IO[bytes], run_id: str, *, source: str, routes: Mapping[str, str]
) -> Iterator[Exchange]:
    """The file's interactions as exchanges of the run `run_id`, one at a time; each one's
    position is its step (the `step` written beside it is a reading aid), so deleting one by
    hand leaves no gap."""
    document = Document(file, source)
    for entry in _read(document, interactions=True):
        if entry.path[0] != INTERACTIONS:
            _meta(document, entry, Path(source).stem)
            continue
        step = int(entry.path[1])
        try:
            yield _exchange(run_id, step, entry.value, routes, entry.path)
        except Invalid as error:
            raise _located(document, entry, error) from None


def _read(document: Document, *, interactions: bool) -> Iterator[Entry]:
    """The document's entries; a value that does not build is an error naming its line."""
    entries = document.entries(interactions=interactions)
    while True:
        try:
            entry = next(entries, None)
        except Invalid as error:
            raise _located(document, None, error) from None
        if entry is None:
            return
        yield entry


def _meta(document: Document, entry: Entry, name: str) -> Run | None:
    """A top-level entry other than `interactions`: the versions are checked as they come,
    and `forkpoint`'s run is read."""
    key, value = entry.path[0], entry.value
    try:
        if key == "version":
            vcr = optional({"version": value}, "version", int, ()) or VCR_VERSION
            if vcr != VCR_VERSION:
                raise _TooNew(
                    ("version",), f"vcrpy cassette format {vcr}; forkpoint reads format "
                    f"{VCR_VERSION}", found=vcr, expected=VCR_VERSION,
                )  # fmt: skip
        if key != "forkpoint":
            return None
        meta = optional({"forkpoint": value}, "forkpoint", dict, ()) or {}
        found = optional(meta, "format_version", int, ("forkpoint",)) or FORMAT_VERSION
        if found > FORMAT_VERSION:
            raise _TooNew(
                ("forkpoint", "format_version"),
                f"written by a newer forkpoint (text cassette format {found}; this forkpoint "
                f"reads up to {FORMAT_VERSION}): upgrade forkpoint to read it",
                found=found,
                expected=FORMAT_VERSION,
            )
        return run_from_json(
            optional(meta, "run", dict, ("forkpoint",)), ("forkpoint", "run"), default_name=name
        )
    except _TooNew as error:
        raise SchemaVersionError(
            f"{document.source}, line {document.line(error.path, entry.line)}: {error}",
            found=error.found,
            expected=error.expected,
        ) from None
    except Invalid as error:
        raise _located(document, entry, error) from None


def _located(document: Document, entry: Entry | None, error: Invalid) -> CassetteError:
    """The error as a user reads it: the file, the line, the interaction and the field."""
    path = error.path
    line = error.line or document.line(path, entry.line if entry else 1)
    item = f"interaction {path[1]}" if path[:1] == (INTERACTIONS,) and len(path) > 1 else ""
    where = ", ".join(part for part in (item, field(path, 2 if item else 0)) if part)
    return CassetteError(
        f"{document.source}, line {line}: " + (f"{where}: " if where else "") + str(error)
    )


class _TooNew(Invalid):
    def __init__(self, path: Where, message: str, *, found: int, expected: int):
        super().__init__(path, message)
        self.found, self.expected = found, expected


def _exchange(
    run_id: str, step: int, item: Any, routes: Mapping[str, str], path: Where
) -> Exchange:
    """One interaction, every value checked."""
    request = need(item, "request", dict, path)
    response = need(item, "response", dict, path)
    extras = optional(item, "forkpoint", dict, path) or {}
    rq, rs, xp = (*path, "request"), (*path, "response"), (*path, "forkpoint")
    uri = checks.url(need(request, "uri", str, rq), (*rq, "uri"))
    status = need(response, "status", dict, rs)
    body = optional(response, "body", dict, rs) or {}
    checks.count(optional(extras, "step", int, xp), (*xp, "step"))  # a reading aid
    route = optional(extras, "route", str, xp)
    parts = Parts(
        method=checks.method(need(request, "method", str, rq), (*rq, "method")),
        # forkpoint leaves out a route that is the uri's path; another tool's file has none
        route=checks.route(
            route or route_for(uri, {} if extras else routes),
            (*xp, "route") if route else (*rq, "uri"),
        ),
        upstream=None if uri.startswith(NO_UPSTREAM) else uri,
        request_headers=_headers(request.get("headers"), (*rq, "headers")),
        request_body=_body(request.get("body"), extras, "request_json", (*rq, "body")),
        status=checks.status(
            optional(status, "code", int, (*rs, "status")), (*rs, "status", "code")
        ),
        response_headers=_headers(response.get("headers"), (*rs, "headers")),
        response_body=_body(body.get("string"), extras, "response_json", (*rs, "body", "string")),
        chunks=chunk_sizes(extras.get("chunks"), (*xp, "chunks")),
        complete=optional(extras, "complete", bool, xp) is not False,
        error=optional(extras, "error", str, xp),
        note=optional(extras, "note", str, xp),
        origin=choice(Origin, extras, "origin", Origin.LIVE, xp),
        started_at=seconds(extras, "started_at", xp) or 0.0,
        ttfb_ms=millis(extras, "ttfb_ms", xp),
        duration_ms=millis(extras, "duration_ms", xp),
    )
    return build_exchange(run_id, step, parts, path)


def _body(value: Any, extras: dict[str, Any], key: str, path: Where) -> bytes:
    """A body's bytes: as written, or written back in the JSON form the file names."""
    form = extras.get(key)
    if form is None or not isinstance(value, str):
        return as_bytes(value, path)
    try:
        return json_forms.restore(value, str(form))
    except (ValueError, RecursionError) as error:
        raise Invalid(path, f"a body marked {key}={form!r} must be JSON: {error}") from None


def _headers(value: Any, path: Where) -> Headers:
    """vcrpy's `{name: [values]}` (or `{name: value}`, as hand-written files have it)."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise Invalid(path, "headers should be a mapping of name to a list of values")
    pairs: list[tuple[str, str]] = []
    for name, values in value.items():
        for item in values if isinstance(values, list) else [values]:
            if not isinstance(item, str | int) or isinstance(item, bool):
                raise Invalid(
                    (*path, str(name)), f"a header's value should be text, not {checks.shown(item)}"
                )
            pairs.append((str(name), str(item)))
    return checks.headers(pairs, path)
