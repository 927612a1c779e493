"""The SQLite cassette: round trips, dedup, the schema check, cut streams."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from forkpoint.cassettes import blobs
from forkpoint.cassettes.sqlite.store import SCHEMA_VERSION, SqliteStore
from forkpoint.errors import CassetteError, RunNotFound, SchemaVersionError
from forkpoint.models import Chunk, Exchange, Run, RunStatus


def exchange(step: int, body: bytes, **fields: object) -> Exchange:
    return Exchange(
        run_id="r1",
        step=step,
        method="POST",
        route="/v1/chat/completions",
        request_headers=(("content-type", "application/json"),),
        request_body=body,
        fingerprint=f"fp{step}",
        status=200,
        response_body=b'{"ok": true}',
        **fields,
    )


def conversation(turns: int) -> bytes:
    """A chat request after `turns` turns, serialized as the openai SDK does (json.dumps)."""
    import json

    messages = [{"role": "system", "content": "You are a support agent. " * 20}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"question {turn}: " + "details " * 40})
        messages.append({"role": "assistant", "content": f"answer {turn}: " + "because " * 40})
    return json.dumps({"messages": messages, "model": "gpt-4o"}).encode()


def test_exchanges_round_trip_with_chunks(store: SqliteStore):
    store.create_run(Run("r1", name="first", labels={"team": "a"}))
    chunks = [
        Chunk(1.5, b"data: a\n\n"),
        Chunk(20.25, b"data: b\n\n"),
        Chunk(40.0, b"data: [DONE]\n\n"),
    ]
    stream = exchange(
        1, b"{}", chunks=chunks, response_headers=(("content-type", "text/event-stream"),)
    )
    stream.response_body = b"".join(c.data for c in chunks)
    store.add_exchanges([exchange(0, b'{"a": 1}'), stream])
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == [0, 1]
    assert loaded[0].request_body == b'{"a": 1}' and loaded[0].chunks is None
    assert loaded[1].chunks == chunks
    assert loaded[1].response_headers == (("content-type", "text/event-stream"),)
    assert store.find_run("first").labels == {"team": "a"}


def test_a_growing_conversation_stores_each_message_once(store: SqliteStore):
    store.create_run(Run("r1"))
    bodies = [conversation(turns) for turns in range(1, 21)]
    store.add_exchanges([exchange(i, body) for i, body in enumerate(bodies)])
    stored = store.query("SELECT sum(size) FROM blobs")[0][0]
    total = sum(len(b) for b in bodies)
    assert stored < total / 5, (stored, total)
    assert [e.request_body for e in store.exchanges("r1")] == bodies


def test_split_is_lossless_on_any_bytes():
    for body in (b"", b"x", conversation(3), b'{"type"' * 500, bytes(range(256)) * 10):
        assert b"".join(blobs.split(body)) == body


def test_a_cut_stream_is_marked_incomplete_without_an_end_marker(store: SqliteStore):
    store.create_run(Run("r1"))
    cut = exchange(0, b"{}", chunks=[Chunk(1.0, b"data: a\n\n")], complete=False, error="cut")
    whole = exchange(1, b"{}", chunks=[Chunk(1.0, b"data: a\n\n")], duration_ms=3.0)
    store.add_exchanges([cut, whole])
    ends = store.query("SELECT step, count(*) FROM chunks WHERE end=1 GROUP BY step")
    assert ends == [(1, 1)]
    loaded = store.exchanges("r1")
    assert loaded[0].complete is False and loaded[0].error == "cut"
    assert loaded[1].complete is True


def test_finish_run_and_lookup_by_prefix_and_name(store: SqliteStore):
    store.create_run(Run("01ABCDEF", name="nightly"))
    store.create_run(Run("01ABCXYZ", name="nightly"))
    store.finish_run("01ABCDEF", RunStatus.CRASHED, error="exit 1")
    assert store.get_run("01ABCDEF").status is RunStatus.CRASHED
    assert store.find_run("nightly").id == "01ABCXYZ"  # the newest of that name
    assert store.find_run("01abcd").id == "01ABCDEF"
    with pytest.raises(RunNotFound, match="several runs"):
        store.find_run("01ABC")
    with pytest.raises(RunNotFound, match="forkpoint runs"):
        store.find_run("nope")


def test_reopening_keeps_everything(cassette: Path):
    first = SqliteStore(cassette)
    first.create_run(Run("r1"))
    first.add_exchanges([exchange(0, conversation(2))])
    first.close()
    again = SqliteStore(cassette, create=False)
    assert again.exchanges("r1")[0].request_body == conversation(2)
    again.close()


def test_a_missing_cassette_is_a_clear_error_when_reading(tmp_path: Path):
    with pytest.raises(CassetteError, match=r"no cassette at .*record a run first"):
        SqliteStore(tmp_path / "absent.db", create=False)


@pytest.mark.parametrize(
    "version, word", [(SCHEMA_VERSION - 1, "older"), (SCHEMA_VERSION + 1, "newer")]
)
def test_another_schema_version_is_refused_not_rewritten(cassette: Path, version: int, word: str):
    SqliteStore(cassette).close()
    with sqlite3.connect(cassette) as conn:
        conn.execute(f"PRAGMA user_version={version}")
    before = cassette.read_bytes()
    with pytest.raises(SchemaVersionError, match=f"version {version}, from an? {word} forkpoint"):
        SqliteStore(cassette)
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
            store.add_exchanges([exchange(0, b"{}")])
    finally:
        locker.rollback()
        locker.close()
    store.add_exchanges([exchange(0, b"{}")])  # usable again once the lock is gone
    assert len(store.exchanges("r1")) == 1
    store.close()


def test_tool_calls_and_usage_columns_are_queryable(store: SqliteStore):
    from forkpoint.models import Kind, Summary, ToolCall, Usage

    store.create_run(Run("r1"))
    summary = Summary(
        Kind.LLM,
        "openai_chat",
        "gpt-4o",
        Usage(10, 5, 2, 1),
        (ToolCall("lookup_order", '{"id": "A1"}', "call_1"),),
        "tool_calls",
        None,
    )
    store.add_exchanges([exchange(0, b"{}", summary=summary)])
    row = store.query("SELECT model, input_tokens, cached_tokens, tool_calls FROM exchanges")[0]
    assert row[:3] == ("gpt-4o", 10, 2)
    assert orjson.loads(row[3]) == [["lookup_order", '{"id": "A1"}', "call_1"]]
    assert store.exchanges("r1")[0].summary == summary


def test_processes_creating_one_new_cassette_at_once_all_succeed(tmp_path: Path):
    """Parallel `forkpoint record`s into a cassette that does not exist yet."""
    import subprocess
    import sys

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
