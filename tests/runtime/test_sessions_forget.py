"""A long-lived proxy holds nothing of a run once it parked: its session is forgotten (a later
request naming the run opens it again), so a thousand parked runs cost serve no sessions."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.parking import Parking
from forkpoint.models import ParkState, RunStatus
from forkpoint.runtime.proxy import ProxyThread


def chat(url: str, text: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def test_a_parked_runs_session_is_held_no_longer(upstream, tmp_path: Path):
    store = SqliteStore(tmp_path / "c.db")
    config = EngineConfig(routes=Routes.of(upstream.url), parking=Parking.of(["POST /approvals*"]))
    agent = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        with ProxyThread(store, config) as proxy:
            assert chat(f"{proxy.url}/r/waits", "plan").status_code == 200
            assert chat(f"{proxy.url}/r/works", "go on").status_code == 200
            proxy.parking.agent("waits", agent.pid)
            with pytest.raises(httpx.TransportError):  # its agent ended, its request dropped
                httpx.post(f"{proxy.url}/r/waits/approvals/x", json={"ok": 1}, timeout=30)
            assert agent.wait(30) != 0
            held = {session.run.id for session in proxy.sessions.all()}
            assert held == {"works"}
    finally:
        agent.kill()
        agent.wait()
    park = store.parked("waits")
    assert park is not None and park.state is ParkState.PARKED and park.step == 1
    assert store.get_run("waits").status is RunStatus.PARKED
    store.close()
