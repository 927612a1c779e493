"""Importing a file into a store (issue 25.7): an exchange at a time, in memory that does not
grow with the file, and all or nothing in both SQL stores."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.cassettes.postgres import PostgresStore
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.transfer import COPY_BATCH, Atomic, import_file, read_file_run
from forkpoint.errors import AlreadyRecorded, CassetteError
from forkpoint.models import Run
from tests.builders import exchange
from tests.pg import postgres_url as postgres_url  # the fixture

DUMPS = {".yaml": text.dumps, ".har": har.dumps, ".jsonl": jsonl.dumps}
RUN = Run(id="01FILE", name="from a file")
STARTED = 1_700_000_000.0


def chat(step: int) -> bytes:
    return b'{"model":"gpt-4o","messages":[{"role":"user","content":"question %d"}]}' % step


def written(folder: Path, suffix: str, count: int, *, bad_last: bool = False) -> Path:
    given = {"run_id": RUN.id, "upstream": "http://up/v1/x", "started_at": STARTED}
    exchanges = [exchange(step=step, request_body=chat(step), **given) for step in range(count)]
    content = DUMPS[suffix](RUN, exchanges)
    if bad_last:  # the last exchange's status, in each format's spelling (nothing after it
        # holds "200": a start time from the clock did now and then, and was spoiled instead)
        head, _, tail = content.rpartition("200")
        content = head + "-200" + tail
    path = folder / f"run-{count}{suffix}"
    path.write_text(content)
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def opened(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Atomic]]:
    """Opens the store under test again and again (each open closed after the test)."""
    stores: list[Atomic] = []
    if request.param == "sqlite":
        location = str(tmp_path / "into.db")
        make: Callable[[], Atomic] = lambda: SqliteStore(location)  # noqa: E731
    else:
        url = request.getfixturevalue("postgres_url")
        make = lambda: PostgresStore(url)  # noqa: E731

    def opener() -> Atomic:
        stores.append(make())
        return stores[-1]

    yield opener
    for store in stores:
        store.close()


@pytest.mark.parametrize("suffix", list(DUMPS))
def test_a_file_that_fails_part_way_adds_nothing(opened, tmp_path, suffix):
    """Its last exchange (after several batches) refused: no run, no exchange, no blob."""
    store = opened()
    store.create_run(Run(id="01BEFORE", name="before"))
    path = written(tmp_path, suffix, COPY_BATCH * 2 + 7, bad_last=True)
    found = read_file_run(path)
    with pytest.raises(CassetteError, match="status -200 is not an HTTP status"):
        import_file(store, found)
    again = opened()
    assert [run.id for run in again.list_runs()] == ["01BEFORE"]
    if isinstance(again, SqliteStore):
        assert again.query("SELECT count(*) FROM exchanges") == [(0,)]
        assert again.query("SELECT count(*) FROM contents") == [(0,)]
    # the store goes on: the same file fixed imports whole, through the same store object
    fixed = written(tmp_path, suffix, COPY_BATCH * 2 + 7)
    steps = import_file(store, read_file_run(fixed))
    [_, run] = opened().list_runs()
    assert steps == COPY_BATCH * 2 + 7 == len(opened().exchanges(run.id))
    assert opened().exchanges(run.id)[-1].request_body == chat(steps - 1)


def test_a_write_refused_inside_the_transaction_undoes_itself_alone(opened):
    """`atomic` holds writes as savepoints: one that fails (a step taken) is gone, the rest
    commit when the transaction does."""
    store = opened()
    store.create_run(Run(id="01TAKEN", name="taken"))
    with store.atomic():
        store.add_exchanges([exchange(run_id="01TAKEN", step=0)])
        with pytest.raises(AlreadyRecorded):
            store.add_exchanges([exchange(run_id="01TAKEN", step=1), exchange(run_id="01TAKEN")])
        store.add_exchanges([exchange(run_id="01TAKEN", step=2)])
    assert [e.step for e in opened().exchanges("01TAKEN")] == [0, 2]


@pytest.mark.slow
@pytest.mark.parametrize("suffix", list(DUMPS))
def test_memory_does_not_grow_with_the_file(tmp_path, suffix):
    """Python's peak allocation importing 4,000 exchanges is that of 1,000 (before: 77 times
    the YAML file, 8 times a HAR)."""
    peaks = []
    for count in (1_000, 4_000):
        path = written(tmp_path, suffix, count)
        store = SqliteStore(tmp_path / f"into-{count}.db")
        gc.collect()
        tracemalloc.start()
        try:
            assert import_file(store, read_file_run(path)) == count
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
            store.close()
    small, large = peaks
    assert large < small * 1.3 + 2**20, f"{small:,} bytes at 1,000 exchanges, {large:,} at 4,000"
