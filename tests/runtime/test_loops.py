"""The loop a command runs on: uvloop where installed (the dev install has it), on the main
thread only, and the recorder's writer process works on it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import ConfigError
from forkpoint.models import Run
from forkpoint.runtime import loops
from forkpoint.runtime.recording.process import ProcessRecorder
from tests.builders import exchange as build


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_a_command_runs_on_uvloop_where_it_is_installed(monkeypatch):
    monkeypatch.delenv(loops.ENV, raising=False)
    assert loops.run(_loop_module()).startswith("uvloop")


def test_forkpoint_loop_asyncio_turns_it_off_and_a_bad_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(loops.ENV, "asyncio")
    assert loops.run(_loop_module()).startswith("asyncio")
    monkeypatch.setenv(loops.ENV, "trio")
    with pytest.raises(ConfigError, match="FORKPOINT_LOOP='trio': use uvloop or asyncio"):
        loops.run(_loop_module())


def test_a_loop_on_another_thread_stays_on_asyncio(monkeypatch):
    """Two uvloop loops spawning at once fail ("Racing with another loop to spawn a process"):
    only the main thread's loop is uvloop's."""
    monkeypatch.setenv(loops.ENV, "uvloop")
    found: list[str] = []
    thread = threading.Thread(target=lambda: found.append(loops.run(_loop_module())))
    thread.start()
    thread.join()
    assert found[0].startswith("asyncio")


def test_the_writer_process_starts_and_commits_on_uvloop(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(loops.ENV, raising=False)
    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("r1"))

    async def record() -> int | None:
        assert (await _loop_module()).startswith("uvloop")
        recorder = ProcessRecorder(store)
        await recorder.start()
        pid = recorder.child_pid  # None: it fell back to writing from this process
        for step in range(5):
            recorder.submit(build(run_id="r1", step=step))
        await recorder.stop()
        return pid

    assert loops.run(record()) is not None
    assert [e.step for e in store.exchanges("r1")] == list(range(5))
    store.close()
