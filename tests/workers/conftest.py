"""Workers end to end: a store of recorded runs on the real PostgreSQL server (a schema per
test, the queue's tables beside the store's), real `forkpoint worker` processes, a scripted
model and tool service on real sockets, and the experiments' stdlib agent."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forkpoint import api
from forkpoint.testing.upstream import ScriptedUpstream
from tests.api.test_experiments import AGENT, lookup, script
from tests.conftest import RunningUpstream
from tests.pg import postgres_url as postgres_url  # the fixture
from tests.runner import start_forkpoint

RUNS = 30
# An agent that starts its fork and then waits (a slow tool): what a killed or cancelled
# worker leaves under way. It asks nothing, so its run stays `running` until someone ends it.
HANG = "import sys, time; time.sleep(float(sys.argv[1]))"


class Recorded:
    """RUNS runs of the experiments' agent recorded once (label batch=t, q=question; every
    seventh's fork exits 3), copied into each test's PostgreSQL schema."""

    def __init__(self, work: Path, upstream: RunningUpstream) -> None:
        self.upstream, self.work = upstream, work
        self.agent = work / "agent.py"
        self.agent.write_text(AGENT)
        self.hang = work / "hang.py"
        self.hang.write_text(HANG)
        self.file = work / "recorded.db"
        for index in range(RUNS):
            question = f"{'easy: ' if index % 3 == 0 else ''}question {index}"
            labels = {"batch": "t", "q": question, "exit": "3" if index % 7 == 6 else "0"}
            options = api.Options(cassette=self.file, labels=labels, name=f"q{index:02d}",
                                  upstream=upstream.url, routes={"tools": upstream.url})  # fmt: skip
            assert api.record([sys.executable, str(self.agent), question], options).exit_code == 0

    @property
    def command(self) -> str:
        return f"{sys.executable} {self.agent} {{label:q}} {{label:exit}}"

    def hanging(self, seconds: float) -> str:
        return f"{sys.executable} {self.hang} {seconds}"

    def upstream_flags(self) -> list[str]:
        return ["--upstream", self.upstream.url, "--route", f"tools={self.upstream.url}"]


@pytest.fixture(scope="package")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    upstream = ScriptedUpstream(script)
    upstream.app.router.add_get("/lookup", lookup)
    running = RunningUpstream(upstream)
    yield Recorded(tmp_path_factory.mktemp("workers"), running)
    running.stop()


@pytest.fixture
def store_url(postgres_url: str, recorded: Recorded) -> str:
    """A schema of the test's own holding the recorded runs."""
    api.copy(recorded.file, postgres_url)
    return postgres_url


class Workers:
    """`forkpoint worker` processes started by a test, stopped (or killed) after it."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, url: str, *agents: str, lease: float = 2.0, grace: float = 30.0,
              concurrency: int = 2, env: dict[str, str] | None = None,
              ) -> subprocess.Popen[str]:  # fmt: skip
        flags = [f"--agent={agent}" for agent in agents]
        process = start_forkpoint(
            "worker", "--store", url, *flags, "--lease", str(lease), "--grace", str(grace),
            "--concurrency", str(concurrency), env=env,
        )  # fmt: skip
        self.started.append(process)
        return process

    def stop(self, process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
        """Stop one (SIGTERM: after its jobs); its log."""
        if process.poll() is None:
            process.send_signal(sig)
        _, log = process.communicate(timeout=60)
        return log


@pytest.fixture
def workers() -> Iterator[Workers]:
    started = Workers()
    yield started
    for process in started.started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def wait_for(test: Callable[[], object], what: str, timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = test()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
