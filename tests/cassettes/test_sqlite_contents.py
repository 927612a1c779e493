"""The SQLite cassette's blobs from schema 12 (issue 27.10): numbered in `contents`, compressed
against their run's keyframes, each read back checked against its hash; what a chat costs
a turn; and what a damaged or shared blob does."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from forkpoint.cassettes import deltas, headers
from forkpoint.cassettes.sqlite.schema import PAGE_SIZE
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import CassetteError
from forkpoint.models import Blob, Exchange, Kind, Piece, Run, Summary, Usage
from forkpoint.runtime.recording.unmerged import _key
from tests.cassettes.test_contract import exchange
from tests.cassettes.test_sqlite import SDK_HEADERS, openai_answer_headers

SYSTEM = "You are a support agent for an online shop. Be brief and exact. " * 8


def answer(turn: int) -> bytes:
    """A chat.completion as api.openai.com sends it (its id different every time)."""
    ident = hashlib.sha256(f"id{turn}".encode()).hexdigest()[:29]
    text = f"Answer {turn}: order A{turn:05d} is on its way, sent from Leeds on the {turn}th."
    return json.dumps({
        "id": f"chatcmpl-{ident}", "object": "chat.completion", "created": 1796212420 + turn,
        "model": "gpt-4o", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": text, "refusal": None, "annotations": []},
            "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100 + turn, "completion_tokens": 30, "total_tokens": 130 + turn},
        "system_fingerprint": "fp_a2a69af70d",
    }).encode()  # fmt: skip


def chat(turns: int, run_id: str = "r1", first: int = 0) -> list[Exchange]:
    """A chat of `turns` turns as the openai SDK sends it (each request resends the history),
    its questions numbered from `first`."""
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    recorded = []
    for step, turn in enumerate(range(first, first + turns)):
        messages.append({"role": "user", "content": f"Question {turn}: where is order "
                         f"A{turn:05d}? " + "It has not arrived yet, and I paid for it. " * 4})  # fmt: skip
        body = json.dumps({"messages": messages, "model": "gpt-4o"}).encode()
        response = answer(turn)
        content = json.loads(response)["choices"][0]["message"]["content"]
        recorded.append(exchange(
            step, body, run_id=run_id, request_headers=SDK_HEADERS, response_body=response,
            response_headers=openai_answer_headers(turn), started_at=1796212420.0 + turn,
            fingerprint=hashlib.sha256(body).hexdigest(), duration_ms=20.5,
            summary=Summary(Kind.LLM, "openai_chat", "gpt-4o", Usage(100 + turn, 30), (),
                            "stop", content),
        ))  # fmt: skip
        messages.append({"role": "assistant", "content": content})
    return recorded


def size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def test_a_new_cassette_is_small_before_its_first_run(cassette: Path):
    SqliteStore(cassette).close()
    with closing(sqlite3.connect(cassette)) as conn:
        assert conn.execute("PRAGMA page_size").fetchone() == (PAGE_SIZE,)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "contents" in tables and "blobs" not in tables  # nothing to keep by hash
    assert "idx_exchanges_run_id_fingerprint" not in tables  # nothing looks one up
    assert size(cassette) <= 40 * PAGE_SIZE


def test_a_chat_costs_its_new_content_and_a_few_hundred_bytes_a_turn(cassette: Path):
    """Issue 27.10: each turn's row, blobs and index entries, not its history again."""
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    recorded = chat(60)
    for start in range(0, 60, 8):
        store.add_exchanges(recorded[start : start + 8])
    store.close()
    store = SqliteStore(cassette)
    assert store.exchanges("r1") == recorded
    codecs = dict(store.query("SELECT codec, count(*) FROM contents GROUP BY codec"))
    assert codecs["zstd-dict"] > 2 * (codecs.get("zstd", 0) + codecs.get("raw", 0)), codecs
    store.close()
    at_60 = size(cassette)
    store = SqliteStore(cassette)
    store.create_run(Run("r2"))
    store.add_exchanges(chat(10, "r2", first=100))
    store.close()
    at_10 = size(cassette) - at_60  # a second run of 10 turns: its keyframes, then deltas
    assert (at_60 - 40 * PAGE_SIZE) / 60 < 1000, at_60
    assert at_10 < 12 * PAGE_SIZE, at_10


