"""JSON-RPC framing: messages read leniently, stdio lines, event streams, and a served answer
renamed to this time's ids with every chunk kept at its time."""

from __future__ import annotations

import orjson
import pytest

from forkpoint.engine.dialects import jsonrpc
from forkpoint.engine.dialects.jsonrpc import Events, Kind, Lines
from forkpoint.models import Chunk


def test_messages_are_told_apart_and_anything_else_is_none():
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"ping"}').kind is Kind.REQUEST
    assert (
        jsonrpc.parse(b'{"jsonrpc":"2.0","method":"notifications/initialized"}').kind
        is Kind.NOTIFICATION
    )
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"result":{}}').kind is Kind.RESPONSE
    assert (
        jsonrpc.parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"x"}}').kind
        is Kind.RESPONSE
    )
    for garbage in (
        b"",
        b"{",
        b"[]",
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]',
        b'{"jsonrpc":"1.0","id":1,"method":"x"}',
        b'{"model":"gpt"}',
    ):
        assert jsonrpc.parse(garbage) is None


def test_stdio_lines_are_split_as_they_arrive():
    lines = Lines()
    assert lines.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert lines.feed(b":2}\r\n\n") == [b'{"b":2}']
    assert lines.feed(b'{"c":3}') == []
    assert lines.rest() == b'{"c":3}'


def test_a_line_that_never_ends_is_refused_not_held():
    with pytest.raises(ValueError):
        Lines(limit=10).feed(b"x" * 11)


def test_events_carry_one_message_each_whatever_the_cut():
    stream = jsonrpc.event(b'{"n":1}') + b": keep-alive\n\n" + jsonrpc.event(b'{"n":2}')
    events = Events()
    found = [m for i in range(0, len(stream), 5) for m in events.feed(stream[i : i + 5])]
    assert found == [b'{"n":1}', b'{"n":2}']


def _request(message_id: object, token: object = None) -> bytes:
    meta = {"_meta": {"progressToken": token}} if token is not None else {}
    return orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": message_id,
            "method": "tools/call",
            "params": {"name": "t", **meta},
        }
    )


def test_a_response_takes_the_new_id_and_other_messages_stay_byte_for_byte():
    renames = {"id": (3, 7)}
    assert (
        orjson.loads(jsonrpc.renamed(b'{"jsonrpc":"2.0","id":3,"result":{"x":1}}', renames))["id"]
        == 7
    )
    other = b'{"jsonrpc":"2.0", "id":4, "result":{}}'  # another request's: untouched
    assert jsonrpc.renamed(other, renames) == other
    assert (
        jsonrpc.renamed(b'{"jsonrpc":"2.0","id":"3","result":{}}', renames).count(b'"3"') == 1
    )  # "3" is not 3


def test_a_recorded_stream_is_renamed_event_by_event_each_chunk_at_its_time():
    progress = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":3,"progress":1}}'
    response = b'{"jsonrpc":"2.0","id":3,"result":{"content":[]}}'
    body = jsonrpc.event(progress) + jsonrpc.event(response)
    cut = len(jsonrpc.event(progress)) + 9  # the response's event cut across two chunks
    chunks = [Chunk(1.0, body[:cut]), Chunk(2.0, body[cut:])]
    renamed = jsonrpc.renamed_stream(chunks, {"id": (3, 8), "progress": (3, 8)})
    assert [c.offset_ms for c in renamed] == [1.0, 2.0]
    said = [orjson.loads(m) for m in Events().feed(b"".join(c.data for c in renamed))]
    assert said[0]["params"]["progressToken"] == 8 and said[1]["id"] == 8
    assert renamed[0].data == jsonrpc.event(progress).replace(
        b'"progressToken":3', b'"progressToken":8'
    )


def test_the_request_of_an_error_without_id_is_named_by_the_caller():
    assert orjson.loads(jsonrpc.error(None, "no")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32603, "message": "no"},
    }


def test_a_message_is_known_whether_its_version_comes_first_or_last():
    arguments = {"text": "x" * 20_000}
    first = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": arguments})
    last = orjson.dumps({"method": "tools/call", "params": arguments, "jsonrpc": "2.0", "id": 1})
    assert jsonrpc.looks_like(first) and jsonrpc.looks_like(last)
    assert jsonrpc.parse(last) is not None
    assert not jsonrpc.looks_like(b'{"model": "gpt-4o", "messages": []}')
    assert not jsonrpc.looks_like(b' ["jsonrpc"]')
