"""Benchmark: a million parked runs in one store (issue 26): what each costs to keep, and how
fast the store pages, answers and wakes them.

For each size, a fresh store (a schema of its own in PostgreSQL, a file for SQLite) is filled
in bulk (COPY / executemany in large transactions: it is a benchmark) with N runs of `--steps`
exchanges each, every run parked at its next step on an approval request (a chat request of
the run's own turns, its last message naming the run: one new blob per park, as a real one
adds) with its launch (command, cwd, ten environment variables, one secret's name, options);
one run in ten has a deadline. Rows are the store's own (`park_rows`, `rows`, `manifests`).
Printed per size:

- bytes per parked run beyond its exchanges and snapshot: the `parks` and `launches` tables
  with their indexes (pg_total_relation_size; SQLite's dbstat), over N; and apart, the blob
  its pending request's body adds (a body, stored as any other body is);
- the first page of `parks(states=('parked',), limit=50)` (what `runs --status parked`
  reads), and a page deep in the list (`after=`), best and median of 7;
- `due(now, limit=50)`;
- answering a run, claiming its wake, and `woke`, for 5 runs (best and median), after a first
  write timed apart (SQLite's waits for its check of the whole file, `sqlite/check.py`); and,
  PostgreSQL, the time from an answer's call to a waiter on another connection returning it
  (LISTEN/NOTIFY).

    .venv/bin/python benchmarks/park_store.py [--runs 10000,100000,1000000]
        [--sqlite-runs 10000,100000] [--steps 3] [--postgres URL | --no-postgres]

Targets: under 2 KB a parked run; the first page under 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.park_rows import PARK_COLUMNS, launch_values, park_values
from forkpoint.cassettes.rows import (
    EXCHANGE_COLUMNS,
    RUN_COLUMNS,
    exchange_rows,
    named,
    run_values,
)
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store
from forkpoint.models import Exchange, Kind, Launch, Origin, Park, Run, RunStatus, Summary

DEFAULT_URL = os.environ.get(
    "FORKPOINT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
SYSTEM = "You are a support agent for an online shop. Refunds above 500 need approval. " * 4
BATCH = 20_000  # rows per transaction of the bulk fill
PAGE = 50
WAKES = 5  # runs answered, claimed and woken one after another
ENV = (
    *((f"AGENT_SETTING_{i}", f"value-{i}-" + "x" * 20) for i in range(8)),
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("OPENAI_BASE_URL", "http://127.0.0.1:8765/v1"),
)


def turns(steps: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(steps):
        messages.append({"role": "user", "content": f"Turn {turn}: order A{turn:05d}. " * 12})
        messages.append({"role": "assistant", "content": f"Looked at it ({turn}). " * 12})
    return messages


def template(steps: int) -> list[Exchange]:
    """The exchanges every run holds (one run's; the others differ in their run id only)."""
    exchanges = []
    for step in range(steps):
        body = json.dumps({"messages": turns(step + 1)[:-1], "model": "gpt-4o"}).encode()
        exchanges.append(
            Exchange(
                run_id="T", step=step, method="POST", route="/v1/chat/completions",
                request_headers=(("content-type", "application/json"),), request_body=body,
                fingerprint=f"fp{step}", status=200,
                response_headers=(("content-type", "application/json"),),
                response_body=b'{"choices": [{"message": {"content": "ok"}}]}',
                started_at=1700000000.0 + step, duration_ms=800.0,
                summary=Summary(Kind.LLM, "openai_chat", "gpt-4o"),
            )
        )  # fmt: skip
    return exchanges


def pending(run_id: str, steps: int) -> Exchange:
    question = f"Refund 900 for run {run_id}: approve? " + "why " * 20
    messages = [*turns(steps), {"role": "user", "content": question}]
    body = json.dumps({"messages": messages, "model": "gpt-4o"}).encode()
    return Exchange(
        run_id=run_id, step=steps, method="POST", route="/approvals/refund",
        request_headers=(("content-type", "application/json"),), request_body=body,
        fingerprint=f"approval-{run_id}", status=None, response_body=b"",
        started_at=1700000100.0, summary=Summary(Kind.TOOL, "generic"),
        upstream="https://approvals.example.com",
    )  # fmt: skip


def launch(run_id: str) -> Launch:
    return Launch(
        run_id, ("python", "agent.py", "--ticket", run_id[-6:]), "/srv/agents/support",
        env=ENV, needs=("OPENAI_API_KEY",),
        options={"upstream": "https://api.openai.com", "park": ["POST /approvals*"]},
    )  # fmt: skip


def run_ids(count: int) -> list[str]:
    return [f"01J{index:023d}" for index in range(count)]


# table -> rows, blobs first (`manifests.BlobRow`s), the others' manifests for the store to
# name (`rows.named`: by hash in PostgreSQL, by number in SQLite)
Batch = dict[str, list[tuple[Any, ...]]]


def fill(count: int, steps: int, write: Callable[[Batch], None]) -> float:
    """Every row of `count` parked runs through `write`, a batch a transaction; seconds."""
    began = time.perf_counter()
    packer = Packer()
    rows = exchange_rows(template(steps), packer, lambda _: False)
    write({"blobs": list(rows[0].values())})
    exchange_template = [values for values, _ in rows[1]]
    ids = run_ids(count)
    for start in range(0, count, BATCH):
        batch = ids[start : start + BATCH]
        runs, exchanges, parks, launches, added = [], [], [], [], {}
        for index, run_id in enumerate(batch):
            runs.append(run_values(Run(run_id, status=RunStatus.PARKED, created_at=1.7e9)))
            exchanges += [(run_id, *values[1:]) for values in exchange_template]
            request = pending(run_id, steps)
            manifest = packer.pack(request.request_body, None, added, lambda _: False)
            deadline = 1.7e9 + start + index if (start + index) % 10 == 0 else None
            park = Park(request, "rule 'POST /approvals*'", parked_at=1.7e9, deadline=deadline)
            parks.append(park_values(park, manifest))
            launches.append(launch_values(launch(run_id)))
        write({"blobs": list(added.values()), "runs": runs, "exchanges": exchanges,
               "parks": parks, "launches": launches})  # fmt: skip
    return time.perf_counter() - began


COLUMNS = {"runs": RUN_COLUMNS, "exchanges": EXCHANGE_COLUMNS, "parks": PARK_COLUMNS}


def timed(call: Callable[[], object], times: int = 7) -> tuple[float, float]:
    """Best and median milliseconds of `times` calls."""
    spent = []
    for _ in range(times):
        began = time.perf_counter()
        call()
        spent.append((time.perf_counter() - began) * 1000)
    return min(spent), statistics.median(spent)


def queries(store: Store, count: int, steps: int) -> dict[str, Any]:
    """The reads and the transitions, on a filled store."""
    began = time.perf_counter()
    store.set_launch(launch(run_ids(1)[0]))  # a first write: SQLite's waits for its file check
    out: dict[str, Any] = {"first write ms": (time.perf_counter() - began) * 1000}
    first = store.parks(states=("parked",), limit=PAGE)
    assert len(first) == PAGE and first[0].run_id == run_ids(1)[0], first[:1]
    deep = run_ids(count)[count * 9 // 10]
    out |= {
        "first page ms": timed(lambda: store.parks(states=("parked",), limit=PAGE)),
        "deep page ms": timed(lambda: store.parks(states=("parked",), limit=PAGE, after=deep)),
        "due ms": timed(lambda: store.due(1.7e9 + count, limit=PAGE)),
    }
    spent: dict[str, list[float]] = {"answer ms": [], "claim_wake ms": [], "woke ms": []}
    for index in range(WAKES):  # runs spread over the list, none the notify's
        target = run_ids(count)[count * (2 * index + 1) // (2 * WAKES)]
        park = store.parked(target)
        assert park is not None
        answer = Exchange(
            run_id=target, step=steps, method="POST", route=park.request.route,
            request_headers=park.request.request_headers, request_body=park.request.request_body,
            fingerprint=park.request.fingerprint, status=200, response_body=b'{"approved": true}',
            origin=Origin.ANSWERED, summary=Summary(Kind.TOOL, "generic"),
        )  # fmt: skip
        began = time.perf_counter()
        store.answer(answer, by="bench")
        answered = time.perf_counter()
        assert store.claim_wake(target, steps, by="bench")
        claimed = time.perf_counter()
        store.woke(target, steps)
        woke = time.perf_counter()
        spent["answer ms"].append((answered - began) * 1000)
        spent["claim_wake ms"].append((claimed - answered) * 1000)
        spent["woke ms"].append((woke - claimed) * 1000)
    out |= {name: (min(values), statistics.median(values)) for name, values in spent.items()}
    return out


def notify_latency(url: str, store: Store, count: int, steps: int) -> float:
    """Milliseconds from an answer's call to a waiter on another connection returning it (the
    answer's own transaction included: the waiter hears of it as it commits)."""
    from forkpoint.cassettes.postgres import PostgresStore

    waiter = PostgresStore(url)
    try:
        waiter.wait_for_answers(0.01)  # listening, and told of the answers before
        target = run_ids(count)[count // 3 + 1]
        park = store.parked(target)
        assert park is not None
        got: list[float] = []
        thread = threading.Thread(target=lambda: got.append(_waited(waiter)))
        thread.start()
        time.sleep(0.2)
        answer = Exchange(
            run_id=target, step=steps, method="POST", route="/approvals/refund",
            request_headers=(), request_body=b"{}", fingerprint="f", status=200,
            origin=Origin.ANSWERED,
        )  # fmt: skip
        began = time.perf_counter()
        store.answer(answer, by="bench")
        thread.join()
        return (got[0] - began) * 1000
    finally:
        waiter.close()


def _waited(waiter: Store) -> float:
    while not waiter.wait_for_answers(10):
        pass
    return time.perf_counter()


# PostgreSQL


def in_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


def postgres(url: str, count: int, steps: int) -> dict[str, Any]:
    from forkpoint.cassettes.postgres import PostgresStore

    schema = f"bench_parks_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    where = in_schema(url, schema)
    try:
        PostgresStore(where).close()  # the schema's tables
        conn = psycopg.connect(where)

        def write(batch: Batch) -> None:
            """One transaction; again on a new connection if the server went away (the
            machine's other tests restart it)."""
            nonlocal conn
            for attempt in range(30):
                try:
                    with conn.transaction(), conn.cursor() as cursor:
                        for table, rows in batch.items():
                            if table == "blobs":
                                cursor.executemany(
                                    "INSERT INTO blobs VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                                    [row[:4] for row in rows],
                                )
                                continue
                            columns = COLUMNS.get(table)
                            listed = f" ({', '.join(columns)})" if columns else ""
                            with cursor.copy(f"COPY {table}{listed} FROM STDIN") as copy:  # type: ignore[arg-type]
                                for row in rows:
                                    copy.write_row(named(row))
                    return
                except psycopg.OperationalError:
                    print(f"  (the server went away: batch again, try {attempt + 2})")
                    time.sleep(2)
                    conn = _connect(where)
            raise SystemExit("the PostgreSQL server stayed away")

        try:
            filled = fill(count, steps, write)
            conn.execute("ANALYZE")
            conn.commit()
            sizes = dict(
                conn.execute(
                    "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class "
                    "WHERE relnamespace = %s::regnamespace AND relkind = 'r'",
                    (schema,),
                ).fetchall()
            )
            plan = conn.execute(
                "EXPLAIN SELECT * FROM parks WHERE state = 'parked' ORDER BY run_id, step LIMIT 50"
            ).fetchall()
        finally:
            conn.close()
        store = PostgresStore(where)
        try:
            out = {"fill s": filled, **queries(store, count, steps)}
            out["answer to waiter ms"] = notify_latency(where, store, count, steps)
        finally:
            store.close()
        out["park+launch B/run"] = (sizes["parks"] + sizes["launches"]) / count
        out["of which parks B/run"] = sizes["parks"] / count
        out["plan"] = " / ".join(line.strip() for (line,) in plan)
        return out
    finally:
        with _connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _connect(url: str, *, autocommit: bool = False) -> psycopg.Connection:
    """A connection, waiting up to a minute for a server being restarted."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return psycopg.connect(url, autocommit=autocommit, connect_timeout=5)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


# SQLite


def sqlite(count: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "parks.db"
        SqliteStore(path).close()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")

        numbers: dict[str, int] = {}  # the blobs' numbers in `contents`

        def write(batch: Batch) -> None:
            conn.execute("BEGIN")
            for table, rows in batch.items():
                if table == "blobs":
                    for digest, size, codec, data, _ in rows:
                        if digest not in numbers:
                            values = (bytes.fromhex(digest), size, codec, data)
                            numbers[digest] = conn.execute(
                                "INSERT INTO contents (hash, size, codec, data) VALUES "
                                "(?,?,?,?) RETURNING id", values,
                            ).fetchone()[0]  # fmt: skip
                    continue
                columns = COLUMNS.get(table)
                listed = f" ({', '.join(columns)})" if columns else ""
                marks = ",".join("?" * len(rows[0]))
                conn.executemany(f"INSERT INTO {table}{listed} VALUES ({marks})",
                                 [named(row, numbers.__getitem__) for row in rows])  # fmt: skip
            conn.execute("COMMIT")

        filled = fill(count, steps, write)
        conn.execute("ANALYZE")
        sizes = dict(conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
        conn.close()
        park_bytes = sum(v for k, v in sizes.items() if k == "parks" or k.startswith("parks_")
                         or k == "sqlite_autoindex_parks_1")  # fmt: skip
        launch_bytes = sum(v for k, v in sizes.items() if "launches" in k)
        store = SqliteStore(path)
        try:
            out = {"fill s": filled, **queries(store, count, steps)}
        finally:
            store.close()
        out["park+launch B/run"] = (park_bytes + launch_bytes) / count
        out["of which parks B/run"] = park_bytes / count
        out["file MB"] = path.stat().st_size / 1e6
        return out


def report(kind: str, count: int, found: dict[str, Any]) -> None:
    print(f"\n{kind}, {count:,} parked runs (filled in {found.pop('fill s'):.0f} s)")
    for name, value in found.items():
        if isinstance(value, tuple):
            print(f"  {name:<24} best {value[0]:8.2f}  median {value[1]:8.2f}")
        elif isinstance(value, float):
            print(f"  {name:<24} {value:10.2f}")
        else:
            print(f"  {name:<24} {value}")
    per_run = found["park+launch B/run"]
    page = found["first page ms"][1]
    print(f"  targets: {per_run:.0f} B < 2048 B: {'met' if per_run < 2048 else 'MISSED'}; "
          f"first page {page:.1f} ms < 300 ms: {'met' if page < 300 else 'MISSED'}")  # fmt: skip


def sizes(text: str) -> Iterator[int]:
    return (int(part.replace("_", "")) for part in text.split(",") if part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="1000000", help="PostgreSQL sizes, comma-separated")
    parser.add_argument("--sqlite-runs", default="100000", help="SQLite sizes ('' for none)")
    parser.add_argument("--steps", type=int, default=3, help="exchanges per run")
    parser.add_argument("--postgres", default=DEFAULT_URL)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores (shared with other work: figures are upper bounds)")
    for count in sizes(args.sqlite_runs):
        report("SQLite", count, sqlite(count, args.steps))
    if not args.no_postgres:
        for count in sizes(args.runs):
            report("PostgreSQL", count, postgres(args.postgres, count, args.steps))


if __name__ == "__main__":
    main()
