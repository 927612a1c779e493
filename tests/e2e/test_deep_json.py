"""A request whose JSON nests deeper than the JSON writer can write back (orjson reads 1,024
levels, writes 254) is recorded as its bytes, replayed, exported and imported: the writer
never dies of it and the next exchange is recorded too (issue 14.2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.cli.test_serve import start_serve, stop

DEPTHS = (300, 1000)


def deep_body(depth: int) -> bytes:
    nested = b"[" * depth + b"]" * depth
    return (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "deep"}], '
            b'"metadata": {"x": ' + nested + b"}}")  # fmt: skip


def post(url: str, body: bytes, run: str | None = None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if run is not None:
        headers["x-forkpoint-run"] = run
    return httpx.post(f"{url}/v1/chat/completions", content=body, headers=headers, timeout=30)


def forkpoint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkpoint", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_json_is_recorded_replayed_exported_and_imported(upstream, tmp_path: Path, depth):
    cassette = tmp_path / "deep.db"
    body = deep_body(depth)
    plain = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "after"}]}'
    process, url = start_serve(cassette, upstream.url)
    try:
        recorded = post(url, body, "deep")
        assert recorded.status_code == 200, recorded.text
        assert post(url, plain, "deep").status_code == 200
        assert post(url, plain, "other").status_code == 200
    finally:
        assert stop(process) == 0  # Ctrl-C still stops it
    store = SqliteStore(cassette)
    try:
        exchanges = store.exchanges("deep")
        assert [e.request_body for e in exchanges] == [body, plain]
        assert [e.step for e in store.exchanges("other")] == [0]
    finally:
        store.close()

    replaying, replay_url = start_serve(cassette, None, "--replay", "deep")
    try:
        replayed = post(replay_url, body)  # the replayed run
        assert replayed.status_code == 200, replayed.text
        assert replayed.content == recorded.content
        # one the recording lacks gets the divergence report, not forkpoint's own 500
        diverged = post(replay_url, b"[" * 255 + b"]" * 255)  # as the fuzzer sent
        assert diverged.status_code != 500 and "diverge" in diverged.text, diverged.text
    finally:
        assert stop(replaying) == 0

    exported = tmp_path / "deep.jsonl"
    result = forkpoint("export", "deep", "--cassette", str(cassette), "--format", "jsonl",
                       "-o", str(exported))  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported = tmp_path / "imported.db"
    result = forkpoint("import", str(exported), "--cassette", str(imported))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    store = SqliteStore(imported)
    try:
        (run,) = store.list_runs()
        assert store.exchanges(run.id)[0].request_body == body
    finally:
        store.close()
