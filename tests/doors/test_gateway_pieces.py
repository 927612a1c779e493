"""A replay of a body in pieces through the real gateway: each piece read from the store as
it is served, byte-exact, and a piece the store lacks cuts the answer there, said in the log,
rather than serving something else."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.models import Blob, Piece, Run
from forkpoint.runtime.proxy import ProxyThread
from tests import builders

REST = bytes(range(256)) * 64


def recorded(store: MemoryStore, step: int, route: str, pieces: tuple[Piece, ...]) -> None:
    size = 4 + sum(piece.size for piece in pieces)
    store.add_exchanges([builders.exchange(
        run_id="r1", step=step, method="GET", route=route, request_headers=(), request_body=b"",
        response_headers=(("content-type", "application/octet-stream"),
                          ("content-length", str(size))),
        response_body=b"held", pieces=pieces,
    )])  # fmt: skip


def test_a_replay_reads_each_piece_as_it_serves_it_and_cuts_at_a_missing_one(caplog):
    store = MemoryStore()
    store.create_run(Run("r1"))
    blob = Blob(hashlib.sha256(REST).hexdigest(), REST)
    store.add_pieces([blob])
    good = Piece(blob.digest, len(REST), 1.0)
    recorded(store, 0, "/v1/files/whole", (good, good))
    recorded(store, 1, "/v1/files/broken", (good, Piece("0" * 64, 10, 2.0)))
    thread = ProxyThread(store, EngineConfig(routes=Routes()))
    thread.replay("r1")
    with thread as proxy, httpx.Client(base_url=proxy.url, timeout=10) as client:
        assert client.get("/v1/files/whole").content == b"held" + REST + REST
        got = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            with client.stream("GET", "/v1/files/broken") as answer:
                for data in answer.iter_raw():
                    got += data
        assert bytes(got) == b"held" + REST  # what the store has, then the cut
    assert f"lacks the piece {'0' * 64}" in caplog.text
