"""A response over the recording limit, as a playbook: the agent gets every byte, the record
keeps at most the limit and says how much it left out (issue 14.6)."""

from __future__ import annotations

from forkpoint.engine.lifecycle import (
    CHUNK_COST,
    Body,
    Commit,
    Cut,
    Drop,
    End,
    Head,
    SendBody,
    SendEnd,
    SendHead,
    Tee,
    Warn,
    serve_plan,
)
from tests.engine.test_lifecycle import SSE, play, request_record

OCTETS = (("content-type", "application/octet-stream"), ("content-length", "10"))


def test_a_body_over_the_limit_reaches_the_agent_whole_and_is_recorded_cut():
    tee = Tee(request_record(), started=0.0, limit=4)
    commands = play(
        tee, (0.0, Head(200, OCTETS)), (0.1, Body(b"abc")), (0.2, Body(b"def")),
        (0.3, Body(b"ghij")), (0.4, End()),
    )  # fmt: skip
    record = tee.record
    (warning,) = [command for command in commands if isinstance(command, Warn)]
    assert "4 byte recording limit" in warning.message and "--max-record-body" in warning.message
    assert [c for c in commands if not isinstance(c, Warn)] == [
        SendHead(200, OCTETS), SendBody(b"abc"), SendBody(b"def"),
        Commit(record), SendBody(b"ghij"), SendEnd(),
    ]  # fmt: skip
    assert record.response_body == b"abcd" and record.chunks is None
    assert not record.complete
    assert record.error == (
        "response body over the 4 byte recording limit (--max-record-body): 6 bytes not recorded"
    )


def test_a_body_within_the_limit_is_recorded_whole_and_complete():
    tee = Tee(request_record(), started=0.0, limit=10)
    commands = play(tee, (0.0, Head(200, OCTETS)), (0.1, Body(b"abcdefghij")), (0.2, End()))
    assert not any(isinstance(command, Warn) for command in commands)
    assert tee.record.complete and tee.record.response_body == b"abcdefghij"


def test_a_stream_keeps_chunk_records_within_the_limit_each_costing_its_overhead():
    limit = 3 * (CHUNK_COST + 1) + 1
    tee = Tee(request_record(), started=0.0, limit=limit)
    events = [(0.1 * n, Body(b"x")) for n in range(1, 1001)]  # a thousand tiny chunks
    commands = play(tee, (0.0, Head(200, SSE)), *events, (200.0, End()))
    assert len([c for c in commands if isinstance(c, SendBody)]) == 1000  # the agent gets all
    assert len([c for c in commands if isinstance(c, Warn)]) == 1  # said once
    record = tee.record
    assert record.chunks is not None and len(record.chunks) == 3
    assert record.response_body == b"xxx"
    assert record.error is not None and "997 bytes not recorded" in record.error


def test_a_cut_past_the_limit_keeps_both_reasons():
    tee = Tee(request_record(), started=0.0, limit=2)
    commands = play(tee, (0.0, Head(200, OCTETS)), (0.1, Body(b"abcd")), (0.2, Cut("reset")))
    assert commands[-2:] == [Commit(tee.record), Drop()]
    assert tee.record.response_body == b"ab"
    assert tee.record.error is not None
    assert tee.record.error.startswith("reset (response body over the 2 byte recording limit")


def test_what_was_kept_replays_then_cuts():
    tee = Tee(request_record(), started=0.0, limit=4)
    play(tee, (0.0, Head(200, OCTETS)), (0.1, Body(b"abcdefghij")), (0.2, End()))
    events = [event for _, event in serve_plan(tee.record)]
    assert events[1:] == [Body(b"abcd"), Cut(tee.record.error or "")]
