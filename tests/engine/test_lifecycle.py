"""The life of a response as a playbook: events in, commands out, plain data, no sockets."""

from __future__ import annotations

import pytest

from forkpoint.engine.lifecycle import (
    Body,
    Commit,
    Cut,
    Drop,
    End,
    HangUp,
    Head,
    NoAnswer,
    SendBody,
    SendEnd,
    SendHead,
    Tee,
    answer,
    serve_plan,
)
from forkpoint.engine.pace import Pace
from forkpoint.models import Chunk, Exchange
from tests.builders import exchange

SSE = (("content-type", "text/event-stream"),)
JSON = (("content-type", "application/json"), ("content-length", "2"))


def request_record() -> Exchange:
    return exchange(status=None, response_headers=(), response_body=b"", fingerprint="fp")


def play(tee: Tee, *timed: tuple[float, object]) -> list[object]:
    """Feed (time in s, event) pairs; every command the tee answers, in order."""
    commands: list[object] = []
    for now, event in timed:
        commands += tee.feed(event, now)  # type: ignore[arg-type]
    return commands


def test_a_stream_passes_chunk_by_chunk_and_commits_before_its_end_goes_out():
    tee = Tee(request_record(), started=10.0)
    commands = play(
        tee,
        (10.1, Head(200, (*SSE, ("connection", "keep-alive")))),
        (10.2, Body(b"data: a\n\n")),
        (10.35, Body(b"data: b\n\n")),
        (10.4, End()),
    )
    record = tee.record
    assert commands == [
        SendHead(200, SSE),  # hop-by-hop headers are not passed on
        SendBody(b"data: a\n\n"),
        SendBody(b"data: b\n\n"),
        Commit(record),
        SendEnd(),
    ]
    assert record.complete and record.error is None
    assert record.chunks == [Chunk(200.0, b"data: a\n\n"), Chunk(350.0, b"data: b\n\n")]
    assert (record.ttfb_ms, record.duration_ms, record.response_body) == (
        100.0, 400.0, b"data: a\n\ndata: b\n\n",
    )  # fmt: skip


def test_a_body_of_known_length_is_kept_whole_not_as_chunks():
    tee = Tee(request_record(), started=0.0)
    play(tee, (0.0, Head(200, JSON)), (0.0, Body(b"{")), (0.0, Body(b"}")), (0.0, End()))
    assert tee.record.chunks is None and tee.record.response_body == b"{}"


def test_an_upstream_cut_is_recorded_incomplete_and_the_agent_is_cut_too():
    tee = Tee(request_record(), started=0.0)
    commands = play(
        tee, (0.0, Head(200, SSE)), (0.1, Body(b"data: a\n\n")), (0.2, Cut("upstream reset"))
    )
    assert commands[-2:] == [Commit(tee.record), Drop()]
    assert not tee.record.complete and tee.record.error == "upstream reset"


def test_no_answer_drops_the_connection_as_the_upstream_did():
    """The agent sees what it would without forkpoint (a connection error its SDK retries),
    not a 502 that says not to retry."""
    tee = Tee(request_record(), started=0.0)
    commands = play(tee, (0.5, NoAnswer("cannot reach upstream: refused")))
    assert commands == [Commit(tee.record), Drop()]
    assert tee.record.status is None and not tee.record.complete
    assert tee.record.error == "cannot reach upstream: refused"


def test_a_hang_up_mid_stream_is_incomplete_but_after_the_end_changes_nothing():
    mid = Tee(request_record(), started=0.0)
    commands = play(mid, (0.0, Head(200, SSE)), (0.1, Body(b"x")), (0.2, HangUp("reset")))
    assert commands[-1] == Commit(mid.record)
    assert not mid.record.complete and "client disconnected" in (mid.record.error or "")
    after = Tee(request_record(), started=0.0)
    play(after, (0.0, Head(200, SSE)), (0.1, Body(b"x")), (0.2, End()))
    # SDKs hang up as soon as they read `[DONE]`, before the end marker: still complete.
    assert play(after, (0.3, HangUp("reset"))) == []
    assert after.record.complete


