"""What the reading commands make of a body in pieces: `show` says so (it never loads them),
`export` writes it whole."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Blob, Piece, Run
from tests import builders
from tests.runner import forkpoint


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    path = tmp_path / "pieces.db"
    store = SqliteStore(path)
    rest = b"r" * 3000
    blob = Blob(hashlib.sha256(rest).hexdigest(), rest)
    store.create_run(Run("01PIECES", name="big"))
    store.add_pieces([blob])
    store.add_exchanges([
        builders.exchange(run_id="01PIECES", step=0, route="/files/dump", response_body=b"held",
                          pieces=(Piece(blob.digest, len(rest), 2.0),)),
    ])  # fmt: skip
    store.close()
    return path


def test_show_marks_a_body_in_pieces(cassette: Path):
    shown = forkpoint("show", "big", cassette=cassette)
    assert shown.returncode == 0, shown.stderr
    assert "[3000 bytes in pieces]" in shown.stdout
    document = json.loads(forkpoint("show", "big", "--json", cassette=cassette).stdout)
    (step,) = document["exchanges"]
    assert (step["pieces"], step["bytes_in_pieces"]) == (1, 3000)


def test_export_writes_a_body_in_pieces_whole(cassette: Path):
    exported = forkpoint("export", "big", "--format", "jsonl", cassette=cassette)
    assert exported.returncode == 0, exported.stderr
    (line,) = [json.loads(line) for line in exported.stdout.splitlines()[1:]]
    assert line["exchange"]["response_body"] == {"text": "held" + "r" * 3000}
