"""Recorded bodies as the web view shows them: escaped, streams cut into events at the times
they arrived, compressed bodies decoded, the rest bounded."""

from __future__ import annotations

import gzip

import orjson

from forkpoint.models import Chunk
from forkpoint.ui import bodies
from forkpoint.ui.bodies import Event, body_html, events, events_html, json_html

JSON = (("content-type", "application/json"),)


def test_a_stream_is_its_events_each_when_its_last_chunk_came():
    chunks = [
        Chunk(10.0, b'event: delta\ndata: {"t": "He'),
        Chunk(25.0, b'llo"}\n\ndata: one\ndata: two\n'),
        Chunk(40.0, b"\n: a comment\n\ndata: [DONE]\r\n\r\ndata: cut sh"),
    ]
    found, rest = events(chunks)
    assert found == [
        Event(25.0, "delta", '{"t": "Hello"}'),
        Event(40.0, "message", "one\ntwo"),
        Event(40.0, "message", ""),  # a comment alone: an event with no data
        Event(40.0, "message", "[DONE]"),
    ]
    assert rest == b"data: cut sh"
    html = events_html(chunks)
    assert "after the last complete event" in html and "data: cut sh" in html


def test_a_stream_that_is_not_sse_shows_its_chunks():
    html = events_html([Chunk(1.0, b'{"a": 1}\n'), Chunk(2.0, b"<b>\n")])
    assert html.count("<tr>") == 3 and "&lt;b&gt;" in html  # a head, then a row a chunk


def test_json_folds_and_escapes_keys_and_values():
    html = json_html({"<k>": ["<v>", 1, None, True, {"deep": {"deeper": {"deepest": 2}}}]})
    assert "&lt;k&gt;" in html and "&#34;&lt;v&gt;&#34;" in html and "<k>" not in html
    assert html.count("<details open>") == 3 and html.count("<details>") == 2  # past depth 3
    assert '<span class="j-null">null</span>' in html and "1 key" in html and "5 items" in html


def test_a_json_too_large_to_fold_is_indented_text(monkeypatch):
    monkeypatch.setattr(bodies, "TREE_NODES", 10)
    html = json_html({"items": list(range(20))})
    assert html.startswith('<pre class="body json">') and "<details" not in html


def test_bodies_are_decoded_bounded_and_never_markup(monkeypatch):
    zipped = (("content-encoding", "gzip"), *JSON)
    assert '<span class="j-str">&#34;hi&#34;</span>' in body_html(
        gzip.compress(b'{"a": "hi"}'), zipped
    )
    assert "not decoded as gzip" in body_html(b"not gzip", zipped)
    assert "&lt;script&gt;" in body_html(b"<script>x</script>", ())
    assert "(empty)" in body_html(b"", ())
    binary = body_html(bytes(range(256)) * 2, ())
    assert "512 bytes, not text" in binary and "00 01 02" in binary
    monkeypatch.setattr(bodies, "SHOWN", 8)
    cut = body_html(orjson.dumps({"long": "x" * 50}), JSON)
    assert "<details" not in cut and "53 more bytes not shown" in cut
