"""JSON lines: byte-exact round trips and errors that name the line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forkpoint.cassettes.formats import jsonl
from forkpoint.engine.matching import fingerprint
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Chunk, Exchange, Run


def test_bodies_come_back_byte_for_byte():
    gzipped = Exchange(
        run_id="r", step=0, method="POST", route="/v1/responses",
        request_headers=(("content-type", "application/json"),),
        request_body=b'{"model": "gpt-4.1",  "input": "hi"}', fingerprint="",
        status=200, response_headers=(("content-encoding", "gzip"), ("content-length", "4")),
        response_body=b"\x1f\x8b\x08\x00",
    )  # fmt: skip
    stream = Exchange(
        run_id="r", step=1, method="POST", route="/v1/responses", request_headers=(),
        request_body=b"{}", fingerprint="", status=200,
        response_headers=(("content-type", "text/event-stream"),),
        response_body=b"data: a\n\ndata: b\n\n",
        chunks=[Chunk(0.5, b"data: a\n\n"), Chunk(2.0, b"data: b\n\n")],
    )  # fmt: skip
    content = jsonl.dumps(Run(id="r", name="n"), [gzipped, stream])
    assert len(content.splitlines()) == 3
    run, (a, b) = jsonl.loads(content)
    assert run.name == "n"
    assert (a.request_body, a.response_body, a.response_headers) == (
        gzipped.request_body, gzipped.response_body, gzipped.response_headers,
    )  # fmt: skip
    assert b.chunks == stream.chunks


def test_a_forks_rewritten_request_keeps_what_its_agent_asked_and_matches_by_it():
    asked = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'
    sent = b'{"model":"gpt-4o","messages":[{"role":"system","content":"Be warm."},' + (
        b'{"role":"user","content":"hi"}]}'
    )
    forked = Exchange(
        run_id="r", step=0, method="POST", route="/v1/chat/completions",
        request_headers=(("content-type", "application/json"),), request_body=sent,
        fingerprint="", status=200, asked_body=asked,
    )  # fmt: skip
    [read] = jsonl.loads(jsonl.dumps(Run(id="r"), [forked]))[1]
    assert (read.request_body, read.asked_body) == (sent, asked)
    assert read.fingerprint == fingerprint("POST", "/v1/chat/completions", asked)
    [plain] = jsonl.loads(jsonl.dumps(Run(id="r"), [replace(forked, asked_body=None)]))[1]
    assert plain.asked_body is None and "asked_body" not in jsonl.dumps(Run(id="r"), [plain])


@pytest.mark.parametrize(
    "content, error",
    [
        ("", "empty"),
        (
            '{"forkpoint": 1, "run": {}}\n{"exchange": {"method": "GET"}}\n',
            "line 2: exchange 0: missing `route`",
        ),
        (
            '{"forkpoint": 1, "run": {}}\n\n{"exchange": {"method": "GET", "route": "/", "request_body": {"base64": "@@"}}}\n',
            "line 3: exchange 0, request_body: invalid base64",
        ),
        ('{"forkpoint": 1, "run": {}}\nnot json\n', "line 2: exchange 0: not valid JSON"),
    ],
)
def test_errors_name_the_line(content, error):
    with pytest.raises(CassetteError, match=error):
        jsonl.loads(content, source="run.jsonl")


def test_a_newer_format_says_to_upgrade():
    with pytest.raises(
        SchemaVersionError, match=r"run\.jsonl, line 1: written by a newer forkpoint"
    ):
        jsonl.loads('{"forkpoint": 9, "run": {}}\n', source="run.jsonl")
