"""The stack harness: a real agent recorded through forkpoint, replayed offline, forked live.

An agent is a function from the environment forkpoint gives a command (`agent_env`: the
base-URL variables, a key) to what the agent saw: its final output and every response, as
JSON. Heavy stacks run as a subprocess with that environment, exactly as under
`forkpoint record -- CMD`; the SDK tests run in-process and take their base URL from it.

The checks, per stack:
- record: against the scripted upstream (fresh ids and timestamps on every call, gzip on, as
  the real APIs), every exchange complete and read as an LLM call;
- replay: a new proxy with no upstream at all, the recording's upstream stopped; the agent
  must see exactly what it saw when recorded, every exchange served from the cassette, the
  upstream's request counter unchanged;
- fork: the first steps replayed, the rest live to a fresh upstream with the change applied;
- resume: a crashed run's steps served from the cassette, the rest live, in the same run.

Subprocess agents also get `HTTP(S)_PROXY` pointing at a `Sentinel` (with 127.0.0.1 exempt):
a call that bypasses the base URL (telemetry, a price list, a tokenizer download) lands
there and fails the test.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forkpoint.api.env import agent_env
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.changes import Change
from forkpoint.models import Exchange, Mode, Origin, Run, RunStatus
from forkpoint.testing.upstream import Script, ScriptedUpstream

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "examples" / "stacks"
NODE_DIR = STACKS / "node"
RECORD_KEY = "sk-forkpoint-stack-test"

Agent = Callable[[dict[str, str]], Any]  # the command's environment -> what the agent saw

# Variables of the test's own environment that would steer an agent elsewhere.
_CLEARED = ("OPENAI_", "ANTHROPIC_", "LITELLM_", "LANGSMITH_", "LANGCHAIN_", "FORKPOINT_")
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def command(*argv: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Agent:
    """An agent run as a command, with `env` added to what forkpoint gives it (what a user
    would export for that stack); its stdout is one JSON document, what it saw."""

    def run(given: dict[str, str]) -> Any:
        done = subprocess.run(
            [os.fspath(arg) for arg in argv],
            env={**given, **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        if done.returncode != 0:
            hint = ""
            if "ModuleNotFoundError" in done.stderr:
                hint = "\n(the stacks are installed by: pip install -e '.[stacks]')"
            pytest.fail(
                f"{' '.join(map(str, argv))} exited with {done.returncode}:\n"
                f"{done.stderr[-6000:]}{hint}"
            )
        return json.loads(done.stdout)

    return run


def python_agent(name: str, env: Mapping[str, str] | None = None) -> Agent:
    return command(sys.executable, STACKS / name, env=env)


class Sentinel:
    """The outside world, as the agents see it: their HTTP(S)_PROXY. Every connection is
    counted (with its request line, e.g. `CONNECT api.openai.com:443`) and refused with 502."""

    def __init__(self) -> None:
        self._attempts: list[str] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self._lock = threading.Lock()  # held while a connection is taken and answered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="sentinel", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    @property
    def attempts(self) -> list[str]:
        """Every connection so far, including one still waiting to be accepted."""
        while True:
            with self._lock:
                if not self._pending():
                    return list(self._attempts)
            time.sleep(0.01)

    def _pending(self) -> bool:
        return bool(select.select([self._server], [], [], 0)[0])

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not select.select([self._server], [], [], 0.1)[0]:
                continue
            with self._lock, contextlib.suppress(OSError):
                conn, _ = self._server.accept()
                with conn:
                    conn.settimeout(2)
                    request = conn.recv(4096).partition(b"\r\n")[0].decode("latin-1")
                    self._attempts.append(request)
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


@dataclass
class Recorded:
    """A run and what the agent saw during it."""

    run: Run
    output: Any
    exchanges: list[Exchange]
    upstream: Any  # the RunningUpstream it went to (stopped by now)


class Stacks:
    """Record, replay and fork one agent on the test's cassette."""

    def __init__(self, store: SqliteStore, start_upstream: Any, start_proxy: Any) -> None:
        self.store = store
        self._start_upstream = start_upstream
        self._start_proxy = start_proxy
        self.sentinel = Sentinel()

    def env(self, url: str, run: Run) -> dict[str, str]:
        """What `forkpoint record/replay/fork -- CMD` gives the command, plus the sentinel."""
        base = {k: v for k, v in os.environ.items() if not k.upper().startswith(_CLEARED)}
        for name in _PROXY_VARS:
            base[name] = base[name.lower()] = self.sentinel.url  # curl reads only lowercase
        base["NO_PROXY"] = base["no_proxy"] = "127.0.0.1,localhost"
        if run.mode is not Mode.REPLAY:  # replay needs no key: forkpoint sets a placeholder
            base["OPENAI_API_KEY"] = base["ANTHROPIC_API_KEY"] = RECORD_KEY
        return agent_env(url, run.id, offline=run.mode is Mode.REPLAY, base=base)

    def _live(self, script: Script) -> tuple[Any, Any]:
        upstream = self._start_upstream(ScriptedUpstream(script, chunk_delay=0.001, compress=True))
        proxy = self._start_proxy(upstream.url, routes={"anthropic": upstream.url})
        return upstream, proxy

    def record(
        self,
        agent: Agent,
        script: Script,
        *,
        min_steps: int,
        ends: RunStatus = RunStatus.FINISHED,
        statuses: list[int] | None = None,
    ) -> Recorded:
        """Record a run whose responses have `statuses` (all 200 by default); `ends=CRASHED`
        closes it as `forkpoint record` does when the agent exits non-zero."""
        upstream, proxy = self._live(script)
        run = proxy.record(name="recorded").run
        output = agent(self.env(proxy.proxy.url, run))
        proxy.close(ends)
        upstream.stop()
        exchanges = self.store.exchanges(run.id)
        assert len(exchanges) == upstream.request_count >= min_steps
        assert [e.status for e in exchanges] == (statuses or [200] * len(exchanges))
        for exchange in exchanges:
            assert (exchange.origin, exchange.complete) == (Origin.LIVE, True)
            assert exchange.summary is not None and exchange.summary.kind == "llm", exchange.route
        assert self.store.get_run(run.id).status is ends
        self.assert_offline()
        return Recorded(self.store.get_run(run.id), output, exchanges, upstream)

    def replay(self, recorded: Recorded, agent: Agent) -> Any:
        """Replay with no upstream configured and the recording's upstream stopped; the agent
        must see exactly what it saw when recorded."""
        sent = recorded.upstream.request_count
        proxy = self._start_proxy(None)
        run = proxy.replay(recorded.run.id, name="replayed").run
        output = agent(self.env(proxy.proxy.url, run))
        proxy.close()
        exchanges = self.store.exchanges(run.id)
        assert [e.origin for e in exchanges] == [Origin.REPLAYED] * len(recorded.exchanges)
        assert self.store.get_run(run.id).status is RunStatus.FINISHED
        assert recorded.upstream.request_count == sent
        self.assert_offline()
        assert output == recorded.output
        return output

    def fork(
        self,
        recorded: Recorded,
        agent: Agent,
        script: Script,
        *,
        at: int,
        change: Change,
    ) -> Recorded:
        """Steps < `at` from the cassette, the rest live to a fresh upstream with `change`."""
        upstream, proxy = self._live(script)
        run = proxy.fork(recorded.run.id, at=at, change=change).run
        output = agent(self.env(proxy.proxy.url, run))
        proxy.close()
        upstream.stop()
        exchanges = self.store.exchanges(run.id)
        origins = [e.origin for e in exchanges]
        assert origins == [Origin.REPLAYED] * at + [Origin.LIVE] * (len(exchanges) - at)
        assert upstream.request_count == len(exchanges) - at > 0
        if change.model:
            assert {r.json["model"] for r in upstream.requests} == {change.model}
        forked = self.store.get_run(run.id)
        assert (forked.parent_id, forked.fork_step) == (recorded.run.id, at)
        assert forked.status is RunStatus.FINISHED
        self.assert_offline()
        return Recorded(forked, output, exchanges, upstream)

    def resume(self, crashed: Recorded, agent: Agent, script: Script) -> Recorded:
        """Go on with a crashed run: its steps from the cassette, the rest live, same run."""
        upstream, proxy = self._live(script)
        run = proxy.resume(crashed.run.id).run
        output = agent(self.env(proxy.proxy.url, run))
        proxy.close()
        upstream.stop()
        exchanges = self.store.exchanges(run.id)
        done = len(crashed.exchanges)
        assert exchanges[:done] == crashed.exchanges  # kept, not written again
        assert [e.origin for e in exchanges[done:]] == [Origin.LIVE] * upstream.request_count
        assert upstream.request_count > 0
        assert self.store.get_run(run.id).status is RunStatus.FINISHED
        self.assert_offline()
        return Recorded(self.store.get_run(run.id), output, exchanges, upstream)

    def check(self, agent: Agent, script: Script, *, min_steps: int) -> Recorded:
        """Record, then replay offline and compare: the whole test for most stacks."""
        recorded = self.record(agent, script, min_steps=min_steps)
        self.replay(recorded, agent)
        return recorded

    def assert_offline(self) -> None:
        attempts = self.sentinel.attempts
        assert attempts == [], f"the agent reached past forkpoint's base URL: {attempts}"


@pytest.fixture
def stacks(store, start_upstream, start_proxy) -> Iterator[Stacks]:  # type: ignore[no-untyped-def]
    harness = Stacks(store, start_upstream, start_proxy)
    yield harness
    harness.sentinel.close()


@pytest.fixture(scope="session")
def node_agent() -> Agent:
    """The Node agent, its `openai` package installed from package-lock.json (`npm ci`) when
    node_modules is missing or older than the lock file. Needs Node >= 20 and npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("the Node stack test needs node (>= 20) and npm on PATH")
    lock, installed = NODE_DIR / "package-lock.json", NODE_DIR / "node_modules/.package-lock.json"
    guard_path = Path(tempfile.gettempdir()) / "forkpoint-stacks-npm-ci.lock"
    with guard_path.open("w") as guard:  # one `npm ci` at a time (xdist workers)
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if done.returncode != 0:
                pytest.fail(f"npm ci in {NODE_DIR} failed:\n{done.stdout}{done.stderr}")
    return command(node, NODE_DIR / "agent.mjs")
