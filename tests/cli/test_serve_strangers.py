"""`forkpoint serve` closed to strangers: a replaying proxy stays offline for every run, and
one bound beyond loopback answers only requests that carry its token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openai
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.cli.test_serve import ask, start_serve, stop
from tests.doors.test_control import StateServer, register


def start(
    cassette: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`serve` with ARGS, its stderr kept; its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--cassette", str(cassette),
         *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("forkpoint serving on "):
        raise AssertionError(line + process.communicate()[1])
    return process, line.split()[3]


def steps(cassette: Path) -> dict[str, int]:
    store = SqliteStore(cassette)
    try:
        return {run.id: store.step_count(run.id) for run in store.list_runs()}
    finally:
        store.close()


def test_a_replaying_serve_is_offline_for_every_run(upstream, tmp_path):
    cassette = tmp_path / "serve.db"
    process, url = start_serve(cassette, upstream.url)
    try:
        assert ask(url, "one", run="ticket-1") == "[gpt-4o] one"
        assert ask(url, "two", run="ticket-2") == "[gpt-4o] two"
    finally:
        stop(process)
    recorded, live_calls = steps(cassette), upstream.request_count

    # the upstream is still up: a request that went live would be answered
    process, url = start(cassette, "--replay", "ticket-1", "--upstream", upstream.url)
    try:
        for other in ("ticket-2", "never-recorded"):
            with pytest.raises(openai.BadRequestError, match="replays run ticket-1") as refused:
                ask(url, "two", run=other)
            assert other in str(refused.value)
        assert ask(url, "one", run="ticket-1") == "[gpt-4o] one"  # the replayed run, by name
    finally:
        stop(process)
        process.stderr.close()  # type: ignore[union-attr]
    assert upstream.request_count == live_calls  # nothing went live
    after = steps(cassette)
    assert {run: after[run] for run in recorded} == recorded  # nothing appended
    assert "never-recorded" not in after  # nor made


def test_serve_fetches_adapters_on_loopback_unless_adapter_host_allows_more(upstream, tmp_path):
    server = StateServer("0.0.0.0")
    beyond = f"http://0.0.0.0:{server.port}/state"
    try:
        for args, expected in (((), 403), (("--adapter-host", "0.0.0.0"), 200)):
            process, url = start(tmp_path / "c.db", "--upstream", upstream.url, *args)
            try:
                status, answer = register(url, beyond, run="t")
                assert status == expected, answer
                assert register(url, f"http://127.0.0.1:{server.port}/state", run="u")[0] == 200
            finally:
                stop(process)
                process.stderr.close()  # type: ignore[union-attr]
    finally:
        server.stop()