def test_an_answer_its_agent_left_is_read_on_sending_nothing_and_kept_whole():
    tee = Tee(request_record(), started=0.0, finish=100)
    play(tee, (0.0, Head(200, SSE)), (0.1, Body(b"first ")))
    assert play(tee, (0.2, HangUp("reset"))) == [] and tee.finishing
    commands = play(tee, (0.3, Body(b"second ")), (0.4, Body(b"last")), (0.5, End()))
    assert commands == [Commit(tee.record)]  # nothing sent, nothing dropped
    record = tee.record
    assert record.complete and record.error is None
    assert record.response_body == b"first second last"
    assert [c.offset_ms for c in record.chunks or []] == [100.0, 300.0, 400.0]
    assert "hung up after 6 body bytes" in (record.note or "")


@pytest.mark.parametrize(
    ("rest", "error"),
    [
        ((Body(b"y" * 101),), "passed 100 bytes"),  # the bytes bound
        ((Body(b"y"), HangUp("no end within 300 s")), "reading on stopped"),  # the door's clock
        ((Body(b"y"), Cut("reset by peer")), "then reset by peer"),
    ],
)
def test_reading_on_is_bounded_and_what_came_is_kept_cut(rest, error):
    tee = Tee(request_record(), started=0.0, finish=100)
    play(tee, (0.0, Head(200, SSE)), (0.1, Body(b"x")), (0.2, HangUp("reset")))
    commands = play(tee, *((0.3, event) for event in rest))
    assert commands == [Commit(tee.record)] and tee.done
    assert not tee.record.complete and error in (tee.record.error or "")
    assert tee.record.response_body.startswith(b"x")


def test_an_answer_is_not_read_on_before_its_head_nor_once_committed():
    waiting = Tee(request_record(), started=0.0, finish=100)
    assert play(waiting, (0.1, HangUp("reset"))) == [Commit(waiting.record)]
    assert not waiting.record.complete  # nothing was under way: given up
    whole = Tee(request_record(), started=0.0, finish=100)
    play(whole, (0.0, Head(200, JSON)), (0.1, Body(b"{}")))  # committed with its last byte
    assert play(whole, (0.2, HangUp("reset"))) == [] and whole.done and whole.record.complete


def test_credentials_in_the_response_are_masked_on_record_and_never_sent_masked():
    tee = Tee(request_record(), started=0.0)
    [head] = play(tee, (0.0, Head(200, (("set-cookie", "s=secret"), *JSON))))
    assert ("set-cookie", "[redacted]") in tee.record.response_headers
    assert head == SendHead(200, (("set-cookie", "s=secret"), *JSON))
    replayed = Tee(request_record(), started=0.0)
    [head] = play(replayed, (0.0, Head(200, (("set-cookie", "[redacted]"), *JSON))))
    assert head == SendHead(200, JSON)


def test_a_resume_serving_its_own_steps_commits_nothing():
    tee = Tee(request_record(), started=0.0, keep=False)
    assert play(tee, (0.0, Head(200, JSON)), (0.0, Body(b"{}")), (0.0, End())) == [
        SendHead(200, JSON), SendBody(b"{}"), SendEnd(),
    ]  # fmt: skip


def test_a_body_of_known_length_is_committed_before_its_last_chunk_goes_out():
    """The agent has a Content-Length answer with its last byte, not with the end of the
    response: the commit comes before that byte (issue 14.1)."""
    tee = Tee(request_record(), started=0.0)
    headers = (("content-type", "application/json"), ("content-length", "5"))
    commands = play(tee, (0.0, Head(200, headers)), (0.1, Body(b"ab")), (0.2, Body(b"cde")),
                    (0.3, End()))  # fmt: skip
    assert commands == [SendHead(200, headers), SendBody(b"ab"), Commit(tee.record),
                        SendBody(b"cde"), SendEnd()]  # fmt: skip
    assert tee.record.response_body == b"abcde" and tee.record.complete
    assert play(tee, (0.4, Cut("after the whole body"))) == []  # it has it all


@pytest.mark.parametrize(("status", "method"), [(200, "POST"), (204, "DELETE"), (200, "HEAD")])
def test_an_answer_with_no_body_is_committed_before_its_head_goes_out(status, method):
    record = request_record()
    record.method = method
    tee = Tee(record, started=0.0)
    headers = (("content-length", "0" if method != "HEAD" else "12"),)
    assert play(tee, (0.0, Head(status, headers)), (0.1, End())) == [
        Commit(tee.record), SendHead(status, headers), SendEnd(),
    ]  # fmt: skip
    assert tee.record.complete


