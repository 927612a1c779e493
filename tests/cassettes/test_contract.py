"""The `Store` contract: every store (memory, SQLite, PostgreSQL) passes this one suite.

Store-specific behaviour (PRAGMAs, locking, schema versions, connections) is tested beside
each store; here is what every caller may rely on, whatever holds the cassette.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store, StoredBranch, StoredExperiment
from forkpoint.errors import AlreadyRecorded, CassetteError, ConfigError, RunNotFound
from forkpoint.models import (
    Blob,
    Chunk,
    Ending,
    Exchange,
    Kind,
    Mode,
    Origin,
    Piece,
    Run,
    RunStatus,
    Snapshot,
    Summary,
    ToolCall,
    Usage,
)
from tests import builders
from tests.pg import postgres_url as postgres_url  # the fixture

STORES = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """One empty store of each implementation."""
    opened: Store
    if request.param == "postgres":
        from forkpoint.cassettes.postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("postgres_url"))
    elif request.param == "sqlite":
        opened = SqliteStore(tmp_path / "contract.db")
    else:
        opened = MemoryStore()
    yield opened
    opened.close()


def exchange(step: int, body: bytes = b"{}", *, run_id: str = "r1", **fields: object) -> Exchange:
    values: dict[str, object] = {
        "request_body": body, "fingerprint": f"fp{step}", "response_headers": (),
        "response_body": b'{"ok": true}',
    }  # fmt: skip
    return builders.exchange(run_id=run_id, step=step, **{**values, **fields})


def conversation(turns: int) -> bytes:
    """A chat request after `turns` turns, serialized as the openai SDK does (json.dumps)."""
    messages = [{"role": "system", "content": "You are a support agent. " * 20}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: " + "details " * 40})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "because " * 40})
    return json.dumps({"messages": messages, "model": "gpt-4o"}).encode()


# runs


def test_runs_are_found_by_id_name_and_prefix(store: Store):
    store.create_run(Run(id="01AAAA1", name="ticket"))
    store.create_run(Run(id="01AAAA2", name="ticket"))
    store.create_run(Run(id="01BBBB1"))
    store.create_run(Run(id="ticket-7"))
    assert store.find_run("01BBBB1").id == "01BBBB1"
    assert store.find_run("ticket").id == "01AAAA2"  # the newest of that name
    assert store.find_run("01bbbb").id == "01BBBB1"  # a prefix, in any case
    assert store.find_run("TICKET-").id == "ticket-7"
    with pytest.raises(RunNotFound, match="several runs"):
        store.find_run("01AAAA")
    with pytest.raises(RunNotFound, match="no run 'nope'"):
        store.find_run("nope")
    with pytest.raises(RunNotFound, match="no run '01A'"):
        store.find_run("01A")  # too short to be a prefix
    with pytest.raises(RunNotFound, match="no run '01%'"):
        store.find_run("01%")  # no wildcard
    assert [r.id for r in store.list_runs()] == ["01AAAA1", "01AAAA2", "01BBBB1", "ticket-7"]
    assert [r.id for r in store.list_runs(newest=2)] == ["01BBBB1", "ticket-7"]
    assert len(store.list_runs(newest=10)) == 4


def test_a_run_round_trips_with_every_field(store: Store):
    run = Run(
        id="child", name="nightly", labels={"team": "a", "emoji": "✓"}, parent_id=None,
        fork_step=2, change={"model": "gpt-4o-mini", "mocks": [{"route": "*"}]},
        created_at=1700000000.25, owner="host/boot/18a-42",
    )  # fmt: skip
    store.create_run(run)
    assert store.get_run("child") == run
    with pytest.raises(RunNotFound, match="no run 'other'"):
        store.get_run("other")


def test_a_run_id_taken_is_refused_and_the_run_kept(store: Store):
    store.create_run(Run(id="r1", name="first"))
    with pytest.raises(AlreadyRecorded, match="already has a run r1"):
        store.create_run(Run(id="r1", name="second"))
    assert store.get_run("r1").name == "first"


def test_finishing_a_run_records_how_it_ended(store: Store):
    store.create_run(Run(id="r1"))
    store.finish_run("r1", RunStatus.DIVERGED, error="why", fork_step=3)
    finished = store.get_run("r1")
    assert (finished.status, finished.error, finished.fork_step) == (RunStatus.DIVERGED, "why", 3)
    assert finished.ended_at is not None
    store.finish_run("r1", RunStatus.RUNNING)  # a resume opens it again
    again = store.get_run("r1")
    assert (again.status, again.ended_at, again.error, again.fork_step) == (
        RunStatus.RUNNING, None, None, 3,
    )  # fmt: skip
    with pytest.raises(RunNotFound):
        store.finish_run("other", RunStatus.FINISHED)


def test_a_resume_names_its_process_as_the_runs_owner_and_an_end_keeps_it(store: Store):
    store.create_run(Run(id="r1", owner="host/boot/18a-1"))
    store.finish_run("r1", RunStatus.CRASHED)
    assert store.get_run("r1").owner == "host/boot/18a-1"
    store.finish_run("r1", RunStatus.RUNNING, owner="host/boot/18b-2")  # a resume
    assert [r.owner for r in store.list_runs()] == ["host/boot/18b-2"]
    assert store.find_run("r1").owner == "host/boot/18b-2"


def test_ending_a_fork_keeps_its_change_as_it_turned_out(store: Store):
    store.create_run(Run(id="r1", mode=Mode.FORK, change={"model": "m"}))
    store.create_run(Run(id="r2", mode=Mode.FORK, change={"model": "m"}))
    store.end_run(Ending("r1", RunStatus.FINISHED))
    assert store.get_run("r1").change == {"model": "m"}  # none given: kept
    store.end_run(Ending("r2", RunStatus.FINISHED, change={"model": "m", "unapplied": ["model"]}))
    assert store.get_run("r2").change == {"model": "m", "unapplied": ["model"]}


def test_values_go_in_and_out_as_copies(store: Store):
    run = Run(id="r1", labels={"a": "1"})
    store.create_run(run)
    run.status, run.labels["a"] = RunStatus.CRASHED, "2"
    assert store.get_run("r1").status is RunStatus.RUNNING
    assert store.get_run("r1").labels == {"a": "1"}
    store.add_exchanges([exchange(0)])
    store.exchanges("r1")[0].status = 500
    assert store.exchanges("r1")[0].status == 200


# exchanges


def test_exchanges_round_trip_byte_exact(store: Store):
    store.create_run(Run("r1"))
    summary = Summary(
        Kind.LLM, "openai_chat", "gpt-4o", Usage(10, 5, 2, 1, cache_write=3, audio=4, audio_seconds=9.5),
        (ToolCall("lookup_order", '{"id": "A1"}', "call_1"), ToolCall("noid", "{}", None)),
        "tool_calls", "some text",
    )  # fmt: skip
    plain = exchange(
        0, conversation(3), summary=summary, upstream="https://api.example.com/v1/x",
        response_headers=(("x-b", "2"), ("X-A", "1"), ("x-b", "3")), ttfb_ms=12.5,
        duration_ms=40.25, started_at=1700000000.5, origin=Origin.MOCKED,
        note="similar: set aside metadata.user_id",
    )  # fmt: skip
    binary = exchange(1, bytes(range(256)) * 40, method="PUT", status=None,
                      response_body=b"\x00\xff" * 1000, summary=None)  # fmt: skip
    empty = exchange(2, b"", method="GET", response_body=b"", error="it broke", status=502)
    store.add_exchanges([plain, binary, empty])
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == [0, 1, 2]
    assert loaded[0] == plain
    assert loaded[1].request_body == binary.request_body
    assert loaded[1].response_body == binary.response_body
    assert (loaded[1].method, loaded[1].status) == ("PUT", None)
    assert loaded[1].summary == Summary(Kind.OTHER, "generic")  # unread: kept as other
    assert (loaded[2].request_body, loaded[2].error, loaded[2].status) == (b"", "it broke", 502)
    assert store.step_count("r1") == 3


def test_streams_keep_their_chunks_offsets_and_whether_they_ended(store: Store):
    store.create_run(Run("r1"))
    chunks = [Chunk(1.5, b"data: a\n\n"), Chunk(20.25, b"data: b\n\n"), Chunk(40.0, b"")]
    whole = exchange(0, chunks=chunks, response_body=b"data: a\n\ndata: b\n\n", duration_ms=41.0)
    cut = exchange(1, chunks=[Chunk(3.0, b"data: x")], response_body=b"data: x",
                   complete=False, error="upstream cut the stream")  # fmt: skip
    no_chunk = exchange(2, chunks=[], response_body=b"", complete=False, error="hung up")
    store.add_exchanges([whole, cut, no_chunk])
    loaded = store.exchanges("r1")
    assert loaded[0].chunks == chunks and loaded[0].complete
    assert loaded[1].chunks == [Chunk(3.0, b"data: x")]
    assert (loaded[1].complete, loaded[1].error) == (False, "upstream cut the stream")
    assert (loaded[2].chunks, loaded[2].complete) == ([], False)
    assert exchange(3).chunks is None and store.exchanges("r1")[0].streamed
    without = store.exchanges("r1", bodies=False)
    assert [[c.offset_ms for c in e.chunks or []] for e in without] == [[1.5, 20.25, 40.0],
                                                                         [3.0], []]  # fmt: skip
    assert without[0].summary == whole.summary or without[0].summary is not None


def test_a_growing_conversation_round_trips_every_turn(store: Store):
    store.create_run(Run("r1"))
    bodies = [conversation(turns) for turns in range(1, 21)]
    store.add_exchanges([exchange(i, body) for i, body in enumerate(bodies)])
    store.add_exchanges([exchange(20, bodies[5])])  # a body seen before
    assert [e.request_body for e in store.exchanges("r1")] == [*bodies, bodies[5]]


def test_requests_that_extend_or_interleave_round_trip(store: Store):
    """Requests that extend an earlier one, two conversations interleaved in one run, a batch
    refused then written again, out of step order: every body comes back as it went in."""
    store.create_run(Run("r1"))
    a = [conversation(turns) for turns in range(1, 7)]
    b = [body.replace(b"support agent", b"billing agent") for body in a]
    store.add_exchanges([exchange(0, a[0]), exchange(1, b[0]), exchange(2, a[1])])
    store.add_exchanges([exchange(3, b[1])])
    with pytest.raises(AlreadyRecorded):
        store.add_exchanges([exchange(4, a[2]), exchange(2, a[3])])  # refused whole
    store.add_exchanges([exchange(5, a[3]), exchange(4, a[2])])  # out of order
    store.add_exchanges([exchange(6, a[4][:-1]), exchange(7, a[5]), exchange(8, b"")])
    expected = [a[0], b[0], a[1], b[1], a[2], a[3], a[4][:-1], a[5], b""]
    assert [e.request_body for e in store.exchanges("r1")] == expected


def test_a_request_a_change_rewrote_keeps_what_its_agent_asked(store: Store):
    """A fork's request is stored as it went upstream, with the body its agent sent beside it
    (what matching reads); copies of it, and others, come back as they went in."""
    store.create_run(Run("r1"))
    asked = [conversation(turns) for turns in range(1, 4)]
    sent = [body.replace(b'"gpt-4o"', b'"gpt-4.1"') for body in asked]
    store.add_exchanges([exchange(0, asked[0])])
    store.add_exchanges([exchange(i, sent[i], asked_body=asked[i]) for i in (1, 2)])
    store.add_exchanges([exchange(3, sent[2], asked_body=b"")])
    loaded = store.exchanges("r1")
    assert [(e.request_body, e.asked_body) for e in loaded] == [
        (asked[0], None), (sent[1], asked[1]), (sent[2], asked[2]), (sent[2], b""),
    ]  # fmt: skip
    assert [e.asked for e in loaded[:3]] == asked
# What an API answers on every call: the same names in the same order, some values changing.
ANSWER_HEADERS = (
    ("Date", "Wed, 02 Dec 2026 08:47:26 GMT"), ("Content-Type", "application/json"),
    ("x-request-id", "req_0"), ("set-cookie", "a=1"), ("Set-Cookie", "b=2"),
    ("openai-processing-ms", "412"), ("x-empty", ""), ("server", "cloudflare"),
)  # fmt: skip


def answer_headers(step: int) -> tuple[tuple[str, str], ...]:
    changed = {0: f"Wed, 02 Dec 2026 08:47:{step % 60:02d} GMT", 2: f"req_{step}"}
    if step % 3 == 0:
        changed[4] = "b=3"  # a repeated name: only the second one changes
    return tuple((name, changed.get(i, value)) for i, (name, value) in enumerate(ANSWER_HEADERS))


def test_headers_read_back_as_recorded_names_case_order_and_repeats(store: Store):
    """A run's header lists, stored once and then by what changed, read back as they went
    in: across batches, a refused batch, out of step order, other names, no headers."""
    store.create_run(Run("r1"))
    sent = (("Accept", "application/json"), ("user-agent", "OpenAI/Python 3.57.0"),
            ("x-stainless-retry-count", "0"))  # fmt: skip
    recorded = {
        step: exchange(step, request_headers=sent, response_headers=answer_headers(step))
        for step in range(12)
    }
    recorded[5] = exchange(5, request_headers=(), response_headers=answer_headers(5)[::-1])
    recorded[6] = exchange(6, request_headers=sent[:2], response_headers=(("X-A", "1"),))
    recorded[7] = exchange(7, request_headers=(("accept", "application/json"), *sent[1:]),
                           response_headers=answer_headers(7))  # fmt: skip
    store.add_exchanges([recorded[0], recorded[1], recorded[2]])
    with pytest.raises(AlreadyRecorded):
        store.add_exchanges([recorded[3], exchange(2)])  # refused whole
    store.add_exchanges([recorded[4], recorded[3]])  # out of order
    store.add_exchanges([recorded[step] for step in range(5, 10)])
    store.add_exchanges([recorded[10]])
    store.add_exchanges([recorded[11]])
    for bodies in (True, False):
        loaded = store.exchanges("r1", bodies=bodies)
        assert [e.request_headers for e in loaded] == [recorded[s].request_headers
                                                       for s in range(12)]  # fmt: skip
        assert [e.response_headers for e in loaded] == [recorded[s].response_headers
                                                        for s in range(12)]  # fmt: skip


def test_another_run_s_headers_are_its_own(store: Store):
    store.create_run(Run("r1"))
    store.create_run(Run("r2"))
    store.add_exchanges([exchange(0, response_headers=answer_headers(0))])
    store.add_exchanges([exchange(0, run_id="r2", response_headers=answer_headers(1)),
                         exchange(1, response_headers=answer_headers(2))])  # fmt: skip
    store.add_exchanges([exchange(1, run_id="r2", response_headers=answer_headers(3))])
    assert [e.response_headers for e in store.exchanges("r1")] == [answer_headers(0),
                                                                   answer_headers(2)]  # fmt: skip
    assert [e.response_headers for e in store.exchanges("r2")] == [answer_headers(1),
                                                                   answer_headers(3)]  # fmt: skip


@pytest.mark.parametrize("text", [None, "", "short", "Answer: ships today. " * 40,
                                  "é∑ ünïcödé 🙂 " * 30, "x" * 127, "x" * 128])  # fmt: skip
def test_a_summary_s_text_reads_back_as_it_was(store: Store, text: str | None):
    store.create_run(Run("r1"))
    summary = Summary(Kind.LLM, "openai_chat", "gpt-4o", text=text)
    store.add_exchanges([exchange(0, summary=summary)])
    assert [e.summary for e in store.exchanges("r1", bodies=False)] == [summary]
    assert [e.summary for e in store.exchanges("r1")] == [summary]


def test_a_step_taken_is_refused_and_its_batch_not_written(store: Store):
    store.create_run(Run("r1"))
    store.add_exchanges([exchange(0, b'{"first": 1}')])
    with pytest.raises(AlreadyRecorded, match="run r1 step 0") as refused:
        store.add_exchanges([exchange(1), exchange(0, b'{"second": 2}')])
    assert (refused.value.run_id, refused.value.step) == ("r1", 0)
    assert [(e.step, e.request_body) for e in store.exchanges("r1")] == [(0, b'{"first": 1}')]
    with pytest.raises(AlreadyRecorded):
        store.add_exchanges([exchange(5), exchange(5)])
    assert store.step_count("r1") == 1


def test_an_exchange_needs_its_run(store: Store):
    with pytest.raises(CassetteError, match="no run other") as refused:
        store.add_exchanges([exchange(0, run_id="other")])
    assert refused.value.step == 0
    assert store.exchanges("other") == [] and store.step_count("other") == 0


def test_next_step_follows_the_highest_step_past_gaps(store: Store):
    store.create_run(Run("r1"))
    assert store.next_step("r1") == 0
    store.add_exchanges([exchange(0), exchange(1), exchange(5)])  # a crash left 2-4 out
    assert store.next_step("r1") == 6 and store.step_count("r1") == 3
    assert store.next_step("unknown") == 0


def test_tickets_are_numbered_once_each_after_the_stored_steps(store: Store):
    store.create_run(Run("r1"))
    store.create_run(Run("r2"))
    store.add_exchanges([exchange(0), exchange(3)])  # written by a proxy that numbered its own
    assert store.number("r1", [-1, -2, -3]) == {-1: 4, -2: 5, -3: 6}
    assert store.number("r1", [-2, -4]) == {-2: 5, -4: 7}  # a ticket keeps its step
    assert store.next_step("r1") == 8  # numbered, not yet written
    assert store.number("r2", [-1]) == {-1: 0}  # tickets are per run
    store.add_exchanges([exchange(9, run_id="r2")])
    assert store.number("r2", [-2]) == {-2: 10}
    with pytest.raises(RunNotFound):
        store.number("unknown", [-1])
    # …and read back, without numbering anything (a reader's)
    assert store.numbered("r1") == {-1: 4, -2: 5, -3: 6, -4: 7}
    assert store.numbered("r2") == {-1: 0, -2: 10}
    assert store.numbered("unknown") == {}
    assert store.next_step("r1") == 8


def test_an_ending_closes_a_running_run_and_no_other(store: Store):
    store.create_run(Run("r1"))
    store.create_run(Run("r2"))
    store.finish_run("r2", RunStatus.FINISHED)
    store.end_run(Ending("r1", RunStatus.CRASHED, "exited 1", ended_at=5.0))
    store.end_run(Ending("r2", RunStatus.CRASHED, "an old journal's"))
    one, two = store.get_run("r1"), store.get_run("r2")
    assert (one.status, one.error, one.ended_at) == (RunStatus.CRASHED, "exited 1", 5.0)
    assert (two.status, two.error) == (RunStatus.FINISHED, None)
    with pytest.raises(RunNotFound):
        store.end_run(Ending("unknown", RunStatus.FINISHED))


def test_response_keys_are_equal_for_equal_response_bodies(store: Store):
    store.create_run(Run("r1"))
    store.add_exchanges([
        exchange(0, response_body=b'{"answer": 1}'),
        exchange(1, response_body=b'{"answer": 2}'),
        exchange(2, b'{"other": "request"}', response_body=b'{"answer": 1}'),
    ])  # fmt: skip
    keys = store.response_keys("r1")
    assert sorted(keys) == [0, 1, 2]
    assert keys[0] == keys[2] != keys[1]
    assert store.response_keys("unknown") == {}


def pieces_of(data: bytes, size: int, at: float = 5.0) -> tuple[list[Blob], tuple[Piece, ...]]:
    """`data` as a tee spills it: blobs of `size` bytes, and the pieces that name them."""
    parts = [data[start : start + size] for start in range(0, len(data), size)]
    blobs = [Blob(hashlib.sha256(part).hexdigest(), part) for part in parts]
    return blobs, tuple(Piece(b.digest, len(b.data), at + n) for n, b in enumerate(blobs))


def test_a_body_in_pieces_reads_back_exact_and_its_pieces_only_when_asked(store: Store):
    store.create_run(Run("r1"))
    rest = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and a bit, in pieces of 256 KiB
    blobs, pieces = pieces_of(rest, 256 * 1024)
    store.add_pieces(blobs)
    store.add_pieces(blobs[:2])  # twice is harmless: a piece is a blob
    plain = exchange(0, response_body=b"held part", pieces=pieces)
    stream = exchange(1, response_body=b"data: a\n\n", chunks=[Chunk(1.0, b"data: a\n\n")],
                      pieces=pieces[:2])  # fmt: skip
    store.add_exchanges([plain, stream])
    loaded, streamed = store.exchanges("r1")
    # reading the run holds the held part and the pieces' names, never their bytes
    assert (loaded.response_body, loaded.pieces) == (b"held part", pieces)
    assert loaded.body_size == len(b"held part") + len(rest)
    assert streamed.chunks == [Chunk(1.0, b"data: a\n\n")] and streamed.pieces == pieces[:2]
    assert b"".join(store.piece(piece) for piece in loaded.pieces) == rest
    assert store.exchanges("r1", bodies=False)[0].pieces == pieces
    keys = store.response_keys("r1")
    store.add_exchanges([exchange(2, response_body=b"held part")])
    assert store.response_keys("r1")[2] != keys[0]  # the pieces are part of the body


def test_a_request_body_in_pieces_reads_back_with_its_fingerprint(store: Store):
    store.create_run(Run("r1"))
    rest = bytes(range(256)) * 2048  # an upload's bytes past its held part
    blobs, pieces = pieces_of(rest, 128 * 1024)
    store.add_pieces(blobs)
    # its fingerprint is the whole body's, read as it passed
    upload = exchange(0, b"held part", fingerprint="f" * 64, request_pieces=pieces)
    store.add_exchanges([upload, exchange(1, response_body=b"{}")])
    loaded, plain = store.exchanges("r1")
    assert (loaded.request_body, loaded.request_pieces) == (b"held part", pieces)
    assert loaded.fingerprint == "f" * 64 and loaded.pieces == ()
    assert loaded.request_size == len(b"held part") + len(rest)
    assert b"".join(store.piece(piece) for piece in loaded.request_pieces) == rest
    assert store.exchanges("r1", bodies=False)[0].request_pieces == pieces
    assert plain.request_pieces == ()


def test_a_piece_the_store_lacks_is_a_clear_error(store: Store):
    _, (piece,) = pieces_of(b"never stored", 64)
    with pytest.raises(CassetteError, match=piece.digest):
        store.piece(piece)


# snapshots


def test_snapshots_keep_the_newest_good_one_per_adapter(store: Store):
    store.create_run(Run(id="r"))
    for step, adapter, error in [
        (0, "memory", None), (2, "memory", None), (3, "memory", "timeout"), (1, "files", None),
    ]:  # fmt: skip
        data = f"{adapter}{step}".encode() if error is None else b""
        store.add_snapshot(Snapshot(run_id="r", step=step, adapter=adapter, data=data,
                                    error=error, content_type="text/plain"))  # fmt: skip
    listed = store.snapshots("r")
    assert [(s.step, s.adapter, s.data, s.error) for s in listed] == [
        (0, "memory", b"", None), (1, "files", b"", None), (2, "memory", b"", None),
        (3, "memory", b"", "timeout"),
    ]  # fmt: skip
    assert [s.size for s in listed] == [7, 6, 7, 0]
    assert [s.data for s in store.snapshots("r", data=True)] == [
        b"memory0",
        b"files1",
        b"memory2",
        b"",
    ]
    latest = {s.adapter: s.data for s in store.latest_snapshots("r")}
    assert latest == {"memory": b"memory2", "files": b"files1"}
    assert {s.adapter: s.step for s in store.latest_snapshots("r", at_most=1)} == {
        "memory": 0, "files": 1,
    }  # fmt: skip
    assert store.latest_snapshots("r", at_most=-1) == []


def test_a_snapshot_round_trips_and_a_retried_pull_replaces_it(store: Store):
    store.create_run(Run(id="r"))
    state = b"\x00binary state\xff" * 5000
    first = Snapshot("r", 4, "agent", "application/json", b"{}", None, 1700.5, 12.5)
    store.add_snapshot(first)
    store.add_snapshot(Snapshot("r", 4, "agent", "application/octet-stream", state, None, 1701.0))
    (loaded,) = store.snapshots("r", data=True)
    assert (loaded.content_type, loaded.data, loaded.size) == (
        "application/octet-stream", state, len(state),
    )  # fmt: skip
    assert loaded.taken_at == 1701.0
    with pytest.raises(CassetteError, match="no run other"):
        store.add_snapshot(Snapshot("other", 0, "agent"))


# experiments

SPEC = {"at": "first-llm", "change": {"model": "gpt-4o-mini"}, "select": ["label:batch=demo"]}


def test_an_experiment_and_its_branches_round_trip(store: Store):
    for run_id in ("p1", "p2", "b1"):
        store.create_run(Run(run_id))
    assert store.list_experiments() == []
    store.create_experiment(StoredExperiment("mini", 10.0, None, SPEC))
    store.add_experiment_branch("mini", StoredBranch(1, "p2", None, "no model call", {"at": None}))
    store.add_experiment_branch(
        "mini", StoredBranch(0, "p1", "b1", None, {"at": 0, "check": {"passed": True}})
    )
    experiment, branches = store.get_experiment("mini")
    assert experiment == StoredExperiment("mini", 10.0, None, SPEC)
    assert [b.seq for b in branches] == [0, 1]  # in selection order, whatever order they ended
    assert branches[0] == StoredBranch(0, "p1", "b1", None, {"at": 0, "check": {"passed": True}})
    store.finish_experiment("mini", ended_at=12.5)
    store.create_experiment(StoredExperiment("later", 11.0, None, {}))
    assert [(e.name, e.ended_at) for e in store.list_experiments()] == [
        ("mini", 12.5),
        ("later", None),
    ]


def test_a_branch_counts_once_and_the_counts_read_without_the_branches(store: Store):
    """Two workers storing the same probe (one retried after the other was thought lost):
    the second is refused as recorded already, so each selected run counts once."""
    for run_id in ("p1", "p2", "b1", "b2"):
        store.create_run(Run(run_id))
    assert store.experiment_counts("mini") == (0, 0)
    store.create_experiment(StoredExperiment("mini", 10.0, None, SPEC))
    store.add_experiment_branch("mini", StoredBranch(0, "p1", "b1", None, {"at": 0}))
    with pytest.raises(AlreadyRecorded, match="already has branch 0"):
        store.add_experiment_branch("mini", StoredBranch(0, "p1", "b2", None, {"at": 0}))
    store.add_experiment_branch("mini", StoredBranch(1, "p2", None, "no model call", {}))
    store.add_experiment_branch("mini", StoredBranch(2, "p2", "b2", "crashed: exit 1", {}))
    assert store.experiment_counts("mini") == (3, 2)
    assert store.get_experiment("mini")[1][0].branch_id == "b1"


def test_experiment_names_are_unique_and_unknown_names_are_clear(store: Store):
    store.create_experiment(StoredExperiment("mini", 10.0, None, SPEC))
    with pytest.raises(ConfigError, match="already has an experiment 'mini'"):
        store.create_experiment(StoredExperiment("mini", 11.0, None, SPEC))
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        store.get_experiment("nope")
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        store.finish_experiment("nope", ended_at=1.0)
    with pytest.raises(ConfigError, match="no experiment 'nope'"):
        store.add_experiment_branch("nope", StoredBranch(0, "p1", None, "x", {}))


# a closed store


def test_a_closed_store_refuses_every_call(store: Store):
    store.create_run(Run("r1"))
    store.close()
    calls = [
        lambda: store.create_run(Run("r2")), lambda: store.get_run("r1"),
        lambda: store.find_run("r1"), store.list_runs,
        lambda: store.finish_run("r1", RunStatus.FINISHED),
        lambda: store.add_exchanges([exchange(0)]), lambda: store.exchanges("r1"),
        lambda: store.step_count("r1"), lambda: store.next_step("r1"),
        lambda: store.number("r1", [-1]), lambda: store.response_keys("r1"),
        lambda: store.end_run(Ending("r1", RunStatus.FINISHED)),
        lambda: store.add_snapshot(Snapshot("r1", 0, "a")), lambda: store.snapshots("r1"),
        lambda: store.latest_snapshots("r1"), store.list_experiments,
        lambda: store.add_pieces([Blob("0" * 64, b"")]),
        lambda: store.piece(Piece("0" * 64, 0, 0.0)),
        lambda: store.create_experiment(StoredExperiment("e", 1.0, None, {})),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(CassetteError, match="closed"):
            call()
    store.close()  # twice is fine
