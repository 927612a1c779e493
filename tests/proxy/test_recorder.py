"""The recorder thread against a real store: batching, retries, one bad exchange."""

from __future__ import annotations

import sqlite3

from forkpoint.cassettes.models import Exchange, Run
from forkpoint.cassettes.sqlite import SqliteStore
from forkpoint.proxy.recorder import Recorder


def exchange(run_id: str, step: int) -> Exchange:
    return Exchange(
        run_id=run_id,
        step=step,
        method="POST",
        route="/v1/chat/completions",
        request_headers=(),
        request_body=b'{"model": "gpt-4o"}',
        fingerprint="f",
        status=200,
        response_body=b'{"model": "gpt-4o", "choices": []}',
    )


def test_exchanges_are_summarized_and_committed(store: SqliteStore):
    store.create_run(Run("r1"))
    recorder = Recorder(store)
    for step in range(20):
        recorder.submit(exchange("r1", step))
    assert recorder.flush(10)
    recorder.close()
    loaded = store.exchanges("r1")
    assert [e.step for e in loaded] == list(range(20))
    assert loaded[0].summary is not None and loaded[0].summary.model == "gpt-4o"


def test_a_bad_exchange_does_not_lose_the_others_of_its_batch(store: SqliteStore):
    store.create_run(Run("r1"))
    recorder = Recorder(store)
    # step 1 twice: the second violates the primary key and can never be written
    for item in (exchange("r1", 0), exchange("r1", 1), exchange("r1", 1), exchange("r1", 2)):
        recorder.submit(item)
    assert recorder.flush(30)
    recorder.close()
    assert [e.step for e in store.exchanges("r1")] == [0, 1, 2]


def test_a_write_blocked_by_a_lock_is_retried_until_it_lands(cassette):
    store = SqliteStore(cassette, busy_timeout_ms=50)
    store.create_run(Run("r1"))
    locker = sqlite3.connect(cassette)
    locker.execute("BEGIN EXCLUSIVE")
    recorder = Recorder(store)
    recorder.submit(exchange("r1", 0))
    assert not recorder.flush(0.3)  # still locked
    locker.rollback()
    locker.close()
    assert recorder.flush(10)
    recorder.close()
    assert len(store.exchanges("r1")) == 1
    store.close()
