"""Both recorders against a real cassette: batching, retries, one bad exchange; and for the
writer process, what happens when it dies, when the proxy dies, and on Ctrl-C."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.cassettes.memory import MemoryStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.engine.matching import MatchConfig, fingerprint
from forkpoint.models import Blob, Exchange, Piece, Run, Snapshot
from forkpoint.runtime import collector
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.recording.journaled import Journaled, held_exchanges, merge_orphans
from forkpoint.runtime.recording.process import (
    PROMOTE_AT,
    AdaptiveRecorder,
    ProcessRecorder,
    recorder_for,
)
from forkpoint.runtime.recording.recorder import LoopRecorder, Recorder, ThreadRecorder
from forkpoint.runtime.recording.writer import Item
from tests.builders import exchange as build
from tests.pg import postgres_url as postgres_url  # the fixture


def exchange(run_id: str, step: int, model: str = "gpt-4o") -> Exchange:
    return build(
        run_id=run_id,
        step=step,
        request_headers=(),
        request_body=b'{"model": "%s", "user": "u-%d"}' % (model.encode(), step),
        response_headers=(),
        response_body=b'{"model": "%s", "choices": []}' % model.encode(),
    )


def drop_user(method: str, route: str, body: Any) -> Any:
    """A normalizer the writer process must import by name."""
    return {k: v for k, v in body.items() if k != "user"}


class Running:
    """A recorder started on a loop thread; `submit` runs on that loop, as the gateway's does."""

    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self._thread = LoopThread("recorder-test")
        self._thread.call(recorder.start())

    def submit(self, *items: Item) -> None:
        async def submit_all() -> None:
            for item in items:
                self.recorder.submit(item)

        self._thread.call(submit_all())

    def flush(self, timeout: float) -> bool:
        return self.recorder.flush(timeout)

    def stop(self) -> None:
        if self._thread.loop.is_closed():
            return
        self._thread.call(self.recorder.stop())
        self._thread.close()


KINDS: dict[str, Callable[..., Recorder]] = {
    "thread": ThreadRecorder,
    "process": ProcessRecorder,
    "adaptive": AdaptiveRecorder,
}


@pytest.fixture
def run() -> Iterator[Callable[[Recorder], Running]]:
    """Start a recorder on a loop thread; every one is stopped after the test."""
    started: list[Running] = []

    def run(recorder: Recorder) -> Running:
        running = Running(recorder)
        started.append(running)
        return running

    yield run
    for running in started:
        running.stop()


@pytest.fixture(params=sorted(KINDS))
def start(
    request: pytest.FixtureRequest, run: Callable[[Recorder], Running]
) -> Callable[..., Running]:
    """Each kind of recorder in turn: `start(store, **options)`."""
    return lambda store, **options: run(KINDS[request.param](store, **options))


def test_exchanges_and_snapshots_are_summarized_fingerprinted_and_committed(store, start):
    store.create_run(Run("r1"))
    running = start(store, match=MatchConfig(normalizers=(drop_user,)))
    running.submit(*(exchange("r1", step) for step in range(20)))
    running.submit(Snapshot("r1", 19, "agent", "application/json", b'{"turn": 20}'))
    assert running.flush(10)
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == list(range(20))
    assert loaded[0].summary is not None and loaded[0].summary.model == "gpt-4o"
    # the normalizer ran where the fingerprint was computed: all 20 differ only by "user"
    expected = fingerprint("POST", "/v1/chat/completions", b'{"model": "gpt-4o"}', (),
                           MatchConfig())  # fmt: skip
    assert {e.fingerprint for e in loaded} == {expected}
    assert [s.data for s in store.latest_snapshots("r1")] == [b'{"turn": 20}']


def test_the_pieces_of_a_body_go_in_before_the_exchange_that_names_them(store, start):
    store.create_run(Run("r1"))
    parts = [bytes([n]) * 300_000 for n in range(3)]
    blobs = [Blob(hashlib.sha256(part).hexdigest(), part) for part in parts]
    pieces = tuple(Piece(b.digest, len(b.data), 1.0) for b in blobs)
    running = start(store)
    running.submit(*blobs, dataclasses.replace(exchange("r1", 0), pieces=pieces))
    assert running.flush(10)
    (loaded,) = store.exchanges("r1")
    assert [store.piece(piece) for piece in loaded.pieces] == parts


