"""Who numbers a session's steps: the session itself when this proxy owns its run, the store
when a request names a run that other proxies may serve too: as it writes the request's
ticket, so that no request waits on the store (issue 25.11)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import httpx

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.models import Run, Ticket
from forkpoint.runtime.proxy import ProxyThread


def chat(url: str, text: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_a_named_run_takes_its_steps_from_the_store_an_owned_one_from_itself(
    upstream, tmp_path: Path
):
    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("named"))
    assert store.number("named", [-7, -8, -9]) == {-7: 0, -8: 1, -9: 2}  # another proxy's
    with ProxyThread(store, EngineConfig(routes=Routes.of(upstream.url))) as proxy:
        thread_session = proxy.sessions
        assert chat(f"{proxy.url}/r/named", "a").status_code == 200
        assert chat(proxy.url, "b").status_code == 200  # the default run: numbered here
        assert chat(f"{proxy.url}/r/named", "c").status_code == 200
        default = thread_session.default_id
    assert default is not None
    assert [e.step for e in store.exchanges("named")] == [3, 4]
    assert [e.step for e in store.exchanges(default)] == [0]
    assert store.next_step(default) == 1
    store.close()


def test_a_locked_store_keeps_no_request_of_a_named_run_waiting_and_numbers_them_later(
    upstream, tmp_path: Path
):
    """Found by attacking main: a request naming its run (how every fleet client works) got a
    503 after 5 s while the cassette was locked; one naming a new run too."""
    store = SqliteStore(tmp_path / "c.db", busy_timeout_ms=100)
    with ProxyThread(store, EngineConfig(routes=Routes.of(upstream.url))) as proxy:
        assert chat(f"{proxy.url}/r/named", "a").status_code == 200
        assert proxy.recorder.flush(10)
        locker = sqlite3.connect(tmp_path / "c.db")
        locker.execute("BEGIN EXCLUSIVE")
        try:
            began = time.monotonic()
            answers = [chat(f"{proxy.url}/r/{run}", text)
                       for run, text in [("named", "b"), ("fresh", "c"), ("named", "d")]]  # fmt: skip
            took = time.monotonic() - began
        finally:
            locker.rollback()
            locker.close()
        assert [answer.status_code for answer in answers] == [200] * 3
        assert took < 2.0, f"{took:.1f} s for three answers"
        assert upstream.request_count == 4
        # Later: the writer tries the store again (0.5 s, then 1 s, 2 s... apart) and numbers
        # what it held. Stopped before that, the proxy would leave them in its journal for the
        # next start to merge (no last try on a store that took no writes): waited for here.
        deadline = time.monotonic() + 30
        while len(store.exchanges("named")) + len(store.exchanges("fresh")) < 4:
            assert time.monotonic() < deadline, "the held exchanges were not written"
            time.sleep(0.05)
    texts = lambda run: [json.loads(e.request_body)["messages"][0]["content"]  # noqa: E731
                         for e in store.exchanges(run)]  # fmt: skip
    assert [e.step for e in store.exchanges("named")] == [0, 1, 2] and texts("named") == list("abd")
    assert [e.step for e in store.exchanges("fresh")] == [0] and texts("fresh") == ["c"]
    store.close()


def test_a_journal_merged_twice_numbers_nothing_twice(tmp_path: Path):
    from forkpoint.runtime.recording.writer import CassetteWriter
    from tests.builders import exchange

    store = SqliteStore(tmp_path / "c.db")
    writer = CassetteWriter(store)
    items = [Run("shared"), Ticket("shared", -5), Ticket("shared", -6),
             exchange(run_id="shared", step=-6), exchange(run_id="shared", step=-5)]  # fmt: skip
    assert writer.merge(items).added == 2
    again = [Ticket("shared", -5), Ticket("shared", -6), exchange(run_id="shared", step=-6),
             exchange(run_id="shared", step=-5)]  # fmt: skip
    assert writer.merge(again).added == 0
    assert [e.step for e in store.exchanges("shared")] == [0, 1]
    store.close()


def test_websocket_messages_of_a_named_run_take_their_steps_from_the_store(tmp_path: Path):
    from tests.doors.test_sockets import SocketService, ask, opened

    service = SocketService()
    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("named"))
    try:
        with ProxyThread(store, EngineConfig(routes=Routes.of(None, {"tools": service.url}))) as proxy:
            with opened(proxy.url, "/r/named/tools/ws") as socket:
                assert ask(socket, "a") == ["a once", "a twice"]
                store.number("named", [-1, -2, -3, -4, -5])  # another proxy's, meanwhile
                assert ask(socket, "b") == ["b once", "b twice"]
    finally:
        service.stop()
    steps = [e.step for e in store.exchanges("named")]
    store.close()
    assert len(steps) == 3 and steps[:2] == [0, 1]  # the upgrade, then "a"
    assert steps[2] == 7  # "b": after the 5 the other proxy took (2-6), not 2


def test_a_run_ended_before_the_recorder_wrote_it_keeps_its_end(tmp_path: Path):
    """Found by CI: `record -- CMD` whose command exited at once left its run `crashed` with no
    error nor end time. The recorder was handed the session's own run, which the ending then
    marked crashed before the writer wrote it: the run was made crashed, and its Ending (applied
    only to a running run) skipped. Ten runs opened and ended at once, as such a command does."""
    from forkpoint.models import RunStatus
    from forkpoint.runtime.loop_thread import LoopThread

    store, loop = SqliteStore(tmp_path / "c.db"), LoopThread("test")
    try:
        proxy = ProxyThread(store, loop=loop)
        opened = [proxy.record(default=False).run.id for _ in range(10)]
        proxy.call(proxy.proxy.stop(RunStatus.CRASHED, error="command exited with 3"))
    finally:
        loop.close()
    runs = {run.id: run for run in store.list_runs()}
    store.close()
    assert sorted(runs) == sorted(opened)
    for run in runs.values():
        assert run.status is RunStatus.CRASHED and run.error == "command exited with 3"
        assert run.ended_at is not None
