"""Who numbers a session's steps: the session itself when this proxy owns its run, the store
when a request names a run that other proxies may serve too."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.models import Run
from forkpoint.runtime.proxy import ProxyThread


def chat(url: str, text: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_a_named_run_takes_its_steps_from_the_store_an_owned_one_from_itself(
    upstream, tmp_path: Path
):
    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("named"))
    for _ in range(3):  # another proxy serving "named" took steps 0-2
        store.allocate_step("named")
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


def test_a_store_that_cannot_give_a_step_is_a_clear_503(upstream, tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db", busy_timeout_ms=100)
    with ProxyThread(store, EngineConfig(routes=Routes.of(upstream.url))) as proxy:
        assert chat(f"{proxy.url}/r/named", "a").status_code == 200
        locker = sqlite3.connect(tmp_path / "c.db")
        locker.execute("BEGIN EXCLUSIVE")
        try:
            refused = chat(f"{proxy.url}/r/named", "b")
        finally:
            locker.rollback()
            locker.close()
        assert refused.status_code == 503
        assert "no step for this request in run named" in refused.json()["error"]["message"]
        assert "locked by another process" in refused.json()["error"]["message"]
        assert upstream.request_count == 1  # nothing went upstream unnumbered
        assert chat(f"{proxy.url}/r/named", "c").status_code == 200
    assert [e.step for e in store.exchanges("named")] == [0, 1]
    store.close()


def test_a_named_run_the_store_cannot_make_is_a_clear_503(upstream, tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db", busy_timeout_ms=100)
    with ProxyThread(store, EngineConfig(routes=Routes.of(upstream.url))) as proxy:
        locker = sqlite3.connect(tmp_path / "c.db")
        locker.execute("BEGIN EXCLUSIVE")
        try:
            refused = chat(f"{proxy.url}/r/fresh", "a")
        finally:
            locker.rollback()
            locker.close()
        assert refused.status_code == 503, refused.text
        assert "cannot open run fresh" in refused.json()["error"]["message"]
        assert upstream.request_count == 0
        assert chat(f"{proxy.url}/r/fresh", "b").status_code == 200  # tried again: it opens
    assert [e.step for e in store.exchanges("fresh")] == [0]
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
                for _ in range(5):  # another proxy on the same run takes steps meanwhile
                    store.allocate_step("named")
                assert ask(socket, "b") == ["b once", "b twice"]
    finally:
        service.stop()
    steps = [e.step for e in store.exchanges("named")]
    store.close()
    assert len(steps) == 3 and steps[:2] == [0, 1]  # the upgrade, then "a"
    assert steps[2] == 7  # "b": after the 5 the other proxy took (2-6), not 2
