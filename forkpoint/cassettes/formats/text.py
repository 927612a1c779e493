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
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any

import yaml

from forkpoint.cassettes.formats import json_forms
from forkpoint.cassettes.formats.interop import (
    NO_UPSTREAM,
    Invalid,
    Parts,
    Where,
    as_bytes,
    build_exchange,
    chunk_sizes,
    held_whole,
    need,
    optional,
    route_for,
    run_from_json,
    run_to_json,
    text_or_bytes,
    uri_for,
)
from forkpoint.engine.redaction import REDACTED
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Exchange, Headers, Origin, Run

__all__ = ["FORMAT_VERSION", "dumps", "loads", "read", "write"]

FORMAT_VERSION = 1  # forkpoint's extras; bumped when an older forkpoint would misread a file
VCR_VERSION = 1  # vcrpy's envelope
ONE_LINE = 100  # bytes: a body this short is shown as it is, never indented

# libyaml when PyYAML has it: parsing a 100-exchange cassette is then a few milliseconds.
_BaseDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    try:
        document = _parsed(text, source)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise CassetteError(
            f"{source}{line}: not valid YAML ({error.problem or error.context}); "
            "fix the file or re-record it"
        ) from None
    except yaml.YAMLError as error:
        what = " ".join(str(error).split())  # PyYAML's reader errors span lines
        raise CassetteError(f"{source}: not valid YAML ({what})") from None
    try:
        _check_versions(document)
        return _read(document, Path(source).stem, routes or {})
    except _TooNew as error:
        raise SchemaVersionError(
            f"{source}, line {_line(text, error.path)}: {error}",
            found=error.found,
            expected=error.expected,
        ) from None
    except Invalid as error:
        raise CassetteError(f"{source}, line {_line(text, error.path)}: {error}") from None


class _TooNew(Invalid):
    def __init__(self, path: Where, message: str, *, found: int, expected: int):
        super().__init__(path, message)
        self.found, self.expected = found, expected


def _check_versions(document: Any) -> None:
    if not isinstance(document, dict) or not isinstance(document.get("interactions"), list):
        raise Invalid((), "not a cassette: it has no `interactions` list")
    meta = optional(document, "forkpoint", dict, ()) or {}
    found = optional(meta, "format_version", int, ("forkpoint",)) or FORMAT_VERSION
    if found > FORMAT_VERSION:
        raise _TooNew(
            ("forkpoint", "format_version"),
            f"written by a newer forkpoint (text cassette format {found}; this forkpoint reads "
            f"up to {FORMAT_VERSION}): upgrade forkpoint to read it",
            found=found,
            expected=FORMAT_VERSION,
        )
    vcr = optional(document, "version", int, ()) or VCR_VERSION
    if vcr != VCR_VERSION:
        raise _TooNew(
            ("version",),
            f"vcrpy cassette format {vcr}; forkpoint reads format {VCR_VERSION}",
            found=vcr,
            expected=VCR_VERSION,
        )


def _read(
    document: dict[str, Any], name: str, routes: Mapping[str, str]
) -> tuple[Run, list[Exchange]]:
    meta = document.get("forkpoint") or {}
    run = run_from_json(
        optional(meta, "run", dict, ("forkpoint",)), ("forkpoint", "run"), default_name=name
    )
    interactions = document["interactions"]
    exchanges = [
        _exchange(run.id, step, item, routes, ("interactions", step))
        for step, item in enumerate(interactions)
    ]
    return run, exchanges


def _exchange(
    run_id: str, step: int, item: Any, routes: Mapping[str, str], path: Where
) -> Exchange:
    """One interaction; its position is its step (the `step` written beside it is a reading
    aid), so deleting one by hand leaves no gap."""
    request = need(item, "request", dict, path)
    response = need(item, "response", dict, path)
    extras = optional(item, "forkpoint", dict, path) or {}
    rq, rs, xp = (*path, "request"), (*path, "response"), (*path, "forkpoint")
    uri = need(request, "uri", str, rq)
    status = need(response, "status", dict, rs)
    body = optional(response, "body", dict, rs) or {}
    try:
        origin = Origin(extras.get("origin", Origin.LIVE))
    except ValueError as error:
        raise Invalid((*xp, "origin"), str(error)) from None
    parts = Parts(
        method=need(request, "method", str, rq),
        # forkpoint leaves out a route that is the uri's path; another tool's file has none
        route=optional(extras, "route", str, xp) or route_for(uri, {} if extras else routes),
        upstream=None if uri.startswith(NO_UPSTREAM) else uri,
        request_headers=_headers(request.get("headers"), (*rq, "headers")),
        request_body=_body(request.get("body"), extras, "request_json", (*rq, "body")),
        status=optional(status, "code", int, (*rs, "status")),
        response_headers=_headers(response.get("headers"), (*rs, "headers")),
        response_body=_body(body.get("string"), extras, "response_json", (*rs, "body")),
        chunks=chunk_sizes(extras.get("chunks"), (*xp, "chunks")),
        complete=bool(extras.get("complete", True)),
        error=optional(extras, "error", str, xp),
        note=optional(extras, "note", str, xp),
        origin=origin,
        started_at=optional(extras, "started_at", (int, float), xp) or 0.0,
        ttfb_ms=optional(extras, "ttfb_ms", (int, float), xp),
        duration_ms=optional(extras, "duration_ms", (int, float), xp),
    )
    return build_exchange(run_id, step, parts, path)


