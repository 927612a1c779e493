import pytest

from forkpoint.engine.dialects.sse import SseEvent, parse_events

ANTHROPIC_HEAD = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_01","type":"message"}}\n'
    b"\n"
    b"event: ping\n"
    b'data: {"type": "ping"}\n'
    b"\n"
)


def test_named_events() -> None:
    assert parse_events(ANTHROPIC_HEAD) == [
        SseEvent(
            "message_start", '{"type":"message_start","message":{"id":"msg_01","type":"message"}}'
        ),
        SseEvent("ping", '{"type": "ping"}'),
    ]


def test_unnamed_events_and_done_marker() -> None:
    body = b'data: {"a":1}\n\ndata: [DONE]\n\n'
    assert parse_events(body) == [SseEvent(None, '{"a":1}'), SseEvent(None, "[DONE]")]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_breaks(newline: bytes) -> None:
    body = newline.join([b"event: x", b"data: one", b"data: two", b"", b"data: three", b"", b""])
    assert parse_events(body) == [SseEvent("x", "one\ntwo"), SseEvent(None, "three")]


def test_mixed_line_breaks_in_one_body() -> None:
    assert parse_events(b"data: a\r\ndata: b\rdata: c\n\r\n") == [SseEvent(None, "a\nb\nc")]


def test_only_one_space_after_the_colon_is_dropped() -> None:
    assert parse_events(b"data:no-space\n\ndata:  two-spaces\n\n") == [
        SseEvent(None, "no-space"),
        SseEvent(None, " two-spaces"),
    ]


def test_comments_ids_and_retry_are_ignored() -> None:
    body = b": OPENROUTER PROCESSING\n\nid: 7\nretry: 1000\n: keep-alive\ndata: x\n\n"
    assert parse_events(body) == [SseEvent(None, "x")]


def test_event_without_data_is_dropped() -> None:
    assert parse_events(b"event: lonely\n\ndata: y\n\n") == [SseEvent(None, "y")]


def test_empty_data_line_makes_an_event_with_empty_data() -> None:
    assert parse_events(b"data:\n\n") == [SseEvent(None, "")]
    assert parse_events(b"data\n\n") == [SseEvent(None, "")]


def test_cut_stream_keeps_the_open_event() -> None:
    body = ANTHROPIC_HEAD + b'event: content_block_delta\ndata: {"type":"content_block_de'
    events = parse_events(body)
    assert events[-1] == SseEvent("content_block_delta", '{"type":"content_block_de')
    assert len(events) == 3


def test_byte_order_mark_and_bad_utf8() -> None:
    assert parse_events(b"\xef\xbb\xbfdata: caf\xc3\xa9\n\n") == [SseEvent(None, "café")]
    # A stream cut inside a multi-byte character still parses.
    assert parse_events(b"data: caf\xc3") == [SseEvent(None, "caf\ufffd")]


def test_empty_body() -> None:
    assert parse_events(b"") == []