def test_events_after_the_end_are_ignored_and_a_second_head_is_a_bug():
    tee = Tee(request_record(), started=0.0)
    play(tee, (0.0, Head(200, JSON)), (0.0, End()))
    assert play(tee, (0.1, Body(b"late")), (0.2, Cut("late"))) == []
    twice = Tee(request_record(), started=0.0)
    play(twice, (0.0, Head(200, JSON)))
    with pytest.raises(ValueError, match="one head"):
        play(twice, (0.0, Head(200, JSON)))


def recorded_stream(*, complete: bool = True) -> Exchange:
    exchange = request_record()
    exchange.status, exchange.response_headers = 200, SSE
    exchange.chunks = [Chunk(393.0, b"data: a\n\n"), Chunk(1601.0, b"data: b\n\n")]
    exchange.response_body = b"data: a\n\ndata: b\n\n"
    exchange.ttfb_ms, exchange.complete = 120.0, complete
    exchange.error = None if complete else "upstream cut the response"
    return exchange


def test_a_serve_plan_at_the_recorded_pace_keeps_every_offset():
    plan = serve_plan(recorded_stream(), Pace(1.0))
    assert plan == [
        (0.12, Head(200, SSE, True)),
        (0.393, Body(b"data: a\n\n")),
        (1.601, Body(b"data: b\n\n")),
        (1.601, End()),
    ]


def test_a_serve_plan_fast_or_faster():
    assert {at for at, _ in serve_plan(recorded_stream(), Pace())} == {0.0}
    assert [at for at, _ in serve_plan(recorded_stream(), Pace(2.0))][:2] == [0.06, 0.1965]


def test_a_stream_cut_when_recorded_is_cut_again():
    *_, (_, ending) = serve_plan(recorded_stream(complete=False))
    assert ending == Cut("upstream cut the response")


def test_a_recorded_failure_replays_as_the_same_failure():
    failed = request_record()
    failed.error, failed.complete, failed.duration_ms = "cannot reach upstream", False, 30.0
    assert serve_plan(failed, Pace(1.0)) == [(0.03, NoAnswer("cannot reach upstream"))]


def test_served_events_through_a_tee_give_the_recorded_response_and_its_served_timing():
    recorded = recorded_stream()
    tee = Tee(request_record(), started=0.0)
    commands = play(tee, *serve_plan(recorded, Pace(1.0)))
    assert [c for c in commands if isinstance(c, SendBody)] == [
        SendBody(c.data) for c in recorded.chunks or []
    ]
    assert tee.record.response_body == recorded.response_body
    assert [c.offset_ms for c in tee.record.chunks or []] == [393.0, 1601.0]


def test_a_whole_answer_carries_its_length():
    events = answer(418, (("content-type", "application/json"),), b'{"x":1}')
    assert events == [
        Head(418, (("content-type", "application/json"), ("content-length", "7")), False),
        Body(b'{"x":1}'),
        End(),
    ]


def test_a_served_answer_masked_when_recorded_is_recorded_as_served_not_read_twice():
    body = b'{"client_secret": "s3cr3t", "ok": true}'
    headers = (("content-type", "application/json"), ("content-length", str(len(body))))
    recorded = {}
    for masked in (False, True):
        tee = Tee(request_record(), started=0.0, masked=masked)
        play(tee, (0.0, Head(200, headers)), (0.1, Body(body)), (0.2, End()))
        recorded[masked] = tee.record.response_body
    assert b"s3cr3t" not in recorded[False]  # a live answer is masked
    assert recorded[True] == body  # a cassette's, already masked when it was recorded


def test_a_secret_in_a_stream_is_masked_in_the_record_across_its_chunks_and_sent_as_it_came():
    """An MCP tool or a token service answering over SSE: its events hold the credential the
    agent needs, which the cassette must not. The member is cut across two chunks here."""
    tee = Tee(request_record(), started=0.0)
    parts = [b'data: {"access_tok', b'en": "sk-live-1", "n": 1}\n\n', b"data: [DONE]\n\n"]
    commands = play(
        tee, (0.0, Head(200, SSE)), *((0.1 * (i + 1), Body(p)) for i, p in enumerate(parts)),
        (0.5, End()),
    )  # fmt: skip
    assert [c.data for c in commands if isinstance(c, SendBody)] == parts
    record = tee.record
    assert b"sk-live-1" not in record.response_body
    assert record.response_body == b"".join(parts).replace(b"sk-live-1", b"[redacted]")
    assert record.chunks == [
        Chunk(100.0, b'data: {"access_tok'),
        Chunk(200.0, b'en": "[redacted]", "n": 1}\n\n'),
        Chunk(300.0, b"data: [DONE]\n\n"),
    ]