def test_a_bad_exchange_does_not_lose_the_others_of_its_batch(store, start):
    store.create_run(Run("r1"))
    running = start(store)
    # step 1 twice: the second violates the primary key and can never be written
    running.submit(exchange("r1", 0), exchange("r1", 1), exchange("r1", 1), exchange("r1", 2))
    assert running.flush(30)
    assert [e.step for e in store.exchanges("r1")] == [0, 1, 2]


def test_a_write_blocked_by_a_lock_is_retried_until_it_lands(cassette, start):
    store = SqliteStore(cassette, busy_timeout_ms=50)
    store.create_run(Run("r1"))
    locker = sqlite3.connect(cassette)
    locker.execute("BEGIN EXCLUSIVE")
    running = start(store)
    running.submit(exchange("r1", 0))
    assert not running.flush(0.3)  # still locked
    locker.rollback()
    locker.close()
    assert running.flush(10)
    assert len(store.exchanges("r1")) == 1
    running.stop()
    store.close()


def test_a_killed_writer_process_loses_nothing(cassette, run, caplog):
    store = SqliteStore(cassette)
    store.create_run(Run("r1"))
    locker = sqlite3.connect(cassette)
    locker.execute("BEGIN EXCLUSIVE")  # the child reads these and cannot commit them
    running = run(ProcessRecorder(store))
    recorder = running.recorder
    assert isinstance(recorder, ProcessRecorder) and recorder.child_pid is not None
    running.submit(*(exchange("r1", step) for step in range(5)))
    assert not running.flush(0.3)
    with caplog.at_level(logging.WARNING):
        os.kill(recorder.child_pid, signal.SIGKILL)
        locker.rollback()
        locker.close()
        assert running.flush(10)  # written from this process instead
    running.submit(*(exchange("r1", step) for step in range(5, 8)))
    assert running.flush(10)
    assert [e.step for e in store.exchanges("r1")] == list(range(8))
    assert "writer process exited with status -9" in caplog.text
    running.stop()
    store.close()


