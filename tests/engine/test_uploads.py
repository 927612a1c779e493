"""A request body too large to hold, with plain data: held part, pieces and fingerprint the same
however it arrives and equal to what a body read whole gets, a multipart boundary set aside,
secrets masked in what is kept, and how each session reads one (issue 25.16)."""

from __future__ import annotations

import random

import pytest

from forkpoint.engine import matching
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, OnDivergence, Routes
from forkpoint.engine.decide import Fail, Forward, Request, Serve, decide
from forkpoint.engine.mocks import MockKind, MockRule
from forkpoint.engine.pieces import JSON_HOLD, REQUEST_HOLD, Eraser, hold_limit, in_pieces
from forkpoint.engine.redaction import DEFAULT
from forkpoint.engine.session import Session
from forkpoint.engine.uploads import Reading, Upload, reading
from forkpoint.models import Exchange, Mode, Run

MIB = 2**20
FILE = (("content-type", "application/octet-stream"),)
CONFIG = EngineConfig(routes=Routes("https://api.example"))


def upload_of(body: bytes, headers=FILE, *, sizes=(MIB,), route="/v1/files") -> Upload:  # type: ignore[no-untyped-def]
    """`body` handed to an Upload in reads of the given sizes, in turn."""
    upload = Upload("POST", route, headers, DEFAULT)
    at, turn = 0, 0
    while at < len(body):
        size = sizes[turn % len(sizes)]
        upload.add(body[at : at + size], float(turn))
        at, turn = at + size, turn + 1
    upload.close()
    return upload


def test_which_bodies_go_in_pieces():
    json = (("content-type", "application/json; charset=utf-8"),)
    assert (
        hold_limit(json, b"{")
        == hold_limit((("Content-Type", "application/x+json"),), b"")
        == JSON_HOLD
    )
    assert hold_limit(FILE, b"{") == hold_limit((), b"\x89PNG") == REQUEST_HOLD
    assert hold_limit((), b"  \n {") == JSON_HOLD  # no type said: JSON by its first byte
    assert not in_pieces(json, b"{" + b" " * (JSON_HOLD - 1))
    assert in_pieces(FILE, b"x" * (REQUEST_HOLD + 1)) and not in_pieces(FILE, b"x" * REQUEST_HOLD)


def test_an_eraser_takes_out_every_mark_however_the_bytes_arrive():
    rng = random.Random(7)
    for _ in range(500):
        body = bytes(rng.choice(b"-ab-x") for _ in range(rng.randint(0, 80)))
        eraser, out, at = Eraser(b"--ab"), b"", 0
        while at < len(body):
            size = rng.randint(1, 9)
            out += eraser.feed(body[at : at + size])
            at += size
        assert out + eraser.close() == body.replace(b"--ab", b"")


def test_the_same_upload_gives_the_same_record_however_it_arrives_and_as_read_whole():
    body = random.Random(1).randbytes(REQUEST_HOLD + 9 * MIB + 123)
    one = upload_of(body, sizes=(MIB,))
    other = upload_of(body, sizes=(7, 65536, 3 * MIB + 1))
    assert one.held == other.held == body[:REQUEST_HOLD]
    assert [p.digest for p in one.pieces] == [p.digest for p in other.pieces]
    assert sum(p.size for p in one.pieces) == len(body) - REQUEST_HOLD
    assert (
        one.fingerprint
        == other.fingerprint
        == matching.fingerprint("POST", "/v1/files", body, FILE)
    )
    changed = upload_of(body[:-1] + b"!")
    assert changed.fingerprint != one.fingerprint


def multipart(boundary: str, data: bytes) -> tuple[tuple[tuple[str, str], ...], bytes]:
    headers = (("content-type", f"multipart/form-data; boundary={boundary}"),)
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.mp3"\r\n'
            "Content-Type: audio/mpeg\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return headers, body


def test_a_multipart_upload_of_the_same_file_matches_whatever_its_boundary():
    audio = random.Random(2).randbytes(REQUEST_HOLD + 2 * MIB)
    first_headers, first = multipart("a" * 32, audio)
    again_headers, again = multipart("b" * 32, audio)
    other_headers, other = multipart("c" * 32, audio[:-1] + b"\x00")
    route = "/v1/audio/transcriptions"
    one = upload_of(first, first_headers, route=route, sizes=(65536,))
    two = upload_of(again, again_headers, route=route, sizes=(MIB + 5,))
    three = upload_of(other, other_headers, route=route)
    assert one.fingerprint == two.fingerprint != three.fingerprint
    assert one.fingerprint == matching.fingerprint("POST", route, first, first_headers)


