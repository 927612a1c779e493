"""An upload in pieces outside the proxy: copied between stores piece by piece, written whole
to a file up to a limit (where its fingerprint reads the same off the body whole, so the
file's replay matches it) and refused past it, naming the step (issue 25.16)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.transfer import copy_runs, dump_run, joined
from forkpoint.engine import matching
from forkpoint.engine.pieces import REQUEST_HOLD
from forkpoint.engine.redaction import DEFAULT
from forkpoint.engine.uploads import Upload
from forkpoint.errors import CassetteError
from forkpoint.models import Exchange, Run
from tests import builders

MIB = 2**20
FILE = (("content-type", "application/octet-stream"),)


def uploaded(store: MemoryStore | SqliteStore, run_id: str, body: bytes, step: int = 0) -> Exchange:
    """`body` recorded as the gateway records an upload: held part, pieces stored first."""
    upload = Upload("POST", "/v1/files", FILE, DEFAULT)
    store.add_pieces(upload.add(body, 1.0) + upload.close())
    exchange = builders.exchange(
        run_id=run_id, step=step, route="/v1/files", request_headers=FILE,
        request_body=upload.held, request_pieces=upload.pieces, fingerprint=upload.fingerprint,
    )  # fmt: skip
    store.add_exchanges([exchange])
    return exchange


def test_copying_a_run_copies_its_uploads_pieces(tmp_path: Path):
    source, target = MemoryStore(), SqliteStore(tmp_path / "copy.db")
    source.create_run(Run("r1"))
    body = random.Random(1).randbytes(REQUEST_HOLD + 3 * MIB)
    uploaded(source, "r1", body)
    try:
        assert list(copy_runs(source, target)) == [(source.get_run("r1"), 1)]
        (copied,) = target.exchanges("r1")
        rest = b"".join(target.piece(p) for p in copied.request_pieces)
        assert copied.request_body + rest == body
    finally:
        target.close()


def test_a_file_gets_an_upload_whole_and_its_replay_still_matches_it():
    store = MemoryStore()
    store.create_run(Run("r1"))
    body = random.Random(2).randbytes(REQUEST_HOLD + MIB)
    recorded = uploaded(store, "r1", body)
    _, (loaded,) = jsonl.loads(dump_run(store, "r1", fmt="jsonl"), source="r1.jsonl", routes={})
    assert loaded.request_body == body and loaded.request_pieces == ()
    # read off the whole body as the gateway read it as it passed
    assert matching.fingerprint_exchange(loaded, matching.MatchConfig()) == recorded.fingerprint
    (kept,) = joined(store, store.exchanges("r1"), limit=REQUEST_HOLD)  # over it: in pieces
    assert kept.request_pieces == recorded.request_pieces


@pytest.mark.parametrize("module", [text, jsonl, har], ids=["vcr", "jsonl", "har"])
def test_a_file_format_refuses_an_upload_in_pieces_naming_the_step(module):
    store = MemoryStore()
    store.create_run(Run("r1"))
    exchange = uploaded(store, "r1", b"x" * (REQUEST_HOLD + 10), step=3)
    with pytest.raises(CassetteError, match=r"run r1 step 3 has a request body of 4194314"):
        module.dumps(Run("r1"), [exchange])