def test_the_writer_process_yields_the_cpu_to_the_proxy(store, run):
    running = run(ProcessRecorder(store))
    pid = running.recorder.child_pid
    deadline = time.monotonic() + 10  # it lowers its priority first thing
    while os.getpriority(os.PRIO_PROCESS, pid) <= os.nice(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.getpriority(os.PRIO_PROCESS, pid) > os.nice(0)


def test_the_writer_process_collects_garbage_as_the_proxy_does():
    """Its items are freed by reference counting: the young generation is collected every
    `collector.YOUNG` allocations, not every 700 (tuned before it reads its input)."""
    script = (
        "import gc; from forkpoint.runtime.recording import child; child.main(); "
        "print(gc.get_threshold()[0])"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=60, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == collector.YOUNG


def test_ctrl_c_leaves_the_writer_process_writing(store, run):
    store.create_run(Run("r1"))
    running = run(ProcessRecorder(store))
    running.submit(exchange("r1", 0))
    assert running.flush(10)  # the child is up and has its signal handling in place
    os.kill(running.recorder.child_pid, signal.SIGINT)
    running.submit(exchange("r1", 1))
    assert running.flush(10)
    assert [e.step for e in store.exchanges("r1")] == [0, 1]
    assert running.recorder.child_pid is not None  # still the child, no fallback


def test_what_a_dying_proxy_handed_over_is_still_committed(cassette: Path):
    """The proxy's process is killed right after handing exchanges over: the writer process
    reads to the end of its input and commits them."""
    SqliteStore(cassette).create_run(Run("r1"))
    script = textwrap.dedent(f"""
        import asyncio, os
        from forkpoint.cassettes.sqlite.store import SqliteStore
        from forkpoint.runtime.recording.process import ProcessRecorder
        from tests.runtime.test_recorder import exchange

        async def main():
            recorder = ProcessRecorder(SqliteStore({str(cassette)!r}))
            await recorder.start()
            for step in range(50):
                recorder.submit(exchange("r1", step))
            await asyncio.sleep(0.1)  # the batch goes down the pipe (within LINGER)
            os.kill(os.getpid(), 9)

        asyncio.run(main())
    """)
    root = Path(__file__).resolve().parents[2]
    killed = subprocess.run([sys.executable, "-c", script], cwd=root, timeout=60)
    assert killed.returncode == -9
    store = SqliteStore(cassette)
    deadline = time.monotonic() + 10  # the orphaned writer finishes in its own time
    while store.step_count("r1") < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [e.step for e in store.exchanges("r1")] == list(range(50))
    store.close()


def test_a_burst_of_traffic_moves_writing_to_a_process_and_loses_nothing(store, run):
    store.create_run(Run("r1"))
    running = run(AdaptiveRecorder(store))
    recorder = running.recorder
    assert isinstance(recorder, AdaptiveRecorder)
    running.submit(*(exchange("r1", step) for step in range(5)))
    assert running.flush(10)
    assert recorder.process is None  # a trickle stays on the thread
    burst = range(5, 5 + PROMOTE_AT)
    running.submit(*(exchange("r1", step) for step in burst))  # well within a second
    assert recorder.process is not None
    running.submit(*(exchange("r1", step) for step in range(5 + PROMOTE_AT, 10 + PROMOTE_AT)))
    assert running.flush(10)
    assert recorder.process.child_pid is not None
    assert [e.step for e in store.exchanges("r1")] == list(range(10 + PROMOTE_AT))


def test_a_postgresql_store_is_written_from_a_writer_process_too(postgres_url, run):
    """A proxy on a database writes from a child under load, as on a file: on a thread it
    recorded at 0.65x the SQLite cassette's rate (benchmarks/postgres.py), 0.88x so."""
    from forkpoint.cassettes.postgres import PostgresStore

    store = PostgresStore(postgres_url)
    journaled = recorder_for(store, MatchConfig())
    assert isinstance(journaled, Journaled) and isinstance(journaled.inner, AdaptiveRecorder)
    asyncio.run(journaled.stop())
    store.create_run(Run("r1"))
    running = run(ProcessRecorder(store))
    assert running.recorder.child_pid is not None
    running.submit(*(exchange("r1", step) for step in range(10)))
    assert running.flush(20)
    assert [e.step for e in store.exchanges("r1")] == list(range(10))
    running.stop()
    store.close()


def test_a_cassette_file_gets_a_writer_process_a_lambda_a_thread_memory_the_loop(store):
    journaled = recorder_for(store, MatchConfig())
    assert isinstance(journaled, Journaled) and isinstance(journaled.inner, AdaptiveRecorder)
    asyncio.run(journaled.stop())

    def in_main(method: str, route: str, body: Any) -> Any:
        return body

    in_main.__module__ = "__main__"  # as if defined in the agent's script: not importable
    memory = recorder_for(MemoryStore(), MatchConfig())
    assert isinstance(memory, LoopRecorder)  # nothing to journal for
    asyncio.run(memory.stop())
    for recorder in (
        recorder_for(store, MatchConfig(normalizers=(lambda method, route, body: body,))),
        recorder_for(store, MatchConfig(normalizers=(in_main,))),
    ):
        assert isinstance(recorder, Journaled) and isinstance(recorder.inner, ThreadRecorder)
        asyncio.run(recorder.stop())


def test_an_exchange_too_deep_to_read_is_recorded_as_its_bytes_and_the_writer_goes_on(
    store, start, caplog
):
    """orjson reads 1,024 levels of JSON and writes 254: such a body used to kill the writer
    (and its fallback), and nothing was recorded after it (issue 14.2)."""
    store.create_run(Run("r1"))
    running = start(store)
    deep = exchange("r1", 0)
    deep.request_body = b'{"model": "gpt-4o", "x": ' + b"[" * 600 + b"]" * 600 + b"}"
    with caplog.at_level(logging.WARNING):
        running.submit(deep, *(exchange("r1", step) for step in range(1, 4)))
        assert running.flush(10)
        running.submit(exchange("r1", 4))
        assert running.flush(10)
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == [0, 1, 2, 3, 4]
    assert loaded[0].request_body == deep.request_body
    raw = fingerprint("POST", "/v1/chat/completions", deep.request_body, (), MatchConfig())
    assert loaded[0].fingerprint == raw  # matched by its bytes, on replay as on record


def test_a_journaled_recorder_holds_what_a_locked_store_refuses_and_writes_it_later(
    cassette, run, caplog
):
    store = SqliteStore(cassette, busy_timeout_ms=50)
    store.create_run(Run("r1"))
    locker = sqlite3.connect(cassette)
    locker.execute("BEGIN EXCLUSIVE")
    running = run(recorder_for(store, MatchConfig()))
    with caplog.at_level(logging.WARNING):
        running.submit(*(exchange("r1", step) for step in range(30)))
        assert running.flush(10)  # held: in the journal, not in memory
        assert held_exchanges(store)[0] == {"r1": 30}
        locker.rollback()
        locker.close()
        deadline = time.monotonic() + 20
        while "takes writes again" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)  # the retry's backoff
    assert [e.step for e in store.exchanges("r1")] == list(range(30))
    assert caplog.text.count("takes no writes") == 1
    assert caplog.text.count("takes writes again") == 1
    running.stop()
    assert held_exchanges(store)[0] == {}
    assert not list(Path(f"{cassette}.journals").glob("*.journal"))
    store.close()


def test_a_store_in_memory_is_written_on_the_loop_with_no_thread_once_the_answer_is_out(run):
    store = MemoryStore()
    store.create_run(Run("r1"))
    threads = threading.active_count()
    recorder = recorder_for(store, MatchConfig())
    running = run(recorder)
    assert threading.active_count() == threads + 1  # the test's loop thread, no writer
    parts = [bytes([n]) * 300_000 for n in range(2)]
    blobs = [Blob(hashlib.sha256(part).hexdigest(), part) for part in parts]
    pieces = tuple(Piece(b.digest, len(b.data), 1.0) for b in blobs)

    async def submitted_then_seen() -> int:
        recorder.submit(exchange("r1", 0))
        for blob in blobs:
            recorder.submit(blob)
        recorder.submit(dataclasses.replace(exchange("r1", 1), pieces=pieces))
        seen = store.step_count("r1")  # not yet: the agent's last bytes go out first
        await asyncio.sleep(0)
        return seen

    assert running._thread.call(submitted_then_seen()) == 0
    assert running.flush(5)
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == [0, 1]
    assert loaded[0].summary is not None and loaded[0].summary.model == "gpt-4o"
    assert [store.piece(piece) for piece in loaded[1].pieces] == parts


class Refusing(SqliteStore):
    """A cassette that refuses one step with an error that is not its being unavailable (a bug,
    a value it cannot take), and counts the tries."""

    refuse: int | None = None
    tries = 0

    def add_exchanges(self, exchanges: Iterable[Exchange]) -> None:
        exchanges = list(exchanges)
        if any(e.step == self.refuse for e in exchanges):
            self.tries += 1
            raise ValueError(f"step {self.refuse} is refused")
        super().add_exchanges(exchanges)


def no_traceback(caplog: pytest.LogCaptureFixture) -> bool:
    return "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)


def test_an_exchange_the_store_refuses_stays_in_the_journal_and_goes_in_once_it_can(
    cassette, run, caplog
):
    """A refusal skipped the exchange: its journal entry was marked done and deleted, so an
    answer the agent had was in neither the store nor the journal, and a traceback was logged."""
    store = Refusing(cassette)
    store.refuse = 2
    store.create_run(Run("r1"))
    running = run(recorder_for(store, MatchConfig()))
    with caplog.at_level(logging.WARNING):
        running.submit(*(exchange("r1", step) for step in range(5)))
        assert running.flush(10)  # held in the journal: a flush ends
        running.submit(exchange("r1", 5))
        assert running.flush(10)  # the writer goes on
        assert [e.step for e in store.exchanges("r1")] == [0, 1, 3, 4, 5]
        assert held_exchanges(store)[0] == {"r1": 1}
        time.sleep(1.5)  # retried, not hot-looped, and said once
        assert 2 <= store.tries <= 5
        store.refuse = None
        deadline = time.monotonic() + 10
        while store.step_count("r1") < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [e.step for e in store.exchanges("r1")] == list(range(6))
    assert caplog.text.count("ValueError: step 2 is refused") == 1
    assert "journal" in caplog.text and no_traceback(caplog)
    running.stop()
    assert held_exchanges(store)[0] == {}
    assert not list(Path(f"{cassette}.journals").iterdir())
    store.close()


def test_what_the_store_refuses_until_the_proxy_stops_is_merged_by_the_next(cassette, run, caplog):
    store = Refusing(cassette)
    store.refuse = 1
    store.create_run(Run("r1"))
    running = run(recorder_for(store, MatchConfig()))
    with caplog.at_level(logging.WARNING):
        running.submit(*(exchange("r1", step) for step in range(3)))
        assert running.flush(10)
        running.stop()
    assert [e.step for e in store.exchanges("r1")] == [0, 2]
    assert held_exchanges(store)[0] == {"r1": 1}  # the journal file outlives the proxy
    assert no_traceback(caplog)
    store.refuse = None
    assert merge_orphans(store, MatchConfig()) == 1
    assert [e.step for e in store.exchanges("r1")] == [0, 1, 2]
    assert not list(Path(f"{cassette}.journals").iterdir())
    store.close()


def test_what_the_store_refuses_the_writer_process_is_held_in_the_journal(
    store, run, caplog, capfd
):
    store.create_run(Run("r1"))
    running = run(recorder_for(store, MatchConfig()))
    recorder = running.recorder
    assert isinstance(recorder, Journaled) and isinstance(recorder.inner, AdaptiveRecorder)
    running.submit(*(exchange("r1", step) for step in range(PROMOTE_AT)))  # a burst
    assert running.flush(10) and recorder.inner.process is not None
    poison = exchange("r1", PROMOTE_AT)
    poison.status = 2**70  # more than SQLite's integers hold: refused, every time
    with caplog.at_level(logging.WARNING):
        running.submit(poison, exchange("r1", PROMOTE_AT + 1))
        assert running.flush(10)
        running.submit(exchange("r1", PROMOTE_AT + 2))
        assert running.flush(10)
        running.stop()
    steps = [e.step for e in store.exchanges("r1")]
    assert steps == [*range(PROMOTE_AT), PROMOTE_AT + 1, PROMOTE_AT + 2]
    assert held_exchanges(store)[0] == {"r1": 1}  # its journal file outlives the proxy
    assert "OverflowError" in caplog.text and no_traceback(caplog)
    assert "Traceback" not in capfd.readouterr().err  # the writer process's log


class RefusingRun(SqliteStore):
    """A cassette that refuses to create one run with an error not its being unavailable."""

    refuse: str | None = None

    def create_run(self, run: Run) -> None:
        if run.id == self.refuse:
            raise ValueError(f"run {run.id} is refused")
        super().create_run(run)


def test_the_items_of_a_run_the_store_refuses_wait_with_it_and_hold_up_no_other_run(
    cassette, run, caplog
):
    """Its exchanges found no run, which reads as a store taking no writes: every run's
    exchanges were held behind them, and retried in vain for as long as the run was refused."""
    store = RefusingRun(cassette)
    store.refuse = "r2"
    store.create_run(Run("r1"))
    running = run(recorder_for(store, MatchConfig()))
    with caplog.at_level(logging.WARNING):
        running.submit(Run("r2"))
        running.submit(*(exchange(run_id, step) for step in range(3) for run_id in ("r1", "r2")))
        running.submit(Snapshot("r2", 2, "agent", "application/json", b"{}"))
        assert running.flush(10)
        running.submit(exchange("r1", 3))
        assert running.flush(10)
        assert [e.step for e in store.exchanges("r1")] == [0, 1, 2, 3]
        assert held_exchanges(store)[0] == {"r2": 3}
        store.refuse = None
        deadline = time.monotonic() + 10
        while store.step_count("r2") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the retry's backoff
        running.stop()
    assert [e.step for e in store.exchanges("r2")] == [0, 1, 2]
    assert [s.step for s in store.snapshots("r2")] == [2]
    assert "takes no writes" not in caplog.text
    assert caplog.text.count("ValueError: run r2 is refused") == 1 and no_traceback(caplog)
    assert held_exchanges(store)[0] == {}
    store.close()
