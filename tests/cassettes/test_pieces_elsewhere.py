"""A body in pieces outside the proxy: copied between stores piece by piece, compared by its
pieces too, written whole to a file up to a limit and refused past it, never truncated."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.transfer import copy_runs, dump_run, joined
from forkpoint.compare.diff import diff_runs
from forkpoint.errors import CassetteError
from forkpoint.models import Blob, Chunk, Piece, Run
from tests import builders


def pieced(run_id: str, rest: bytes, step: int = 0) -> tuple[Blob, object]:
    blob = Blob(hashlib.sha256(rest).hexdigest(), rest)
    exchange = builders.exchange(
        run_id=run_id, step=step, route="/tools/file", response_body=b"held",
        pieces=(Piece(blob.digest, len(rest), 3.0),), fingerprint="fp",
    )  # fmt: skip
    return blob, exchange


def test_copying_a_run_copies_its_pieces(tmp_path: Path):
    source, target = MemoryStore(), SqliteStore(tmp_path / "copy.db")
    source.create_run(Run("r1"))
    blob, exchange = pieced("r1", b"the rest " * 1000)
    source.add_pieces([blob])
    source.add_exchanges([exchange])  # type: ignore[list-item]
    try:
        assert list(copy_runs(source, target)) == [(source.get_run("r1"), 1)]
        (copied,) = target.exchanges("r1")
        assert b"".join(target.piece(p) for p in copied.pieces) == blob.data
    finally:
        target.close()


def test_two_answers_alike_but_for_their_pieces_differ():
    _, a = pieced("a", b"one rest")
    _, b = pieced("b", b"another rest")
    diff = diff_runs(Run("a"), [a], Run("b"), [b])  # type: ignore[list-item]
    assert diff.steps[0].differences == ("response",)


@pytest.mark.parametrize("module", [text, jsonl, har], ids=["vcr", "jsonl", "har"])
def test_a_file_format_refuses_a_body_in_pieces_naming_the_step(module):
    _, exchange = pieced("r1", b"x" * 100, step=4)
    with pytest.raises(CassetteError, match=r"run r1 step 4 .*104 bytes.*pieces") as refused:
        module.dumps(Run("r1"), [exchange])
    assert "forkpoint copy" in str(refused.value)


def test_a_file_gets_a_body_in_pieces_whole_up_to_the_limit():
    store = MemoryStore()
    store.create_run(Run("r1"))
    blob, exchange = pieced("r1", b"the rest")
    stream = builders.exchange(
        run_id="r1", step=1, route="/tools/file", response_body=b"data: 1\n\n",
        chunks=[Chunk(1.0, b"data: 1\n\n")], pieces=exchange.pieces, fingerprint="fp",  # type: ignore[attr-defined]
    )  # fmt: skip
    store.add_pieces([blob])
    store.add_exchanges([exchange, stream])  # type: ignore[list-item]
    _, loaded = jsonl.loads(dump_run(store, "r1", fmt="jsonl"), source="r1.jsonl", routes={})
    assert [e.response_body for e in loaded] == [b"heldthe rest", b"data: 1\n\nthe rest"]
    assert loaded[1].chunks == [Chunk(1.0, b"data: 1\n\n"), Chunk(3.0, b"the rest")]
    (kept,) = joined(store, store.exchanges("r1")[:1], limit=8)  # 12 bytes: over it
    assert kept.pieces == exchange.pieces  # type: ignore[attr-defined]
