"""The records as the journal pickles them: by their constructor and their fields' values in
order, so a field is only ever added at the end, and a pickle from before it was added reads
with its default."""

from __future__ import annotations

import pickle
import time
from dataclasses import fields

import pytest

from forkpoint.models import (
    Blob,
    Chunk,
    Exchange,
    Kind,
    Piece,
    Run,
    Snapshot,
    Summary,
    ToolCall,
    Usage,
    new_run_id,
)  # fmt: skip

# Each journaled record's fields, in order, as journals already written hold them: append new
# fields at the end (with a default), never insert, rename or reorder.
ORDER = {
    Exchange: ["run_id", "step", "method", "route", "request_headers", "request_body",
               "fingerprint", "status", "response_headers", "response_body", "chunks",
               "complete", "error", "origin", "upstream", "started_at", "ttfb_ms",
               "duration_ms", "summary", "model_sent", "note", "pieces",
               "request_pieces", "asked_body"],
    Snapshot: ["run_id", "step", "adapter", "content_type", "data", "error", "taken_at",
               "duration_ms", "size"],
    Run: ["id", "name", "labels", "status", "mode", "parent_id", "fork_step", "change",
          "created_at", "ended_at", "error", "owner"],
    Summary: ["kind", "dialect", "model", "usage", "tool_calls", "finish_reason", "text"],
    Usage: ["input", "output", "cached", "reasoning", "cache_write", "audio", "audio_seconds"],
    ToolCall: ["name", "arguments", "id"],
    Chunk: ["offset_ms", "data"],
    Piece: ["digest", "size", "offset_ms"],
    Blob: ["digest", "data"],
}  # fmt: skip


@pytest.mark.parametrize("record", list(ORDER), ids=lambda cls: cls.__name__)
def test_a_journaled_record_only_ever_gains_fields_at_its_end(record):
    names = [spec.name for spec in fields(record)]
    assert names[: len(ORDER[record])] == ORDER[record], "append new fields at the end"


def test_a_record_reads_back_equal_and_an_older_pickle_gets_the_new_fields_defaults():
    summary = Summary(Kind.LLM, "openai", "gpt-4o", Usage(3, 4), (ToolCall("f", "{}", "c1"),))
    exchange = Exchange(
        "r", 2, "POST", "/v1/chat/completions", (("a", "b"),), b"{}", "fp", status=200,
        chunks=[Chunk(1.5, b"data: x\n\n")], summary=summary,
        pieces=(Piece("ab" * 32, 10, 2.0),), request_pieces=(Piece("cd" * 32, 20, 1.0),),
        asked_body=b'{"model": "m"}',
    )  # fmt: skip
    assert pickle.loads(pickle.dumps(exchange, pickle.HIGHEST_PROTOCOL)) == exchange
    run, snapshot = Run("r", labels={"k": "v"}), Snapshot("r", 1, "state", data=b"xyz")
    assert pickle.loads(pickle.dumps(run)) == run
    assert pickle.loads(pickle.dumps(snapshot)) == snapshot
    cls, values = exchange.__reduce_ex__(pickle.HIGHEST_PROTOCOL)

    class Older:  # the exchange as a forkpoint from before `pieces` pickled it
        def __reduce__(self) -> tuple[object, ...]:
            return cls, values[:-3]

    read = pickle.loads(pickle.dumps(Older()))
    assert isinstance(read, Exchange) and read.pieces == () and read.summary == summary
    assert read.request_pieces == () and read.asked_body is None


def test_a_run_id_is_a_ulid_that_sorts_by_creation_time():
    """26 Crockford base32 characters: 48 bits of milliseconds since the epoch, then 80 random
    bits. Ids from the same millisecond differ; ids from later ones sort after."""
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    before = time.time_ns() // 1_000_000
    made = [new_run_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert all(len(run_id) == 26 and set(run_id) <= set(alphabet) for run_id in made)
    assert len(set(made)) == len(made)
    for run_id in made:
        value = 0
        for character in run_id:
            value = value * 32 + alphabet.index(character)
        assert value < 2**128 and before <= value >> 80 <= after
    time.sleep(0.002)
    assert all(run_id < new_run_id() for run_id in made)
    randomness = {run_id[10:] for run_id in made}  # the random part: no two alike
    assert len(randomness) == len(made)
