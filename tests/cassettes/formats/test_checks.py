"""Every value a cassette file holds is checked before it is stored (issue 25.7): what HTTP
allows and a store can hold, in every format, with an error naming the file, the exchange and
the field. Before, `status: -200` was imported and replayed as `HTTP/1.1 -200`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
import yaml

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.errors import CassetteError
from forkpoint.models import Chunk, Run
from tests.builders import exchange

STREAM = exchange(
    response_headers=(("content-type", "text/event-stream"),),
    response_body=b"data: 1\n\ndata: 2\n\n",
    chunks=[Chunk(1.0, b"data: 1\n\n"), Chunk(2.0, b"data: 2\n\n")],
    upstream="https://api.openai.com/v1/chat/completions",
)
RUN = Run(id="r", name="checked")

Edit = Callable[[Any], None]  # changes one value of a parsed file


def _yaml(edit: Edit) -> str:
    document = yaml.safe_load(text.dumps(RUN, [STREAM]))
    edit(document)
    return yaml.safe_dump(document)


def _har(edit: Edit) -> str:
    document = orjson.loads(har.dumps(RUN, [STREAM]))
    edit(document)
    return orjson.dumps(document).decode()


def _jsonl(edit: Edit) -> str:
    lines = [orjson.loads(line) for line in jsonl.dumps(RUN, [STREAM]).splitlines()]
    edit(lines)
    return "".join(orjson.dumps(line).decode() + "\n" for line in lines)


def at(*path: str | int, value: Any = None, append: Any = None) -> Edit:
    """An edit setting the value at `path` (or appending `append` to the list there)."""

    def edit(document: Any) -> None:
        node = document
        for key in path[:-1]:
            node = node[key]
        if append is not None:
            node[path[-1]].append(append)
        else:
            node[path[-1]] = value

    return edit


# Per format: how to write it, then per field its path from the exchange (or the run).
FORMATS = {
    "yaml": (_yaml, ("interactions", 0), ("forkpoint", "run"), text.loads),
    "har": (_har, ("log", "entries", 0), ("log", "_forkpoint", "run"), har.loads),
    "jsonl": (_jsonl, (1, "exchange"), (0, "run"), jsonl.loads),
}
FIELDS: dict[str, dict[str, tuple[str | int, ...]]] = {
    "status": {
        "yaml": ("response", "status", "code"),
        "har": ("response", "status"),
        "jsonl": ("status",),
    },
    "method": {"yaml": ("request", "method"), "har": ("request", "method"), "jsonl": ("method",)},
    "url": {"yaml": ("request", "uri"), "har": ("request", "url"), "jsonl": ("upstream",)},
    "route": {
        "yaml": ("forkpoint", "route"),
        "har": ("_forkpoint", "route"),
        "jsonl": ("route",),
    },
    "chunks": {
        "yaml": ("forkpoint", "chunks"),
        "har": ("_forkpoint", "chunks"),
        "jsonl": ("chunks",),
    },
    "ttfb": {"yaml": ("forkpoint", "ttfb_ms"), "har": ("time",), "jsonl": ("ttfb_ms",)},
    "complete": {
        "yaml": ("forkpoint", "complete"),
        "har": ("_forkpoint", "complete"),
        "jsonl": ("complete",),
    },
}
BAD = [
    # field, value, what the error says
    ("status", -200, "status -200 is not an HTTP status (100 to 599)"),
    ("status", 99, "status 99 is not an HTTP status"),
    ("status", 600, "status 600 is not an HTTP status"),
    ("status", 2**40, "is not an HTTP status"),
    ("status", "200", "should be int, not str"),
    ("method", "GET /admin HTTP/1.1\r\nX:", "is not an HTTP method"),
    ("method", "", "is not an HTTP method"),
    ("method", "G" * 100, "is not an HTTP method"),
    ("url", "ftp://files.example/x", "is not an absolute http(s) or ws(s) URL"),
    ("url", "http://x/a b", "is not an absolute http(s) or ws(s) URL"),
    ("url", "http://[::1", "is not a URL"),
    ("url", "http://x:99999/", "is not a URL"),
    ("route", "v1/chat", "is not a path from /"),
    ("route", "/v1\r\nHost: evil", "is not a path from /"),
    ("chunks", [[-5, 9], [2.0, 9]], "is not a time in ms"),
    ("chunks", [[1.0, -9], [2.0, 27]], "is out of range"),
    ("chunks", [[1.0, 9], [2.0, True]], "a chunk should be [offset ms, size in bytes]"),
    ("chunks", [[1.0, 9], [2.0, 10]], "chunk sizes add up to 19 bytes but its body has 18"),
    ("ttfb", -3.5, "-3.5 is not a time in ms"),
    ("complete", "no", "`complete` should be bool, not str"),
]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("name, value, message", BAD)
def test_a_bad_value_is_refused_naming_file_exchange_and_field(fmt, name, value, message):
    write, exchange_path, _, loads = FORMATS[fmt]
    field = FIELDS[name][fmt]
    content = write(at(*exchange_path, *field, value=value))
    with pytest.raises(CassetteError) as caught:
        loads(content, source=f"f.{fmt}")
    error = str(caught.value)
    assert error.startswith(f"f.{fmt}") and message in error, error
    assert ("interaction 0", "entry 0", "exchange 0")[list(FORMATS).index(fmt)] in error, error
    assert "\n" not in error


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(
    "header, message",
    [
        (("x-bad name", "v"), "header name 'x-bad name' is not a token"),
        (("", "v"), "header name '' is not a token"),
        (("x-injected", "v\r\nSet-Cookie: a=b"), "x-injected's value holds a control character"),
        (("x-nul", "v\x00"), "x-nul's value holds a control character"),
    ],
)
def test_header_names_and_values_are_what_http_allows(fmt, header, message):
    write, exchange_path, _, loads = FORMATS[fmt]
    name, value = header
    if fmt == "yaml":
        edit = at(*exchange_path, "response", "headers", name, value=[value])
    elif fmt == "har":
        edit = at(*exchange_path, "response", "headers", append={"name": name, "value": value})
    else:
        edit = at(*exchange_path, "response_headers", append=[name, value])
    with pytest.raises(CassetteError, match="response") as caught:
        loads(write(edit), source=f"f.{fmt}")
    assert message in str(caught.value), caught.value


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("fork_step", 2**40, "is out of range (0 to 2147483647)"),
        ("fork_step", -1, "is out of range"),
        ("created_at", 1e17, "is not a time (seconds since 1970, before 10000)"),
        ("created_at", -5, "is not a time"),
        ("status", "exploded", "'exploded' is not one of running, finished, crashed, diverged"),
        ("change", {"model": {"nested": [{"deeper": None}], 3: 1}}, "key 3 is not text"),
        ("labels", {"team": {"a": 1}}, "a label's value should be text"),
    ],
)
def test_the_run_is_checked_too(fmt, field, value, message):
    write, _, run_path, loads = FORMATS[fmt]
    if fmt != "yaml" and field == "change":
        value = {"deep": _nested(70)}
        message = "nested more than 64 deep"
    with pytest.raises(CassetteError) as caught:
        loads(write(at(*run_path, field, value=value)), source=f"f.{fmt}")
    assert message in str(caught.value) and field in str(caught.value), caught.value


def _nested(depth: int) -> Any:
    return [] if depth == 0 else [_nested(depth - 1)]


@pytest.mark.parametrize(
    "edit, message",
    [
        ("ttfb_ms: .inf", "ttfb_ms: inf is not a time in ms"),
        ("ttfb_ms: .nan", "ttfb_ms: nan is not a time in ms"),
        ("ttfb_ms: 2024-01-01", "ttfb_ms: `ttfb_ms` should be int or float, not date"),
        ("duration_ms: 1" + "0" * 5000, "a number of 5001 characters is not read"),
    ],
)
def test_yaml_s_own_values_are_checked(edit, message):
    content = text.dumps(RUN, [exchange(upstream="http://up/v1/x")])
    content = content.replace("  forkpoint: {step: 0,", f"  forkpoint: {{{edit}, step: 0,")
    with pytest.raises(CassetteError) as caught:
        text.loads(content, source="f.yaml")
    assert str(caught.value).startswith("f.yaml, line ") and message in str(caught.value)


def test_a_status_of_no_response_and_har_s_not_applicable_times_still_read():
    answered = exchange(status=None, error="cannot reach upstream")
    for fmt in (text, jsonl, har):
        _, [back] = fmt.loads(fmt.dumps(RUN, [answered]))
        assert back.status is None, fmt.__name__
    document = orjson.loads(har.dumps(RUN, [exchange()]))
    entry = document["log"]["entries"][0]
    entry["time"], entry["timings"]["wait"] = -1, -1  # HAR: not applicable
    _, [back] = har.loads(orjson.dumps(document).decode())
    assert (back.ttfb_ms, back.duration_ms) == (None, None)
