"""The `ParkStore` contract: every store (memory, SQLite, PostgreSQL) parks, answers and wakes
alike, each transition made exactly once however many writers try it at once."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest

from forkpoint.cassettes.sqlite.parks import PARKS_FROM
from forkpoint.cassettes.sqlite.store import SCHEMA_VERSION, SqliteStore
from forkpoint.cassettes.store import Store, location_of
from forkpoint.errors import (
    AlreadyAnswered,
    AlreadyRecorded,
    CassetteError,
    ConfigError,
    NotParked,
    RunNotFound,
)
from forkpoint.models import (
    Ending,
    Exchange,
    Kind,
    Launch,
    Origin,
    Park,
    ParkState,
    Run,
    RunStatus,
    Snapshot,
    Summary,
    Waker,
)
from tests import builders
from tests.cassettes.old import old_cassette
from tests.cassettes.test_contract import conversation, exchange
from tests.cassettes.test_contract import store as store  # the fixture
from tests.pg import postgres_url as postgres_url  # the fixture

APPROVAL = Summary(Kind.TOOL, "generic")


def pending(run_id: str, step: int, **fields: object) -> Exchange:
    """A request parked before any answer: no status, no response."""
    values: dict[str, object] = {
        "route": "/approvals/refund", "request_body": b'{"amount": 900, "order": "A1"}',
        "fingerprint": f"fp{step}", "status": None, "response_headers": (),
        "response_body": b"", "summary": APPROVAL, "started_at": 1700000000.5,
        "upstream": "https://approvals.example.com",
    }  # fmt: skip
    return builders.exchange(run_id=run_id, step=step, **{**values, **fields})


def parked_run(
    store: Store, run_id: str = "r1", steps: int = 2, *, deadline: float | None = None,
    body: bytes | None = None,
) -> Park:  # fmt: skip
    """A run with `steps` exchanges, parked at the next step."""
    store.create_run(Run(run_id))
    store.add_exchanges(
        [exchange(step, conversation(step), run_id=run_id) for step in range(steps)]
    )
    request = pending(run_id, steps) if body is None else pending(run_id, steps, request_body=body)
    park = Park(request, "rule 'POST /approvals*'", deadline=deadline)
    store.park(park)
    return park


def answer_to(park: Park, body: bytes = b'{"approved": true}') -> Exchange:
    request = park.request
    return builders.exchange(
        run_id=request.run_id, step=request.step, method=request.method, route=request.route,
        request_headers=request.request_headers, request_body=request.request_body,
        fingerprint=request.fingerprint, status=200, response_body=body,
        origin=Origin.ANSWERED, summary=APPROVAL, started_at=request.started_at,
    )  # fmt: skip


# park


def test_a_park_round_trips_and_its_run_is_parked(store: Store):
    park = parked_run(store, body=conversation(2), deadline=1700003600.0)
    got = store.parked("r1")
    assert got == park
    assert got is not None and got.request.request_body == conversation(2)
    assert got.state is ParkState.PARKED and got.answered_by is None
    assert store.get_run("r1").status is RunStatus.PARKED
    assert store.find_run("r1").status is RunStatus.PARKED
    assert [r.status for r in store.list_runs()] == [RunStatus.PARKED]
    assert store.parked("other") is None


def test_a_step_parked_or_recorded_is_not_parked_again(store: Store):
    park = parked_run(store)
    with pytest.raises(AlreadyRecorded, match="step 2"):
        store.park(Park(pending("r1", 2, route="/other"), "again"))
    with pytest.raises(AlreadyRecorded, match="step 1"):
        store.park(Park(pending("r1", 1), "a step recorded"))
    with pytest.raises(RunNotFound):
        store.park(Park(pending("nope", 0), "no run"))
    assert store.parked("r1") == park


def test_a_parked_run_is_not_ended_by_the_proxy_whose_agent_was_stopped(store: Store):
    parked_run(store)
    store.end_run(Ending("r1", RunStatus.CRASHED, error="the agent was ended"))
    assert store.get_run("r1").status is RunStatus.PARKED


def test_parks_page_by_run_id_in_the_states_asked(store: Store):
    for run_id in ("r3", "r1", "r5", "r2", "r4"):
        parked_run(store, run_id, steps=1)
    store.create_run(Run("running"))
    assert [p.run_id for p in store.parks()] == ["r1", "r2", "r3", "r4", "r5"]
    assert [p.run_id for p in store.parks(limit=2)] == ["r1", "r2"]
    assert [p.run_id for p in store.parks(limit=2, after="r2")] == ["r3", "r4"]
    assert [p.run_id for p in store.parks(after="r4")] == ["r5"]
    assert store.parks(after="r5") == []
    store.answer(answer_to(store.parks()[2]), by="cli alice")
    assert [p.run_id for p in store.parks()] == ["r1", "r2", "r4", "r5"]
    assert [p.run_id for p in store.parks(states=("answered",))] == ["r3"]
    both = store.parks(states=("answered", "parked"), limit=3)
    assert [(p.run_id, p.state) for p in both] == [
        ("r1", "parked"), ("r2", "parked"), ("r3", "answered"),
    ]  # fmt: skip
    assert store.parks()[0] == store.parked("r1")  # whole: its request's body too
    with pytest.raises(ConfigError, match="no park state"):
        store.parks(states=("sleeping",))


# answer


def test_an_answer_is_the_step_exchange_and_taken_exactly_once(store: Store):
    park = parked_run(store)
    answered = store.answer(answer_to(park), by="cli alice@host")
    assert (answered.state, answered.answered_by) == (ParkState.ANSWERED, "cli alice@host")
    assert answered.answered_at is not None and answered.answered_at > time.time() - 60
    assert store.parked("r1") == answered
    step = store.exchanges("r1")[2]
    assert (step.step, step.response_body, step.origin) == (2, b'{"approved": true}', "answered")
    with pytest.raises(AlreadyAnswered, match="by cli alice@host") as refused:
        store.answer(answer_to(park, b'{"approved": false}'), by="http 10.0.0.7")
    assert (refused.value.by, refused.value.at) == ("cli alice@host", answered.answered_at)
    assert (refused.value.run_id, refused.value.step) == ("r1", 2)
    assert store.exchanges("r1")[2].response_body == b'{"approved": true}'
    assert store.parked("r1") == answered


def test_an_answer_for_a_run_unknown_or_not_parked_is_refused_and_nothing_stored(store: Store):
    with pytest.raises(RunNotFound):
        store.answer(answer_to(Park(pending("nope", 0), "x")), by="cli")
    store.create_run(Run("idle"))
    with pytest.raises(NotParked, match="run idle is running, not parked"):
        store.answer(answer_to(Park(pending("idle", 0), "x")), by="cli")
    assert store.exchanges("idle") == []
    parked_run(store, steps=2)
    with pytest.raises(NotParked, match="waits at step 2, not step 1"):
        store.answer(answer_to(Park(pending("r1", 1), "x")), by="cli")
    with pytest.raises(NotParked):
        store.mark_answered("idle", 0, by="upstream")
    assert store.step_count("r1") == 2 and store.parked("r1") is not None


def test_an_upstream_answer_recorded_as_any_other_marks_the_park_answered(store: Store):
    park = parked_run(store)
    with pytest.raises(CassetteError, match="no exchange"):
        store.mark_answered("r1", 2, by="upstream")
    upstream = answer_to(park, b'{"from": "upstream"}')
    store.add_exchanges([upstream])
    with pytest.raises(AlreadyAnswered, match="upstream's answer"):
        store.answer(answer_to(park, b'{"from": "a person"}'), by="cli bob")
    assert store.parked("r1") is not None and store.parked("r1").state is ParkState.PARKED  # type: ignore[union-attr]
    marked = store.mark_answered("r1", 2, by="upstream")
    assert (marked.state, marked.answered_by) == (ParkState.ANSWERED, "upstream")
    with pytest.raises(AlreadyAnswered, match="by upstream"):
        store.mark_answered("r1", 2, by="upstream")
    assert store.exchanges("r1")[2].response_body == b'{"from": "upstream"}'


def test_answers_at_once_from_threads_one_wins(store: Store):
    park = parked_run(store)
    results = at_once(8, lambda n: store.answer(answer_to(park, b'{"n": %d}' % n), by=f"t{n}"))
    won = [r for r in results if isinstance(r, Park)]
    assert len(won) == 1, results
    assert all(isinstance(r, AlreadyAnswered) and r.by == won[0].answered_by
               for r in results if r is not won[0])  # fmt: skip
    n = int(won[0].answered_by[1:])  # type: ignore[index]
    assert store.exchanges("r1")[2].response_body == b'{"n": %d}' % n


# wake


def test_one_waker_of_many_claims_the_wake_and_the_run_runs_again(store: Store):
    park = parked_run(store)
    assert not store.claim_wake("r1", 2, by="early")  # not answered yet
    store.answer(answer_to(park), by="cli")
    claims = at_once(8, lambda n: store.claim_wake("r1", 2, by=f"waker {n}"))
    assert sorted(claims, key=str) == [False] * 7 + [True]
    assert store.parked("r1").state is ParkState.WAKING  # type: ignore[union-attr]
    assert store.parks(states=("waking",))[0].run_id == "r1"
    assert store.get_run("r1").status is RunStatus.PARKED
    store.woke("r1", 2)
    assert store.parked("r1") is None
    assert store.parks(states=("woken",))[0].woken_at is not None
    run = store.get_run("r1")
    assert (run.status, run.ended_at) == (RunStatus.RUNNING, None)
    assert not store.claim_wake("r1", 2, by="late")
    with pytest.raises(NotParked):
        store.woke("r1", 2)
    with pytest.raises(AlreadyAnswered):  # woken long since: still the first answer's
        store.answer(answer_to(park), by="late")


def test_a_claim_past_its_lease_whose_run_went_nowhere_is_taken_again_by_one(store: Store):
    """A waker killed between its claim and the wake left the park `waking` for ever: nothing
    took it again (issue 26's kill -9 between the answer and the wake)."""
    for run_id in ("lost", "went on", "pulled"):
        store.answer(answer_to(parked_run(store, run_id)), by="cli")
        assert store.claim_wake(run_id, 2, by="a waker killed -9")
    assert not store.claim_wake("lost", 2, by="too soon", lease=3600)  # still the first's
    store.add_exchanges([exchange(3, conversation(3), run_id="went on")])  # its agent got on
    store.add_snapshot(Snapshot("pulled", 3, "agent", "application/json", b"{}"))
    time.sleep(0.3)
    claims = at_once(4, lambda n: store.claim_wake("lost", 2, by=f"waker {n}", lease=0.2))
    assert sorted(claims, key=str) == [False, False, False, True]
    assert not store.claim_wake("went on", 2, by="late", lease=0.2)
    assert not store.claim_wake("pulled", 2, by="late", lease=0.2)
    store.woke("lost", 2)
    assert store.parked("lost") is None
    assert not store.claim_wake("lost", 2, by="after the wake", lease=0)


def test_a_runs_newest_park_is_read_whatever_its_state(store: Store):
    for run_id in ("r0", "r1", "r10", "r2"):  # neighbours by id: r1's page holds them too
        parked_run(store, run_id)
    assert store.last_park("r1") == store.parked("r1")
    store.answer(answer_to(store.parked("r1")), by="cli")  # type: ignore[arg-type]
    assert store.claim_wake("r1", 2, by="waker")
    store.woke("r1", 2)
    woken = store.last_park("r1")
    assert woken is not None and (woken.step, woken.state) == (2, ParkState.WOKEN)
    assert woken.answered_by == "cli" and store.parked("r1") is None
    store.add_exchanges([exchange(3, conversation(3), run_id="r1")])
    again = Park(pending("r1", 4), "rule 'POST /approvals*'")
    store.park(again)
    assert store.last_park("r1") == again
    assert store.last_park("never parked") is None


def test_a_park_added_as_another_store_held_it_keeps_its_state(store: Store):
    """`copy_runs` carries parks: each as it was (woken, answered, parked), the run's status
    as copied with it; a step parked already is never rewritten."""
    parked_run(store, "src")
    first = store.parked("src")
    assert first is not None
    store.answer(answer_to(first), by="cli alice")
    store.claim_wake("src", 2, by="waker")
    store.woke("src", 2)
    store.add_exchanges([exchange(3, conversation(3), run_id="src")])
    store.park(Park(pending("src", 4), "upstream api.x.com after 30s", deadline=99.5))
    held = store.run_parks("src")
    assert [(p.step, p.state) for p in held] == [(2, ParkState.WOKEN), (4, ParkState.PARKED)]
    store.create_run(Run("copy", status=RunStatus.FINISHED))
    store.add_exchanges([exchange(2, conversation(2), run_id="copy")])  # the answer, copied
    for park in held:
        request = dataclasses.replace(park.request, run_id="copy")
        store.add_park(dataclasses.replace(park, request=request))
    copied = store.run_parks("copy")
    assert [(p.step, p.state, p.answered_by, p.deadline, p.waits_on) for p in copied] == [
        (p.step, p.state, p.answered_by, p.deadline, p.waits_on) for p in held
    ]
    assert copied[1].request.request_body == held[1].request.request_body
    assert store.get_run("copy").status is RunStatus.FINISHED  # as copied, not re-marked
    assert store.parked("copy") == copied[1] and store.last_park("copy") == copied[1]
    with pytest.raises(AlreadyRecorded):
        store.add_park(copied[0])
    with pytest.raises(RunNotFound):
        store.add_park(dataclasses.replace(held[1], request=pending("nowhere", 4)))
    assert store.run_parks("never parked") == []


def test_parks_past_their_deadline_are_due_soonest_first(store: Store):
    parked_run(store, "late", deadline=300.0)
    parked_run(store, "soon", deadline=100.0)
    parked_run(store, "never")
    parked_run(store, "later", deadline=900.0)
    parked_run(store, "done", deadline=50.0)
    store.answer(answer_to(store.parked("done")), by="cli")  # type: ignore[arg-type]
    assert [p.run_id for p in store.due(300.0)] == ["soon", "late"]
    assert [p.run_id for p in store.due(1000.0, limit=2)] == ["soon", "late"]
    assert store.due(99.0) == []


def test_a_launch_round_trips_exactly_and_a_resume_replaces_it(store: Store):
    store.create_run(Run("r1"))
    assert store.launch("r1") is None
    launch = Launch(
        "r1", ("python", "agent.py", "--name", "é ✓"), "/work/agent",
        env=(("PATH", "/usr/bin:/bin"), ("OPENAI_BASE_URL", "http://127.0.0.1:8765/v1"),
             ("EMPTY", ""), ("QUOTE", 'a "b" \\ c\n')),
        needs=("OPENAI_API_KEY",), options={"upstream": "https://api.openai.com", "park": [
            "POST /approvals*"], "after": 30.5, "none": None},
        waker=Waker.HOOK, on_wake=("kubectl", "create", "job"),
    )  # fmt: skip
    store.set_launch(launch)
    assert store.launch("r1") == launch
    again = Launch("r1", ("python", "agent.py"), "/elsewhere")
    store.set_launch(again)
    assert store.launch("r1") == again and store.launch("r1").waker is Waker.LOCAL  # type: ignore[union-attr]
    with pytest.raises(RunNotFound):
        store.set_launch(Launch("nope", ("x",), "/"))


def test_a_waiter_is_told_of_answers_once_and_of_earlier_ones_first(store: Store):
    first = parked_run(store, "r1")
    second = parked_run(store, "r2")
    store.answer(answer_to(first), by="cli")  # before anyone waits
    assert store.wait_for_answers(0.5) == ["r1"]
    began = time.monotonic()
    assert store.wait_for_answers(0.2) == []  # told already
    assert 0.15 < time.monotonic() - began < 2
    timer = threading.Timer(0.2, lambda: store.answer(answer_to(second), by="http"))
    timer.start()
    began = time.monotonic()
    assert store.wait_for_answers(10) == ["r2"]
    assert time.monotonic() - began < 2
    timer.join()


def at_once[T](count: int, call: Callable[[int], T]) -> list[T | Exception]:
    """`call(n)` on `count` threads let go together; each result, or the error raised."""
    gate = threading.Barrier(count)

    def one(n: int) -> T | Exception:
        gate.wait()
        try:
            return call(n)
        except Exception as error:
            return error

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


# across connections: two stores on one file or database, as two processes or replicas hold it


@pytest.fixture(params=["sqlite", "postgres"])
def two(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two stores opened on the same location, each with its own connections."""
    if request.param == "postgres":
        from forkpoint.cassettes.postgres import PostgresStore

        url = request.getfixturevalue("postgres_url")
        pair: tuple[Store, Store] = (PostgresStore(url), PostgresStore(url))
    else:
        pair = (SqliteStore(tmp_path / "two.db"), SqliteStore(tmp_path / "two.db"))
    yield pair
    for opened in pair:
        opened.close()


def test_two_connections_answering_at_once_one_wins_every_time(two: tuple[Store, Store]):
    a, b = two

    def reply(n: int, park: Park) -> Park:
        return (a, b)[n].answer(answer_to(park, b'{"n": %d}' % n), by=f"replica {n}")

    for attempt in range(10):
        park = parked_run(a, f"r{attempt}")
        results = at_once(2, partial(reply, park=park))
        won = [r for r in results if isinstance(r, Park)]
        lost = [r for r in results if isinstance(r, AlreadyAnswered)]
        assert len(won) == len(lost) == 1, results
        assert lost[0].by == won[0].answered_by
        n = int(str(won[0].answered_by).split()[-1])
        assert [e.response_body for e in b.exchanges(f"r{attempt}")][-1] == b'{"n": %d}' % n


def test_two_connections_claiming_a_wake_at_once_one_takes_it(two: tuple[Store, Store]):
    a, b = two

    def claim(n: int, run_id: str) -> bool:
        return (a, b)[n % 2].claim_wake(run_id, 2, by=f"waker {n}")

    for attempt in range(10):
        park = parked_run(a, f"r{attempt}")
        b.answer(answer_to(park), by="cli")
        claims = at_once(4, partial(claim, run_id=park.run_id))
        assert sorted(claims, key=str) == [False, False, False, True]


def test_a_waiter_on_another_connection_is_told_of_an_answer_at_once(two: tuple[Store, Store]):
    a, b = two
    assert b.wait_for_answers(0.1) == []  # listening from here on
    for attempt in range(3):
        park = parked_run(a, f"r{attempt}")
        timer = threading.Timer(0.2, lambda: a.answer(answer_to(park), by="replica a"))  # noqa: B023
        began = time.monotonic()
        timer.start()
        assert b.wait_for_answers(10) == [f"r{attempt}"]
        assert time.monotonic() - began < 0.2 + 0.5
        timer.join()


def test_a_postgresql_waiter_is_told_by_notify_not_by_polling(postgres_url: str):
    import psycopg

    from forkpoint.cassettes.postgres import PostgresStore

    waiter = PostgresStore(postgres_url)
    try:
        assert waiter.wait_for_answers(0.05) == []
        channel = waiter._answers_channel()  # the store's own: another schema's is another
        with psycopg.connect(postgres_url, autocommit=True) as other:
            threading.Timer(0.2, lambda: other.execute(
                "SELECT pg_notify(%s, 'told')", (channel,))).start()  # fmt: skip
            began = time.monotonic()
            assert waiter.wait_for_answers(10) == ["told"]  # no park was answered: a notify
            assert time.monotonic() - began < 1.0
            other.execute("SELECT pg_notify(%s, 'elsewhere')", (channel + "x",))
            assert waiter.wait_for_answers(0.3) == []
    finally:
        waiter.close()


# schema versions


def test_a_cassette_of_the_version_before_parks_is_read_as_it_is_and_migrated(tmp_path: Path):
    before = PARKS_FROM - 1
    path = old_cassette(tmp_path / f"v{before}.db", before, {
        run_id: [exchange(step, conversation(step), run_id=run_id) for step in range(3)]
        for run_id in ("a", "b", "c")
    })  # fmt: skip
    reader = SqliteStore(path, read_only=True)
    assert reader.schema_version == before
    assert (reader.parks(), reader.parked("a"), reader.launch("a"), reader.due(1e12)) == (
        [], None, None, [],
    )  # fmt: skip
    assert reader.wait_for_answers(0.01) == []
    reader.close()
    writer = SqliteStore(path)
    assert writer.schema_version == SCHEMA_VERSION
    assert [r.id for r in writer.list_runs()] == ["a", "b", "c"]
    assert [len(writer.exchanges(r)) for r in "abc"] == [3, 3, 3]
    writer.park(Park(pending("b", 3), "rule"))
    assert [p.run_id for p in writer.parks()] == ["b"]
    writer.close()


def test_a_cassette_whose_claims_had_no_time_is_read_and_migrated(tmp_path: Path):
    """Version 12 kept who claimed a wake, not when: a reader reads its parks as they are; a
    writer adds `claimed_at`, and a park left `waking` then is taken again at once."""
    path = tmp_path / "v12.db"
    old = SqliteStore(path)
    for run_id in ("stuck", "waiting"):
        parked_run(old, run_id)
    old.answer(answer_to(old.parked("stuck")), by="cli")  # type: ignore[arg-type]
    old.close()
    with closing(sqlite3.connect(path)) as conn:  # as forkpoint 12 left it: claimed, no time
        conn.executescript(
            "UPDATE parks SET state = 'waking', claimed_by = 'serve' WHERE run_id = 'stuck';"
            "ALTER TABLE parks DROP COLUMN claimed_at; PRAGMA user_version=12;"
        )
    reader = SqliteStore(path, read_only=True)
    assert reader.schema_version == 12
    assert [(p.run_id, p.state) for p in reader.parks(states=("parked", "waking"))] == [
        ("stuck", "waking"), ("waiting", "parked"),
    ]  # fmt: skip
    reader.close()
    writer = SqliteStore(path)
    assert writer.schema_version == SCHEMA_VERSION
    assert writer.claim_wake("stuck", 2, by="serve, again")
    assert not writer.claim_wake("stuck", 2, by="one more")
    writer.close()


def test_a_postgresql_store_of_the_version_before_parks_is_migrated(postgres_url: str):
    import psycopg

    from forkpoint.cassettes.postgres import PostgresStore
    from forkpoint.cassettes.postgres.parks import PARKS_FROM as PG_PARKS_FROM
    from forkpoint.cassettes.postgres.schema import SCHEMA_VERSION as PG_VERSION

    old = PostgresStore(postgres_url)
    for run_id in ("a", "b"):
        old.create_run(Run(run_id))
        old.add_exchanges([exchange(step, run_id=run_id) for step in range(2)])
    old.close()
    with psycopg.connect(postgres_url) as conn:  # as forkpoint left it before parks
        conn.execute("DROP TABLE parks, launches")
        conn.execute("UPDATE forkpoint_schema SET version = %s", (PG_PARKS_FROM - 1,))
    reader = PostgresStore(postgres_url, read_only=True)
    assert (reader.schema_version, reader.parks(), reader.parked("a")) == (
        PG_PARKS_FROM - 1, [], None,
    )  # fmt: skip
    reader.close()
    writer = PostgresStore(postgres_url)
    assert writer.schema_version == PG_VERSION
    assert [(r.id, writer.step_count(r.id)) for r in writer.list_runs()] == [("a", 2), ("b", 2)]
    writer.park(Park(pending("a", 2), "rule"))
    assert writer.get_run("a").status is RunStatus.PARKED
    writer.close()


def test_a_reader_reads_parks_and_writes_none(two: tuple[Store, Store]):
    writer, _ = two
    park = parked_run(writer)
    writer.set_launch(Launch("r1", ("agent",), "/"))
    location = str(location_of(writer))
    if location.startswith("postgresql"):
        from forkpoint.cassettes.postgres import PostgresStore

        reader: Store = PostgresStore(location, read_only=True)
    else:
        reader = SqliteStore(location, read_only=True)
    try:
        assert reader.parks() == [park] and reader.launch("r1") == Launch("r1", ("agent",), "/")
        for write in (
            lambda: reader.answer(answer_to(park), by="reader"),
            lambda: reader.claim_wake("r1", 2, by="reader"),
            lambda: reader.set_launch(Launch("r1", ("other",), "/")),
        ):
            with pytest.raises(CassetteError, match="reading only"):
                write()
    finally:
        reader.close()
    assert writer.parked("r1") == park