def _body(value: Any, extras: dict[str, Any], key: str, path: Where) -> bytes:
    """A body's bytes: as written, or written back in the JSON form the file names."""
    form = extras.get(key)
    if form is None or not isinstance(value, str):
        return as_bytes(value, path)
    try:
        return json_forms.restore(value, str(form))
    except ValueError as error:
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
            pairs.append((str(name), str(item)))
    return tuple(pairs)


def _parsed(text: str, source: str) -> Any:
    """The document in `text`, as `yaml.safe_load` gives it, parsed once: the C loader composes
    the nodes and `_Converter` builds the values, in a third of the time the alias pre-pass and
    PyYAML's constructor (a generator per mapping, a dispatch per node) took. A document it
    leaves, or fails on, goes the old way (the pre-pass, then PyYAML's constructor on the same
    nodes), so its value or its error is the one it always was."""
    loader = _Loader(text)
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError:
            _refuse_aliases(text, source)  # an alias ahead of the broken part is the error
            raise
        if node is None:
            return None
        try:
            return _Converter(loader).value(node)
        except Exception:
            # an alias, a merge key, a bad date, nesting too deep for a recursive walk: PyYAML's
            # answer, value or error, is the one the file always had
            _refuse_aliases(text, source)
            return loader.construct_document(node)
    finally:
        loader.dispose()


_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
# SafeConstructor's own function for each scalar tag that is not a string: the values are
# safe_load's (YAML 1.1: `0x1A`, `1_000`, `yes`, `~`, dates, `!!binary`…). A tag not here
# (`=`, a local `!tag`, a collection's tag on a scalar) leaves the document to PyYAML.
_SCALARS = {
    f"tag:yaml.org,2002:{name}": _Loader.yaml_constructors[f"tag:yaml.org,2002:{name}"]
    for name in ("null", "bool", "int", "float", "binary", "timestamp")
}


class _LeftToPyYAML(Exception):
    """A document `_Converter` does not build: an alias, a merge key, a tag it does not know."""


class _Converter:
    """Nodes to values: strings, dicts and lists here, other scalars by SafeConstructor. The
    composer shares an aliased node rather than copying it, so a node reached twice is an alias:
    the walk stops there, before an alias bomb can expand."""

    def __init__(self, loader: Any):
        self.loader = loader
        self.seen: set[yaml.Node] = set()

    def value(self, node: yaml.Node) -> Any:
        if node in self.seen:
            raise _LeftToPyYAML("an alias")
        self.seen.add(node)
        kind, tag = type(node), node.tag
        if kind is yaml.ScalarNode:
            if tag == _STR:
                return node.value
            if tag in _SCALARS:
                return _SCALARS[tag](self.loader, node)
        elif kind is yaml.MappingNode and tag == _MAP:
            return self.mapping(node)
        elif kind is yaml.SequenceNode and tag == _SEQ:
            return [self.value(item) for item in node.value]
        raise _LeftToPyYAML(f"a {kind.__name__} tagged {tag}")  # a `<<` key, !!set, !!omap…

    def mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        """As SafeConstructor builds one without merge keys: the last of a duplicate key wins."""
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node)
            result[key] = self.value(value_node)
        return result


def _refuse_aliases(text: str, source: str) -> None:
    """Refuse YAML aliases (`*name`): a few hundred bytes of them expand to gigabytes (an
    alias bomb) in whatever walks the document; no cassette needs them."""
    if "*" not in text:
        return
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent):
            raise CassetteError(
                f"{source}, line {event.start_mark.line + 1}: a YAML alias (*{event.anchor}) "
                "is not read in a cassette (aliases can expand without bound); write the value out"
            )


def _line(text: str, path: Where) -> int:
    """The 1-based line of the value at `path`, or of its nearest enclosing value that exists."""
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError:
        return 1
    if node is None:
        return 1
    line = node.start_mark.line
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if k.value == key), None)
            if found is None:
                break
            line, node = found[0].start_mark.line, found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line
        else:
            break
    return line + 1
