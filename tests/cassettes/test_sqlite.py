"""The SQLite cassette beyond the contract: what is in the file (dedup, end markers, columns),
the file's own checks (application id, schema version, locks) and several processes on it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from forkpoint.cassettes import blobs
from forkpoint.cassettes.sqlite.store import SCHEMA_VERSION, SqliteStore
from forkpoint.cassettes.store import Store
from forkpoint.errors import CassetteError, SchemaVersionError
from forkpoint.models import Blob, Chunk, Kind, Piece, Run, Summary, ToolCall, Usage
from tests.cassettes.test_contract import conversation, exchange


def test_a_growing_conversation_stores_each_message_once(store: SqliteStore):
    store.create_run(Run("r1"))
    bodies = [conversation(turns) for turns in range(1, 21)]
    store.add_exchanges([exchange(i, body) for i, body in enumerate(bodies)])
    stored = store.query("SELECT sum(size) FROM contents")[0][0]
    total = sum(len(b) for b in bodies)
    assert stored < total / 5, (stored, total)


def test_a_long_conversation_grows_linearly(store: SqliteStore):
    """Each request names what it repeats of the one before by reference, not hash by hash."""
    store.create_run(Run("r1"))
    bodies = [conversation(turns) for turns in range(1, 101)]
    store.add_exchanges([exchange(i, body) for i, body in enumerate(bodies)])
    manifests = [m for (m,) in store.query("SELECT request_body FROM exchanges ORDER BY step")]
    assert max(len(m) for m in manifests[1:]) < 300, manifests[-1]
    assert [e.request_body for e in store.exchanges("r1")] == bodies


# The openai SDK's request headers, and api.openai.com's answer with the values that change.
SDK_HEADERS = (
    ("Accept-Encoding", "gzip, deflate, br, zstd"), ("authorization", "[redacted]"),
    ("accept", "application/json"), ("content-type", "application/json"),
    ("user-agent", "OpenAI/Python 3.57.0"), ("x-stainless-lang", "python"),
    ("x-stainless-package-version", "3.57.0"), ("x-stainless-os", "Linux"),
    ("x-stainless-arch", "x64"), ("x-stainless-runtime", "CPython"),
    ("x-stainless-runtime-version", "3.12.1"), ("x-stainless-async", "false"),
    ("x-stainless-retry-count", "0"), ("x-stainless-read-timeout", "600"),
)  # fmt: skip


def openai_answer_headers(step: int) -> tuple[tuple[str, str], ...]:
    return (
        ("x-request-id", f"req_{step:032x}"), ("Content-Type", "application/json"),
        ("Date", f"Wed, 02 Dec 2026 08:{step // 60:02d}:{step % 60:02d} GMT"),
        ("openai-organization", "user-x8rkpqg1v0wzt5bcn2hjdmla"),
        ("openai-processing-ms", str(300 + step)), ("openai-version", "2020-10-01"),
        ("x-ratelimit-limit-requests", "10000"), ("x-ratelimit-remaining-requests", "9999"),
        ("strict-transport-security", "max-age=31536000; includeSubDomains; preload"),
        ("Server", "cloudflare"), ("Content-Length", str(1000 + step)),
    )  # fmt: skip


def test_a_run_stores_its_headers_once_then_what_changed_and_its_text_compressed(
    store: SqliteStore,
):
    """Issue 27.10: every exchange kept its header lists whole and its answer's text as it
    was, 1.4 KB a step of what repeats."""
    store.create_run(Run("r1"))
    text = "Answer: your order A00042 ships today from our warehouse in Leeds. " * 8
    summary = Summary(Kind.LLM, "openai_chat", "gpt-4o", text=text)
    recorded = [exchange(step, request_headers=SDK_HEADERS, summary=summary,
                         response_headers=openai_answer_headers(step)) for step in range(50)]  # fmt: skip
    for start in range(0, 50, 7):
        store.add_exchanges(recorded[start : start + 7])
    sizes = store.query("SELECT length(request_headers), length(response_headers), "
                        "length(text_zstd), text FROM exchanges ORDER BY step")  # fmt: skip
    whole = len(orjson.dumps(SDK_HEADERS)) + len(orjson.dumps(openai_answer_headers(0)))
    assert sum(r + a for r, a, _, _ in sizes[1:]) / 49 < whole / 5, sizes[1]
    assert all(packed < len(text) / 2 and plain is None for _, _, packed, plain in sizes)
    loaded = store.exchanges("r1", bodies=False)
    assert [(e.request_headers, e.response_headers, e.summary) for e in loaded] == [
        (e.request_headers, e.response_headers, e.summary) for e in recorded
    ]


def test_damaged_headers_name_the_steps_that_refer_to_them(store: SqliteStore):
    store.create_run(Run("r1"))
    store.add_exchanges([exchange(step, response_headers=openai_answer_headers(step))
                         for step in range(3)])  # fmt: skip
    store._db.conn.execute("UPDATE exchanges SET kind='bogus' WHERE step=0")
    damaged: list[CassetteError] = []
    loaded = store.exchanges("r1", damaged=damaged)  # step 0's other damage: its headers read
    assert [e.response_headers for e in loaded] == [openai_answer_headers(1),
                                                    openai_answer_headers(2)]  # fmt: skip
    store._db.conn.execute("UPDATE exchanges SET response_headers='[[1' WHERE step=0")
    damaged.clear()
    assert store.exchanges("r1", bodies=False, damaged=damaged) == []
    assert [str(e).split(" is damaged")[0] for e in damaged] == [
        "run r1 step 0", "run r1 step 1", "run r1 step 2"]  # fmt: skip
    assert "refers to step 0, which does not read" in str(damaged[1])


def test_split_is_lossless_on_any_bytes():
    for body in (b"", b"x", conversation(3), b'{"type"' * 500, bytes(range(256)) * 10):
        assert b"".join(blobs.split(body)) == body


def test_a_cut_stream_has_no_end_marker_row(store: SqliteStore):
    store.create_run(Run("r1"))
    cut = exchange(0, chunks=[Chunk(1.0, b"data: a\n\n")], complete=False, error="cut")
    whole = exchange(1, chunks=[Chunk(1.0, b"data: a\n\n")], duration_ms=3.0)
    store.add_exchanges([cut, whole])
    ends = store.query("SELECT step, count(*) FROM chunks WHERE end=1 GROUP BY step")
    assert ends == [(1, 1)]


def test_tool_calls_and_usage_columns_are_queryable(store: SqliteStore):
    store.create_run(Run("r1"))
    summary = Summary(Kind.LLM, "openai_chat", "gpt-4o", Usage(10, 5, 2, 1),
                      (ToolCall("lookup_order", '{"id": "A1"}', "call_1"),), "tool_calls", None)  # fmt: skip
    store.add_exchanges([exchange(0, summary=summary)])
    row = store.query("SELECT model, input_tokens, cached_tokens, tool_calls FROM exchanges")[0]
    assert row[:3] == ("gpt-4o", 10, 2)
    assert orjson.loads(row[3]) == [["lookup_order", '{"id": "A1"}', "call_1"]]


def test_the_file_says_what_it_is_and_is_in_wal_mode(store: SqliteStore):
    assert store.query("PRAGMA application_id") == [(0x666B7074,)]
    assert store.query("PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert store.query("PRAGMA journal_mode") == [("wal",)]
    assert store.query("PRAGMA foreign_keys") == [(1,)]


def test_reopening_keeps_everything(cassette: Path):
    first = SqliteStore(cassette)
    first.create_run(Run("r1"))
    first.add_exchanges([exchange(0, conversation(2))])
    first.number("r1", [-1])
    first.close()
    again = SqliteStore(cassette, create=False)
    assert again.exchanges("r1")[0].request_body == conversation(2)
    assert again.number("r1", [-1, -2]) == {-1: 1, -2: 2}  # the tickets are in the file
    again.close()


def test_a_second_store_on_the_file_in_one_process_leaves_the_firsts_writes_whole(
    cassette: Path,
):
    """Found by serve's in-process wake: once the web view answered a run (a store of its own
    on serve's file, opened then closed), serve's writes were seen by no other process. The
    second store's check read the file's header with a file object of its own, and closing any
    descriptor of a file drops every POSIX lock the process holds on it: serve's connection
    was left writing a WAL that other processes started over."""
    def read_elsewhere() -> list[str]:  # a reader in another process, closed when done
        read = ("import sqlite3, sys; rows = sqlite3.connect(sys.argv[1]).execute("
                "'SELECT id FROM runs ORDER BY id'); print(*(r[0] for r in rows), sep=',')")
        done = subprocess.run([sys.executable, "-c", read, str(cassette)], capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.strip().split(",")

    first = SqliteStore(cassette)
    first.create_run(Run("before"))
    second = SqliteStore(cassette, create=False)  # as `forkpoint.answer` opens one in serve
    second.create_run(Run("by the second"))
    second.close()
    assert read_elsewhere() == ["before", "by the second"]
    first.create_run(Run("after"))
    assert read_elsewhere() == ["after", "before", "by the second"]
    first.close()


def test_a_missing_cassette_is_a_clear_error_when_reading(tmp_path: Path):
    with pytest.raises(CassetteError, match=r"no cassette at .*record a run first"):
        SqliteStore(tmp_path / "absent.db", create=False)
    with pytest.raises(CassetteError, match=r"no cassette at"):
        SqliteStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.parametrize("version, word", [(0, "older"), (SCHEMA_VERSION + 1, "newer")])
def test_another_schema_version_is_refused_not_rewritten(cassette: Path, version: int, word: str):
    SqliteStore(cassette).close()
    with sqlite3.connect(cassette) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")  # so a switch back to WAL would show
        conn.execute(f"PRAGMA user_version={version}")
    before = cassette.read_bytes()
    for read_only in (False, True):
        with pytest.raises(
            SchemaVersionError, match=f"version {version}, from an? {word} forkpoint"
        ):
            SqliteStore(cassette, read_only=read_only)
        assert cassette.read_bytes() == before


def test_other_sqlite_files_and_garbage_are_refused(tmp_path: Path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(CassetteError, match="not a forkpoint cassette"):
        SqliteStore(other)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(CassetteError, match="not a readable SQLite cassette"):
        SqliteStore(garbage)


def test_a_locked_cassette_is_reported_as_locked(cassette: Path):
    store = SqliteStore(cassette, busy_timeout_ms=100)
    store.create_run(Run("r1"))
    locker = sqlite3.connect(cassette)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CassetteError, match="locked by another process"):
            store.add_exchanges([exchange(0)])
        with pytest.raises(CassetteError, match="locked by another process"):
            store.number("r1", [-1])
    finally:
        locker.rollback()
        locker.close()
    store.add_exchanges([exchange(0)])  # usable again once the lock is gone
    assert len(store.exchanges("r1")) == 1
    store.close()


def test_processes_creating_one_new_cassette_at_once_all_succeed(tmp_path: Path):
    """Parallel `forkpoint record`s into a cassette that does not exist yet."""
    cassette = tmp_path / "new.db"
    code = (
        "import sys; from forkpoint.cassettes.sqlite.store import SqliteStore; "
        "from forkpoint.models import Run; "
        "s = SqliteStore(sys.argv[1]); s.create_run(Run(sys.argv[2])); s.close()"
    )
    processes = [subprocess.Popen([sys.executable, "-c", code, str(cassette), f"run-{i}"],
                                  stderr=subprocess.PIPE) for i in range(6)]  # fmt: skip
    errors = [p.communicate(timeout=60)[1].decode() for p in processes]
    assert [p.returncode for p in processes] == [0] * 6, errors
    store = SqliteStore(cassette)
    assert sorted(r.id for r in store.list_runs()) == [f"run-{i}" for i in range(6)]
    store.close()


def test_processes_allocating_steps_of_one_run_never_share_one(tmp_path: Path):
    cassette = tmp_path / "shared.db"
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    store.close()
    code = (
        "import sys; from forkpoint.cassettes.sqlite.store import SqliteStore; "
        "from forkpoint.models import new_ticket; s = SqliteStore(sys.argv[1]); "
        "print(*(s.number('r1', [t])[t] for t in (new_ticket() for _ in range(200))))"
    )
    processes = [subprocess.Popen([sys.executable, "-c", code, str(cassette)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]  # fmt: skip
    steps = [int(s) for p in processes for s in p.communicate(timeout=60)[0].split()]
    assert sorted(steps) == list(range(600))


def test_a_piece_whose_blob_was_changed_is_named_damaged_not_served(store: SqliteStore):
    data = b"a piece of a large body " * 100
    piece = Piece(blobs.content_hash(data), len(data), 0.0)
    store.add_pieces([Blob(piece.digest, data)])
    conn = sqlite3.connect(store.path)
    with conn:  # the cassette damaged behind forkpoint's back
        conn.execute("UPDATE contents SET codec='raw', data=? WHERE hash=?",
                     (b"other bytes", bytes.fromhex(piece.digest)))  # fmt: skip
    conn.close()
    with pytest.raises(CassetteError, match=f"the piece {piece.digest} is damaged"):
        store.piece(piece)


def a_batch_refused_while_packed_leaves_no_step_to_refer_to(store: Store) -> None:
    """A batch the store cannot take (text it cannot encode): what was packed of it before is
    not stored, so the next exchange must not refer to it."""
    store.create_run(Run("r1"))
    bad = exchange(1, summary=Summary(Kind.LLM, "openai_chat", "gpt-4o", text="cut \ud800"))
    with pytest.raises(UnicodeEncodeError):
        store.add_exchanges([exchange(0, conversation(1), response_headers=openai_answer_headers(0)),
                             bad])  # fmt: skip
    later = exchange(2, conversation(2), response_headers=openai_answer_headers(2))
    store.add_exchanges([later])
    loaded = store.exchanges("r1")
    assert [(e.step, e.request_body, e.response_headers) for e in loaded] == [
        (2, later.request_body, later.response_headers)
    ]


def test_a_batch_refused_while_packed_leaves_no_step_to_refer_to(store: SqliteStore):
    a_batch_refused_while_packed_leaves_no_step_to_refer_to(store)
