"""HAR: forkpoint's own round trip, and HAR files other tools captured."""

from __future__ import annotations

import gzip

import orjson
import pytest

from forkpoint.cassettes.formats import har
from forkpoint.engine.encoding import header
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Chunk, Exchange, Origin, Run


def test_a_run_round_trips_with_bodies_decoded():
    body = b'{"model": "gpt-4o", "choices": []}'
    exchanges = [
        Exchange(
            run_id="r", step=0, method="POST", route="/v1/chat/completions?x=1",
            upstream="https://api.openai.com/v1/chat/completions?x=1",
            request_headers=(("content-type", "application/json"),),
            request_body=b'{"model": "gpt-4o"}', fingerprint="", status=200,
            response_headers=(("content-type", "application/json"), ("content-encoding", "gzip")),
            response_body=gzip.compress(body), started_at=1_700_000_000.25, ttfb_ms=5.0,
            duration_ms=9.0,
        ),
        Exchange(
            run_id="r", step=1, method="POST", route="/v1/chat/completions", request_headers=(),
            request_body=b"{}", fingerprint="", status=200, origin=Origin.REPLAYED,
            response_headers=(("content-type", "text/event-stream"),),
            response_body=b"data: 1\n\ndata: 2\n\n",
            chunks=[Chunk(1.0, b"data: 1\n\n"), Chunk(3.0, b"data: 2\n\n")],
        ),
    ]  # fmt: skip
    document = orjson.loads(har.dumps(Run(id="r", name="n"), exchanges))
    entry = document["log"]["entries"][0]
    assert entry["request"]["url"] == "https://api.openai.com/v1/chat/completions?x=1"
    assert entry["request"]["queryString"] == [{"name": "x", "value": "1"}]
    assert entry["response"]["content"]["text"] == body.decode()
    assert entry["timings"] == {"send": 0, "wait": 5.0, "receive": 4.0}
    assert document["log"]["entries"][1]["request"]["url"].startswith("http://forkpoint.invalid/")

    run, (plain, stream) = har.loads(har.dumps(Run(id="r", name="n"), exchanges))
    # the HAR shows the decoded text, and keeps the bytes that crossed the wire beside it
    assert run.name == "n" and plain.response_body == exchanges[0].response_body
    assert header(plain.response_headers, "content-encoding") == "gzip"
    assert plain.route == "/v1/chat/completions?x=1" and plain.started_at == 1_700_000_000.25
    assert stream.chunks == exchanges[1].chunks and stream.upstream is None
    assert stream.origin is Origin.REPLAYED


BROWSER_HAR = {
    "log": {
        "version": "1.2",
        "entries": [
            {
                "startedDateTime": "2026-01-02T03:04:05.000Z",
                "time": 12.5,
                "request": {
                    "method": "POST",
                    "url": "https://api.anthropic.com/v1/messages",
                    "headers": [
                        {"name": ":authority", "value": "api.anthropic.com"},
                        {"name": "x-api-key", "value": "sk-ant-browser"},
                    ],
                    "postData": {
                        "mimeType": "application/json",
                        "text": '{"model": "claude-haiku-4-5"}',
                    },
                },
                "response": {
                    "status": 200,
                    "headers": [{"name": "content-encoding", "value": "br"}],
                    "content": {
                        "mimeType": "application/json",
                        "text": "eyJ0eXBlIjogIm1lc3NhZ2UifQ==",
                        "encoding": "base64",
                    },
                },
                "timings": {"wait": 10.0},
            }
        ],
    }
}


def test_a_foreign_har_imports_with_routes_and_without_credentials():
    run, [loaded] = har.loads(
        orjson.dumps(BROWSER_HAR).decode(),
        source="capture.har",
        routes={"anthropic": "https://api.anthropic.com"},
    )
    assert run.name == "capture"
    assert loaded.route == "/anthropic/v1/messages"
    assert loaded.request_headers == (("x-api-key", "[redacted]"),)
    assert loaded.response_body == b'{"type": "message"}' and loaded.response_headers == ()
    assert (loaded.ttfb_ms, loaded.duration_ms) == (10.0, 12.5)
    assert loaded.summary is not None and loaded.summary.model == "claude-haiku-4-5"


@pytest.mark.parametrize(
    "document, error",
    [
        ({"nolog": 1}, "x.har: not a HAR file: it has no `log` object"),
        (
            {"log": {"entries": [{"request": {"method": "GET"}, "response": {}}]}},
            "x.har: entry 0, request: missing `url`",
        ),
        ({"log": {"entries": [], "_forkpoint": {"format_version": 5}}}, "newer forkpoint"),
    ],
)
def test_errors_say_where(document, error):
    with pytest.raises(CassetteError, match=error):
        har.loads(orjson.dumps(document).decode(), source="x.har")
    with pytest.raises(CassetteError, match="not valid JSON"):
        har.loads("{", source="x.har")


def test_a_newer_format_is_a_schema_version_error():
    with pytest.raises(SchemaVersionError):
        har.loads('{"log": {"entries": [], "_forkpoint": {"format_version": 5}}}')


@pytest.mark.parametrize("started_at", [1e20, -1e20, float("inf"), float("nan")])
def test_a_start_time_no_date_can_hold_exports_as_the_epoch(started_at):
    from tests.builders import exchange

    text = har.dumps(Run(id="r"), [exchange(started_at=started_at)])
    [entry] = orjson.loads(text)["log"]["entries"]
    assert entry["startedDateTime"] == "1970-01-01T00:00:00+00:00"
    _, [back] = har.loads(text)
    assert back.started_at == 0.0 and back.response_body == b'{"ok":1}'