def test_a_delta_reads_alone_as_a_piece_and_after_a_reopening(cassette: Path):
    """Random access: a blob compressed against keyframes reads without the rest of its run."""
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    store.add_exchanges(chat(6))
    number, digest, codec = store.query(
        "SELECT id, lower(hex(hash)), codec FROM contents ORDER BY id DESC LIMIT 1")[0]  # fmt: skip
    assert codec == "zstd-dict"
    store.close()
    plain = answer(5)  # the last blob: step 5's answer
    assert hashlib.sha256(plain).hexdigest() == digest
    reader = SqliteStore(cassette, read_only=True)
    assert reader.piece(Piece(digest, len(plain), 0.0)) == plain
    assert reader.query("SELECT base FROM contents WHERE id=?", (number,))[0][0] is not None
    reader.close()


def test_a_damaged_keyframe_names_the_steps_that_need_it(cassette: Path):
    store = SqliteStore(cassette)
    for run_id, first in (("r1", 0), ("r2", 100)):  # nothing in common but the system prompt
        store.create_run(Run(run_id))
        store.add_exchanges(chat(4, run_id, first))
    # r1's first answer: a keyframe its later answers were compressed against
    first = hashlib.sha256(answer(0)).digest()
    [(number, codec)] = store.query("SELECT id, codec FROM contents WHERE hash=?", (first,))
    assert codec == "zstd"
    users = store.query("SELECT count(*) FROM contents WHERE base LIKE ?", (f"%{number}%",))
    assert users[0][0] >= 3
    with closing(sqlite3.connect(cassette)) as conn, conn:
        conn.execute("UPDATE contents SET data=? WHERE id=?", (b"\x28\xb5\x2f\xfd\x00", number))
    damaged: list[CassetteError] = []
    assert [e.step for e in store.exchanges("r1", damaged=damaged)] == []
    assert [str(e).split(" is damaged")[0] for e in damaged] == [
        f"run r1 step {step}" for step in range(4)]  # fmt: skip
    assert f"blob {number} does not decompress" in str(damaged[0])
    assert store.exchanges("r2") == chat(4, "r2", 100)  # its own keyframes: whole
    store.close()


def test_a_blob_that_reads_back_other_bytes_is_damage_not_a_body(cassette: Path):
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    store.add_exchanges(chat(2))
    with closing(sqlite3.connect(cassette)) as conn, conn:  # the right codec, other bytes
        conn.execute("UPDATE contents SET codec='raw', data=? WHERE hash=?",
                     (b"{}", hashlib.sha256(answer(1)).digest()))  # fmt: skip
    with pytest.raises(CassetteError, match=r"run r1 step 1 is damaged: a body .* does not "
                                            r"read back as its bytes"):  # fmt: skip
        store.exchanges("r1")
    store.close()


def test_two_writers_of_one_file_share_its_blobs_and_read_each_others(cassette: Path):
    """A blob one process stored is the other's too, by its number, whatever each packed:
    the second writer's keyframe may be the first's delta (two levels deep, still read)."""
    first, second = SqliteStore(cassette), SqliteStore(cassette)
    first.create_run(Run("r1"))
    second.create_run(Run("r2"))
    first.add_exchanges(chat(6, "r1"))
    # r2 starts with r1's question 3 and its answer, which r1 compressed against its own
    # keyframes: r2 takes them as its keyframes, and finds them stored
    second.add_exchanges(chat(5, "r2", first=3))
    assert first.exchanges("r2") == chat(5, "r2", 3) and second.exchanges("r1") == chat(6, "r1")
    hashes = [h for (h,) in second.query("SELECT hash FROM contents")]
    assert len(hashes) == len(set(hashes))  # each stored once
    deep = second.query(
        "SELECT count(*) FROM contents c JOIN json_each(c.base) b "
        "JOIN contents k ON k.id = b.value WHERE k.codec = 'zstd-dict'"
    )  # fmt: skip
    assert deep[0][0] > 0  # some were compressed against a blob that is a delta itself
    first.close(), second.close()


