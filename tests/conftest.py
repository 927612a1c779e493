"""Fixtures shared by the suite: a scripted upstream and a proxy, each on real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, OnHangup, Routes
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.proxy import ProxyThread
from forkpoint.testing.upstream import ScriptedUpstream
from tests.pg import sharing_the_server

# Tests of seconds each: marked `slow`, run by CI, skipped by `scripts/test -m "not slow"`.
SLOW = ("stacks/", "testing/test_pytest_plugin", "compare/test_experiment_e2e", "agents/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        where = Path(str(item.path)).relative_to(root).as_posix()
        if where.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


class RunningUpstream:
    """A ScriptedUpstream on its own loop thread, stoppable mid-test (to prove replay is offline)."""

    def __init__(self, upstream: ScriptedUpstream):
        self.upstream = upstream
        self._thread = LoopThread("scripted-upstream")
        self.url = self._thread.call(upstream.start())

    @property
    def request_count(self) -> int:
        return self.upstream.request_count

    @property
    def requests(self):  # type: ignore[no-untyped-def]
        return self.upstream.requests

    def stop(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.call(self.upstream.close())
            self._thread.close()


@pytest.fixture(autouse=True)
def _shares_the_postgresql_server() -> Iterator[None]:
    """Every test shares the PostgreSQL server with the other workers' (`tests.pg`): the few
    that restart it wait until no other test runs."""
    with sharing_the_server():
        yield


@pytest.fixture
def start_upstream() -> Iterator:  # type: ignore[type-arg]
    started: list[RunningUpstream] = []

    def start(upstream: ScriptedUpstream | None = None) -> RunningUpstream:
        running = RunningUpstream(upstream or ScriptedUpstream())
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def upstream(start_upstream) -> RunningUpstream:  # type: ignore[no-untyped-def]
    return start_upstream()


@pytest.fixture
def cassette(tmp_path: Path) -> Path:
    return tmp_path / "cassette.db"


@pytest.fixture
def store(cassette: Path) -> Iterator[SqliteStore]:
    opened = SqliteStore(cassette)
    yield opened
    opened.close()


@pytest.fixture
def start_proxy(store: SqliteStore) -> Iterator:  # type: ignore[type-arg]
    """Start a proxy on the test's cassette: `start_proxy(upstream_url, **options)`."""
    threads: list[ProxyThread] = []

    def start(upstream_url, *, routes=None, on_hangup=OnHangup.FINISH, **options):  # type: ignore[no-untyped-def]
        config = EngineConfig(routes=Routes.of(upstream_url, routes), on_hangup=on_hangup)
        thread = ProxyThread(store, config, **options)
        threads.append(thread)
        thread.__enter__()
        return thread

    yield start
    for thread in threads:
        thread.close()
