"""What the park tests share: an upstream whose approval tool answers as the person will, the
approval agent, and reading a run's park back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from forkpoint.errors import RunNotFound
from forkpoint.models import RunStatus
from forkpoint.testing.upstream import ScriptedUpstream
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import Ran, command_env
from tests.runner import forkpoint as run_forkpoint

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, str(ROOT / "tests/park/approval_agent.py")]
APPROVAL = b'{"approved": true, "by": "alice"}'
# The test's own API key: no artifact may hold it (a stored launch names it, never keeps it).
API_KEY = "sk-test-" + os.urandom(16).hex()
PARK = ("--park", "POST /approvals*")


class ApprovalsUpstream(ScriptedUpstream):
    """The scripted model API, plus the approval tool answering as the person will (so a run
    that never parks gets the same answer), and a slow tool (`/slow/...`) that takes
    `slow_for` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[str, float]] = []  # (path, time.time()) as each came
        self.app.middlewares.append(self._stamp)
        self.slow_for = 3.0
        self.app.router.add_post("/approvals/refund", self._approve)
        self.app.router.add_post("/slow/{tail:.*}", self._slow)

    @web.middleware
    async def _stamp(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        self.arrivals.append((request.path, time.time()))
        return await handler(request)

    async def _approve(self, request: web.Request) -> web.Response:
        return web.Response(body=APPROVAL, content_type="application/json")

    async def _slow(self, request: web.Request) -> web.Response:
        import asyncio

        await asyncio.sleep(self.slow_for)
        return web.Response(body=b'{"slow": "done"}', content_type="application/json")

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]


@pytest.fixture
def approvals(start_upstream) -> Iterator:  # type: ignore[no-untyped-def]
    yield start_upstream(ApprovalsUpstream())


def forkpoint(cassette: Path, *args: str, env: dict[str, str] | None = None,
              clean: bool = False) -> Ran:  # fmt: skip
    return run_forkpoint(*args, cassette=cassette, env={"OPENAI_API_KEY": API_KEY, **(env or {})},
                         clean=clean)  # fmt: skip


def agent_pid(ran: Ran) -> int:
    return int(next(line for line in ran.stderr.splitlines() if line.startswith("pid="))[4:])


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def final_line(ran: Ran) -> str:
    return next(line for line in ran.stdout.splitlines() if line.startswith("final: "))


def start_serve(
    store: str | Path, upstream_url: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`serve` on `store`, with ARGS, once it listens; its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream_url,
         "--store", str(store), *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        env=command_env(None, {"OPENAI_API_KEY": API_KEY, **(env or {})}, clean=True),
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("forkpoint serving on "), line
    return process, line.split()[3]


def kill(process: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig) if sig == signal.SIGKILL else process.send_signal(sig)
    process.wait(30)
    if process.stdout is not None:
        process.stdout.close()


def start_agent(
    url: str, run_id: str, env: dict[str, str] | None = None, *, token: str | None = None
) -> subprocess.Popen[str]:
    """The approval agent pointed at `serve` for run `run_id`, in a process group of its own,
    and its launch told to serve (how it started, its pid), as a platform would."""
    agent_env = command_env(None, {
        "OPENAI_BASE_URL": f"{url}/r/{run_id}/v1", "FORKPOINT_URL": url,
        "FORKPOINT_RUN": run_id, "OPENAI_API_KEY": API_KEY, **(env or {}),
    }, clean=True)  # fmt: skip
    agent = subprocess.Popen(
        AGENT, env=agent_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        start_new_session=True, cwd=ROOT,
    )  # fmt: skip
    launch = {"command": AGENT, "cwd": str(ROOT), "env": agent_env, "pid": agent.pid}
    headers = {"X-Forkpoint-Token": token} if token else {}
    answer = httpx.post(f"{url}/_forkpoint/runs/{run_id}/launch", json=launch, headers=headers)
    assert answer.status_code == 200, answer.text
    return agent


def wait_for(check, timeout: float = 60.0, every: float = 0.05):  # type: ignore[no-untyped-def]
    """`check()`'s first truthy value, polled until `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {check}")


def read_store(location: str | Path):  # type: ignore[no-untyped-def]
    from forkpoint.cassettes.open import open_store

    return open_store(str(location))


def park_of(location: str | Path, run_id: str):  # type: ignore[no-untyped-def]
    """The run's pending park, None when it has none (or the run is not in the store yet)."""
    store = read_store(location)
    try:
        return store.parked(run_id)
    except RunNotFound:
        return None
    finally:
        store.close()


def status_of(location: str | Path, run_id: str) -> RunStatus | None:
    store = read_store(location)
    try:
        return store.get_run(run_id).status
    except RunNotFound:
        return None
    finally:
        store.close()


def exchanges_of(location: str | Path, run_id: str):  # type: ignore[no-untyped-def]
    store = read_store(location)
    try:
        return store.exchanges(run_id)
    finally:
        store.close()