# A served answer's framing fits the bytes served (issue 25.4): a secret masked when it was
# recorded changed the body's length, a HAR's content was decoded, an MCP answer renamed.
TOKEN = b'{"access_token": "sk-proj-Ab3dEf6hIj9kLm2nOp5qAb3dEf6hIj9kLm2nOp5q", "n": 1}'
MASKED = b'{"access_token": "[redacted]", "n": 1}'


def recorded_answer(body: bytes, headers: tuple[tuple[str, str], ...], **fields) -> Exchange:
    exchange = request_record()
    exchange.status, exchange.response_headers, exchange.response_body = 200, headers, body
    for name, value in fields.items():
        setattr(exchange, name, value)
    return exchange


def test_a_served_head_says_the_length_of_the_bytes_served_where_it_stood():
    headers = (("Content-Length", str(len(TOKEN))), ("content-type", "application/json"),
               ("transfer-encoding", "chunked"), ("content-length", "1"))  # fmt: skip
    [(_, head), (_, body), _] = serve_plan(recorded_answer(MASKED, headers))
    assert head == Head(200, (("Content-Length", str(len(MASKED))), ("content-type",
                              "application/json")), False)  # fmt: skip
    assert body == Body(MASKED)
    longer = b'{"api_key": "[redacted]"}'  # "k1" masked: longer than the upstream's bytes
    [(_, head), *_] = serve_plan(recorded_answer(longer, (("content-length", "16"),)))
    assert head.headers == (("content-length", str(len(longer))),)
    stream = recorded_answer(b"ab", (("content-length", "9"),), chunks=[Chunk(1, b"a"),
                             Chunk(2, b"b")])  # fmt: skip
    assert serve_plan(stream)[0][1] == Head(200, (("content-length", "2"),), True)
    chunked = (("content-type", "text/event-stream"), ("transfer-encoding", "chunked"))
    assert serve_plan(recorded_answer(b"x", chunked))[0][1].headers == chunked[:1]


def test_a_served_answer_cut_when_recorded_still_comes_up_short():
    cut = recorded_answer(MASKED, (("content-length", "900"),), complete=False, error="reset")
    assert serve_plan(cut)[0][1].headers == (("content-length", "900"),)
    # masked longer than the length it was cut short of: chunked, then cut before its end
    over = recorded_answer(MASKED, (("content-length", "20"),), complete=False, error="reset")
    assert serve_plan(over)[0][1].headers == ()
    tee = Tee(request_record(), started=0.0, keep=False)
    commands = play(tee, *serve_plan(over))
    assert commands[-1] == Drop() and SendEnd() not in commands


@pytest.mark.parametrize("method, status", [("HEAD", 200), ("GET", 204), ("GET", 304)])
def test_a_head_without_a_body_keeps_its_length(method, status):
    bodiless = recorded_answer(b"", (("content-length", "812"),), method=method, status=status)
    assert serve_plan(bodiless)[0][1].headers == (("content-length", "812"),)


def test_a_masked_answer_is_recorded_with_the_length_of_its_recorded_bytes():
    for streamed, headers in ((False, (("content-type", "application/json"),)),
                              (True, (("content-type", "text/event-stream"),))):  # fmt: skip
        tee = Tee(request_record(), started=0.0)
        length = (("content-length", str(len(TOKEN))),)
        commands = play(tee, (0.0, Head(200, (*headers, *length))), (0.1, Body(TOKEN)))
        assert commands[0] == SendHead(200, (*headers, *length))  # the agent's, as it came
        record = tee.record
        assert record.response_body == MASKED and record.streamed is streamed
        assert record.response_headers == (*headers, ("content-length", str(len(MASKED))))


def test_a_whole_answer_is_framed_by_its_body_whatever_it_was_given():
    events = answer(200, (("content-length", "99"), ("transfer-encoding", "chunked")), b"ok")
    assert events[0] == Head(200, (("content-length", "2"),), False)
