"""`forkpoint serve` closed to strangers: a replaying proxy stays offline for every run, and
one bound beyond loopback answers only requests that carry its token."""

from __future__ import annotations

import asyncio
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import openai
import pytest

from forkpoint.api import Options, Serving, aserve
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import OnDivergence
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


def lines_of(stream: IO[str] | None) -> tuple[queue.Queue[str], threading.Thread]:
    """The stream's lines as they come, read (then closed) on a thread: a test waits for one
    with a timeout instead of blocking on a line that never comes."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert stream is not None
        with stream:
            for line in stream:
                lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


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


def test_serve_beyond_loopback_warns_and_answers_only_requests_with_its_token(upstream, tmp_path):
    cassette = tmp_path / "c.db"
    process, url = start(cassette, "--host", "0.0.0.0", "--upstream", upstream.url)
    local = url.replace("0.0.0.0", "127.0.0.1")
    try:
        said, reader = lines_of(process.stderr)
        warning, token_line = said.get(timeout=10), said.get(timeout=10)
        assert "beyond loopback" in warning, warning
        token = token_line.split("/t/")[1].split("/")[0]
        with pytest.raises(openai.AuthenticationError, match="token"):
            ask(local, "who are you", run="stranger")
        status, _ = register(local, "http://127.0.0.1:1/state", run="stranger")
        assert status == 401
        assert upstream.request_count == 0
        assert ask(f"{local}/t/{token}", "hello", run="mine") == "[gpt-4o] hello"
    finally:
        stop(process)
        reader.join(10)
    assert steps(cassette) == {"mine": 1}
    assert token not in str(upstream.requests)


def test_serve_takes_its_token_from_the_environment(upstream, tmp_path):
    env = {**os.environ, "FORKPOINT_TOKEN": "correct-horse"}
    process, url = start(tmp_path / "c.db", "--upstream", upstream.url, env=env)
    try:
        with pytest.raises(openai.AuthenticationError):
            ask(url, "no token")
        with pytest.raises(openai.AuthenticationError):
            ask(f"{url}/t/correct-horsf", "a wrong one")
        assert ask(f"{url}/t/correct-horse", "right") == "[gpt-4o] right"
    finally:
        stop(process)
        err = process.stderr.read()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert "correct-horse" not in err


def test_a_replay_that_may_go_live_still_serves_no_other_run(upstream, tmp_path):
    """`on_divergence=live` lets the replay itself go live; a request naming another run did
    too, recorded into that run."""
    cassette = tmp_path / "c.db"
    process, url = start_serve(cassette, upstream.url)
    try:
        ask(url, "one", run="ticket-1")
        ask(url, "two", run="ticket-2")
    finally:
        stop(process)
    recorded, live_calls = steps(cassette), upstream.request_count
    options = Options(
        cassette=cassette, port=0, upstream=upstream.url, on_divergence=OnDivergence.LIVE
    )

    async def main() -> None:
        ready: asyncio.Future[Serving] = asyncio.get_running_loop().create_future()
        stopping = asyncio.Event()
        serving = asyncio.create_task(
            aserve(options, replay="ticket-1", ready=ready.set_result, stop=stopping)
        )
        base = (await ready).url
        try:
            async with openai.AsyncOpenAI(
                base_url=f"{base}/r/ticket-2/v1", api_key="k", max_retries=0
            ) as client:
                with pytest.raises(openai.BadRequestError, match="replays run ticket-1"):
                    await client.chat.completions.create(
                        model="gpt-4o", messages=[{"role": "user", "content": "two"}]
                    )
        finally:
            stopping.set()
            await serving

    asyncio.run(main())
    assert upstream.request_count == live_calls
    after = steps(cassette)
    assert {run: after[run] for run in recorded} == recorded


def test_serve_shows_a_given_token_nowhere(upstream, tmp_path):
    env = {**os.environ, "FORKPOINT_TOKEN": "given-t0ken", "XDG_CONFIG_HOME": str(tmp_path)}
    process, _ = start(tmp_path / "c.db", "--upstream", upstream.url, "--intercept",
                         "--intercept-port", "0", env=env)  # fmt: skip
    try:
        assert process.stdout is not None
        intercepting = process.stdout.readline()
        assert "HTTPS_PROXY=http://RUN:TOKEN@" in intercepting, intercepting
    finally:
        stop(process)
        err = process.stderr.read()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert "given-t0ken" not in intercepting + err
