"""What park_wake.py and park_fleet.py share: a clocked upstream with an approval tool and a
tool that never answers, a `forkpoint serve` started and stopped, its runs read back, resident
memory from /proc, and how busy other work kept the machine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from _procs import _process_tree
from aiohttp import web

from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream

ROOT = Path(__file__).resolve().parents[1]
POSTGRES = os.environ.get(
    "FORKPOINT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


class Upstream(ScriptedUpstream):
    """The model API, noting when each model request reached it (`arrivals`); the approval
    tool itself (`POST /approvals/...`: what an agent asks with no forkpoint to park it); and a
    slow tool (`POST /stall/...`) that answers only when the upstream closes."""

    def __init__(self) -> None:
        super().__init__(self._script)
        self.arrivals: list[float] = []
        self.app.router.add_post("/approvals/{tail:.*}", self._approve)
        self.app.router.add_post("/stall/{tail:.*}", self._stall)
        self.thread = LoopThread("bench-upstream")
        self._released: asyncio.Event | None = None
        self.url = self.thread.call(self._start())

    async def _start(self) -> str:
        self._released = asyncio.Event()  # made on the loop that waits on it
        return await self.start()

    def _script(self, prompt: Prompt) -> Reply:
        self.arrivals.append(time.time())
        return Reply(text=f"answer to {prompt.last_user_text}")

    async def _approve(self, request: web.Request) -> web.Response:
        return web.json_response({"approved": True, "by": "the tool itself"})

    async def _stall(self, request: web.Request) -> web.Response:
        assert self._released is not None
        await self._released.wait()
        return web.json_response({"stalled": "until the upstream closed"})

    async def _release(self) -> None:
        assert self._released is not None
        self._released.set()
        await asyncio.sleep(0.05)  # the stalled handlers answer before the server goes

    def first_arrival(self, timeout: float = 120.0) -> float:
        deadline = time.monotonic() + timeout
        while not self.arrivals:
            if time.monotonic() > deadline:
                raise SystemExit(f"no request reached the upstream within {timeout:.0f} s")
            time.sleep(0.001)
        return self.arrivals[0]

    def stop(self) -> None:
        self.thread.call(self._release())
        self.thread.call(self.close())
        self.thread.close()


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the variables that would point a command elsewhere."""
    own = ("OPENAI_", "FORKPOINT_", "ANTHROPIC_")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    return {**kept, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "k", **(extra or {})}


def start_serve(
    store: str, upstream: str, *args: str, log: Path
) -> tuple[subprocess.Popen[str], str]:
    """`forkpoint serve` on `store` with ARGS, once it listens (its stderr in `log`); its URL."""
    with log.open("ab") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream", upstream,
             "--store", store, *args],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, env=env(),
            start_new_session=True,
        )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("forkpoint serving on "):
        raise SystemExit(f"serve did not start ({line!r}):\n{log.read_text()[-3000:]}")
    return process, line.split()[3]


def stop(process: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)
    if process.stdout is not None:
        process.stdout.close()


@contextlib.contextmanager
def store_at(kind: str, work: Path, name: str) -> Iterator[str]:
    """Where a store of `kind` lives: an SQLite file, or a PostgreSQL schema dropped after."""
    if kind == "sqlite":
        yield str(work / f"{name}.db")
        return
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{POSTGRES}?options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def reading(location: str, read: Callable[[Any], Any]) -> Any:
    """`read(store)` on the store opened for this read alone."""
    from forkpoint.cassettes.open import open_store

    store = open_store(location)
    try:
        return read(store)
    finally:
        store.close()


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


def rss_kib(pid: int, *, tree: bool = True) -> int:
    """Resident memory of `pid` and (`tree`) its descendants (serve and its writer), KiB."""
    total = 0
    for each in _process_tree(pid) if tree else [pid]:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def load_line(others: float) -> str:
    """What other work did to the figures: the machine is usually shared."""
    return (f"other work kept {others:.2f} CPUs busy meanwhile (the machine has "
            f"{os.cpu_count() or 1}): figures are slower than on a quiet machine")  # fmt: skip
