"""The loop a command runs on: uvloop where installed (the dev install has it), on the main
thread only, and the recorder's writer process works on it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.errors import ConfigError
from forkpoint.models import Run
from forkpoint.runtime import loops
from forkpoint.runtime.recording.process import ProcessRecorder
from forkpoint.runtime.recording.recorder import LINGER
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


def test_a_killed_writer_process_on_uvloop_hands_over_without_an_error(tmp_path, monkeypatch):
    """uvloop's pipe raises on a write after the child died (asyncio's drops it): the batch
    sent in that moment goes to the fallback like the rest, and the loop reports nothing."""
    monkeypatch.delenv(loops.ENV, raising=False)
    store = SqliteStore(tmp_path / "c.db")
    store.create_run(Run("r1"))

    async def record() -> list[dict[str, object]]:
        errors: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
        recorder = ProcessRecorder(store)
        await recorder.start()
        recorder.submit(build(run_id="r1", step=0))
        assert await asyncio.to_thread(recorder.flush, 10)
        pid = recorder.child_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):  # dead, not yet reaped: its pipe is gone
            await asyncio.sleep(0.01)
        for step in range(1, 6):  # each its own batch, while the loop learns of the death
            recorder.submit(build(run_id="r1", step=step))
            await asyncio.sleep(LINGER * 1.5)
        assert await asyncio.to_thread(recorder.flush, 10)
        await recorder.stop()
        return errors

    assert loops.run(record()) == []
    assert [e.step for e in store.exchanges("r1")] == list(range(6))
    store.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_writing_to_a_dead_writer_process_pipe_on_uvloop_does_not_raise(tmp_path, monkeypatch):
    """What the proxy sends in the moment between the child's death and the loop's news of
    it is dropped (the fallback has every unacknowledged item), on uvloop as on asyncio."""
    monkeypatch.delenv(loops.ENV, raising=False)
    store = SqliteStore(tmp_path / "c.db")

    async def send_after_death() -> None:
        recorder = ProcessRecorder(store)
        await recorder.start()
        child, pid = recorder._child, recorder.child_pid
        assert child is not None and pid is not None
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            await asyncio.sleep(0.01)
        for _ in range(3):
            child.send(b"\x00" * 64)  # the first finds the pipe broken, the next a closed one
            await asyncio.sleep(0)
        await recorder.stop()

    loops.run(send_after_death())
    store.close()