def test_a_secret_is_masked_in_what_is_kept_and_the_fingerprint_reads_it_masked():
    text = (("content-type", "application/x-ndjson"),)
    line = b'{"event": "login", "api_key": "%s"}\n'
    log = b"".join(line % b"key-%d" % (n % 3) for n in range(REQUEST_HOLD // 30))
    mine = upload_of(log, text)
    theirs = upload_of(log.replace(b"key-1", b"key-7"), text)
    assert b"key-1" not in mine.held and b'"api_key": "[redacted]"' in mine.held
    assert mine.pieces  # past the held part, in pieces, masked too
    assert mine.fingerprint == theirs.fingerprint  # other keys: the same request


def replay_of(recorded: Exchange, **session: object) -> Session:
    return Session.replay(
        Run("rep", mode=Mode.REPLAY, parent_id="rec"), [recorded], CONFIG, **session
    )  # type: ignore[arg-type]


def test_a_recorded_upload_is_served_to_the_same_upload_and_a_changed_one_diverges():
    body = random.Random(3).randbytes(REQUEST_HOLD + MIB)
    recording = Session(Run("rec"))
    live = upload_of(body)
    action = decide(
        recording, Request("POST", "/v1/files", FILE, body[: REQUEST_HOLD + 1], live), CONFIG
    )
    assert isinstance(action, Forward)
    record = action.record
    assert (record.request_body, record.request_pieces) == (body[:REQUEST_HOLD], live.pieces)
    assert record.fingerprint == live.fingerprint and record.request_size == len(body)
    record.status, record.response_body = 200, b'{"id": "file-1"}'
    same = Request("POST", "/v1/files", FILE, body[: REQUEST_HOLD + 1], upload_of(body))
    served = decide(replay_of(record), same, CONFIG)
    assert isinstance(served, Serve) and served.recorded is record
    assert served.record.request_pieces == record.request_pieces
    changed = body[:-1] + b"?"
    failed = decide(
        replay_of(record),
        Request("POST", "/v1/files", FILE, changed[:10], upload_of(changed)),
        CONFIG,
    )
    assert isinstance(failed, Fail)
    report = failed.body.decode()
    assert "body (in pieces)" in report and "sha256" in report and "step 0" in report


def test_how_each_session_reads_an_upload():
    route = "/v1/chat/completions"
    assert reading(Session(Run("r")), "POST", route, CONFIG) is Reading.STREAM
    replay = Session.replay(Run("p", mode=Mode.REPLAY), [], CONFIG)
    assert reading(replay, "POST", "/v1/files", CONFIG) is Reading.DRAIN
    goes_live = Session.replay(
        Run("p", mode=Mode.REPLAY), [], CONFIG, on_divergence=OnDivergence.LIVE
    )
    assert reading(goes_live, "POST", "/v1/files", CONFIG) is Reading.SPOOL
    fork = Session.fork(Run("f", mode=Mode.FORK), [], CONFIG, at=3, change=Change(model="m"))
    assert reading(fork, "POST", route, CONFIG) is Reading.HOLD  # its model is rewritten
    assert reading(fork, "POST", "/v1/files", CONFIG) is Reading.SPOOL  # a file is not
    rule = MockRule("POST /v1/files", "POST", "/v1/files", MockKind.STATIC)
    mocked = Session(Run("m"), change=Change(mocks=(rule,)))
    assert reading(mocked, "POST", "/v1/files", CONFIG) is Reading.HOLD


@pytest.mark.parametrize("sizes", [(1,), (REQUEST_HOLD - 1, 2)])
def test_an_upload_cut_short_still_names_what_came(sizes):
    upload = Upload("POST", "/v1/files", FILE, DEFAULT)
    upload.add(b"x" * sizes[0], 0.0)
    upload.close()
    assert upload.held == b"x" * sizes[0] and upload.pieces == () and upload.fingerprint
