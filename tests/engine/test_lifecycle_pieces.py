"""A body past the tee's budget leaves in pieces, as a playbook: each piece is handed on
(`Spill`) before the bytes after it reach the agent, the exchange names them by hash, and a
replay plans them as loads from the store, never as bytes in memory (issue 14.6)."""

from __future__ import annotations

import hashlib

from forkpoint.engine.lifecycle import (
    CHUNK_COST,
    Body,
    Commit,
    Cut,
    Drop,
    End,
    Head,
    Load,
    SendBody,
    SendEnd,
    SendHead,
    Spill,
    Tee,
    Warn,
    serve_plan,
)
from forkpoint.engine.pace import Pace
from forkpoint.models import Blob, Chunk, Piece
from tests.engine.test_lifecycle import SSE, play, request_record


def octets(length: int) -> tuple[tuple[str, str], ...]:
    return (("content-type", "application/octet-stream"), ("content-length", str(length)))


def blob(data: bytes) -> Blob:
    return Blob(hashlib.sha256(data).hexdigest(), data)


def test_a_body_past_the_budget_is_spilled_in_pieces_before_the_bytes_after_them_go_out():
    tee = Tee(request_record(), started=0.0, hold=4, piece=3)
    commands = play(
        tee, (0.0, Head(200, octets(12))), (0.1, Body(b"abc")), (0.2, Body(b"defgh")),
        (0.3, Body(b"ijkl")), (0.4, End()),
    )  # fmt: skip
    record = tee.record
    assert commands == [
        SendHead(200, octets(12)),
        SendBody(b"abc"),  # within the budget: held
        Spill(blob(b"def")), SendBody(b"defgh"),  # past it: pieces of 3, the rest pending
        Spill(blob(b"ghi")), Spill(blob(b"jkl")), Commit(record), SendBody(b"ijkl"),
        SendEnd(),
    ]  # fmt: skip
    assert record.response_body == b"abc" and record.chunks is None
    assert record.pieces == (
        Piece(blob(b"def").digest, 3, 200.0), Piece(blob(b"ghi").digest, 3, 200.0),
        Piece(blob(b"jkl").digest, 3, 300.0),
    )  # fmt: skip
    assert record.complete and record.error is None and record.body_size == 12


def test_the_last_piece_is_spilled_before_the_commit_of_a_chunked_body():
    tee = Tee(request_record(), started=0.0, hold=0, piece=4)
    commands = play(tee, (0.0, Head(200, SSE)), (0.1, Body(b"data: a\n\n")), (0.2, End()))
    assert commands == [
        SendHead(200, SSE), Spill(blob(b"data")), Spill(blob(b": a\n")), SendBody(b"data: a\n\n"),
        Spill(blob(b"\n")), Commit(tee.record), SendEnd(),
    ]  # fmt: skip
    assert tee.record.chunks == [] and tee.record.response_body == b""
    assert [p.offset_ms for p in tee.record.pieces] == [100.0, 100.0, 100.0]


def test_a_stream_keeps_its_chunk_records_within_the_budget_then_a_piece_is_its_chunk():
    tee = Tee(request_record(), started=0.0, hold=2 * (CHUNK_COST + 1), piece=2)
    events = [(0.1 * n, Body(b"x")) for n in range(1, 6)]
    play(tee, (0.0, Head(200, SSE)), *events, (1.0, End()))
    record = tee.record
    assert record.chunks == [Chunk(100.0, b"x"), Chunk(200.0, b"x")]
    assert [(p.size, p.offset_ms) for p in record.pieces] == [(2, 300.0), (1, 500.0)]
    plan = serve_plan(record, Pace(1.0))
    assert [event for _, event in plan][1:] == [
        Body(b"x"), Body(b"x"), Load(record.pieces[0]), Load(record.pieces[1]), End(),
    ]  # fmt: skip
    assert [round(delay, 3) for delay, _ in plan] == [0.0, 0.1, 0.2, 0.3, 0.5, 0.5]


def test_nothing_is_warned_and_nothing_cut_when_every_byte_is_recorded():
    tee = Tee(request_record(), started=0.0, hold=1, piece=1 << 20)
    commands = play(tee, (0.0, Head(200, octets(3))), (0.1, Body(b"abc")), (0.2, End()))
    assert not any(isinstance(command, Warn) for command in commands)
    assert [event for _, event in serve_plan(tee.record)][-1] == End()


def test_a_served_piece_is_named_again_without_being_spilled_again():
    recorded = Tee(request_record(), started=0.0, hold=2, piece=3)
    play(recorded, (0.0, Head(200, octets(8))), (0.1, Body(b"ab")), (0.2, Body(b"cdefgh")),
         (0.3, End()))  # fmt: skip
    first, second = recorded.record.pieces
    replaying = Tee(request_record(), started=0.0, hold=2, piece=3)
    commands = play(
        replaying, (0.0, Head(200, octets(8))), (0.1, Body(b"ab")),
        (0.2, Body(b"cde", first)), (0.3, Body(b"fgh", second)), (0.4, End()),
    )  # fmt: skip
    assert not any(isinstance(command, Spill) for command in commands)
    assert [(p.digest, p.size) for p in replaying.record.pieces] == [
        (first.digest, 3), (second.digest, 3),
    ]  # fmt: skip
    assert replaying.record.response_body == b"ab"


def test_a_cap_still_cuts_what_is_recorded_and_warns_once():
    tee = Tee(request_record(), started=0.0, limit=5, hold=2, piece=2)
    commands = play(tee, (0.0, Head(200, octets(9))), (0.1, Body(b"abcdefghi")), (0.2, End()))
    assert len([c for c in commands if isinstance(c, Warn)]) == 1
    assert [c.blob.data for c in commands if isinstance(c, Spill)] == [b"ab", b"cd", b"e"]
    record = tee.record
    assert record.body_size == 5 and not record.complete
    assert record.error is not None and "4 bytes not recorded" in record.error


def test_a_body_cut_in_its_pieces_keeps_what_arrived_and_a_replay_cuts_after_it():
    tee = Tee(request_record(), started=0.0, hold=1, piece=2)
    commands = play(tee, (0.0, Head(200, octets(9))), (0.1, Body(b"abcde")), (0.2, Cut("reset")))
    assert commands[-3:] == [Spill(blob(b"e")), Commit(tee.record), Drop()]
    record = tee.record
    assert record.body_size == 5 and not record.complete and record.error == "reset"
    events = [event for _, event in serve_plan(record)]
    assert events[1:] == [*(Load(piece) for piece in record.pieces), Cut("reset")]


def test_a_resume_serving_what_its_run_holds_spills_nothing():
    tee = Tee(request_record(), started=0.0, keep=False, hold=1, piece=2)
    commands = play(tee, (0.0, Head(200, octets(5))), (0.1, Body(b"abcde")), (0.2, End()))
    assert commands == [SendHead(200, octets(5)), SendBody(b"abcde"), SendEnd()]