def test_pieces_are_blobs_of_their_own_by_number(cassette: Path):
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    parts = [bytes([n]) * 100_000 for n in range(3)]
    pieces = [Blob(hashlib.sha256(p).hexdigest(), p) for p in parts]
    store.add_pieces(pieces)
    store.add_pieces(pieces[:1])  # twice is harmless
    assert store.query("SELECT count(*), min(codec), max(base) FROM contents") == [(3, "zstd", None)]
    for blob in pieces:
        assert store.piece(Piece(blob.digest, len(blob.data), 0.0)) == blob.data
    with pytest.raises(CassetteError, match="lacks the piece"):
        store.piece(Piece("ab" * 32, 3, 0.0))
    store.close()


def test_response_keys_name_blobs_by_hash_as_a_journal_does(cassette: Path):
    """`diff` compares a stored step's key with a journaled one's (`unmerged._key`): both
    name the same bytes by the same hashes, whatever number the cassette gave them."""
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    recorded = chat(3)
    store.add_exchanges(recorded)
    assert store.response_keys("r1") == {e.step: _key(e) for e in recorded}
    store.close()


def test_fingerprints_and_tool_calls_read_back_as_recorded(store: SqliteStore):
    store.create_run(Run("r1"))
    hexed = hashlib.sha256(b"x").hexdigest()
    odd = [hexed.upper(), "fp0", hexed[:63], "é" * 64]
    store.add_exchanges([exchange(0, fingerprint=hexed)] +
                        [exchange(i + 1, fingerprint=fp) for i, fp in enumerate(odd)])  # fmt: skip
    assert [e.fingerprint for e in store.exchanges("r1")] == [hexed, *odd]
    kept = store.query("SELECT typeof(fingerprint), tool_calls FROM exchanges ORDER BY step")
    assert kept == [("blob", None)] + [("text", None)] * 4


def test_keyframes_hold_a_bounded_window():
    frames = deltas.Keyframes()
    for n in range(40):
        frames.add(f"{n:064x}", bytes([n]) * 4096)
    assert len(frames.bases) == deltas.WINDOW // 4096
    assert frames.bases[-1] == f"{39:064x}"
    packed = frames.compress(bytes([39]) * 4096)
    assert len(packed) < 40


def test_a_header_reference_kept_compressed_reads_back_or_is_named_damaged(cassette: Path):
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    recorded = chat(4)
    store.add_exchanges(recorded)
    kept = store.query("SELECT typeof(response_headers) FROM exchanges ORDER BY step")
    assert [t for (t,) in kept] == ["text", "blob", "blob", "blob"]  # its list, then what changed
    assert [e.response_headers for e in store.exchanges("r1")] == [
        e.response_headers for e in recorded]  # fmt: skip
    with closing(sqlite3.connect(cassette)) as conn, conn:
        conn.execute("UPDATE exchanges SET response_headers=substr(response_headers, 1, 9) "
                     "WHERE step=2")  # fmt: skip
    damaged: list[CassetteError] = []
    assert [e.step for e in store.exchanges("r1", bodies=False, damaged=damaged)] == [0, 1, 3]
    assert [str(e).split(":")[0] for e in damaged] == ["run r1 step 2 is damaged"]
    store.close()


def test_header_references_of_more_runs_than_keep_a_compressor_read_back(cassette: Path):
    """The packer keeps a compressor against a run's header list for the runs it compressed
    against last (`headers.WARM`); a run whose compressor was freed makes it again, and every
    reference reads back as recorded, written in one batch or in several."""
    store = SqliteStore(cassette)
    runs = [f"r{n}" for n in range(headers.WARM + 5)]
    chats = {run: chat(4, run, first=n * 10) for n, run in enumerate(runs)}
    for run in runs:
        store.create_run(Run(run))
    for step in range(2):  # the first two steps of every run, interleaved, in one batch
        store.add_exchanges([chats[run][step] for run in runs])
    for step in range(2, 4):  # then a transaction per exchange, the runs in turn
        for run in runs:
            store.add_exchanges([chats[run][step]])
    kinds = store.query("SELECT typeof(response_headers), count(*) FROM exchanges GROUP BY 1")
    assert dict(kinds) == {"text": len(runs), "blob": 3 * len(runs)}
    for run in runs:
        assert [e.response_headers for e in store.exchanges(run)] == [
            e.response_headers for e in chats[run]]  # fmt: skip
    store.close()
