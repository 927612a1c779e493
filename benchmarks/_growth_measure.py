"""growth.py's measurements of one recorded run, made with the forkpoint on PYTHONPATH (this
checkout's, or another's for a before/after): prints one JSON object.

    python benchmarks/_growth_measure.py CASSETTE RUN [--postgres URL] [--load]

- `wire`: the run's request and response bodies and header lines (as recorded) in bytes;
- `sqlite`: the cassette file's size once its WAL is checkpointed (as `record` left it);
- `btrees`: where its bytes go, per table and index (SQLite's dbstat: pages, payload, unused
  bytes), the page size and the free pages;
- `empty`: an empty cassette's size (one page per table and index);
- `postgres`: the run copied into a fresh PostgreSQL schema, its tables' total size;
- `vcr`: the run exported as vcrpy YAML (`forkpoint export --format vcr`);
- `write_us`: the writer's CPU time per exchange, the run copied into a new cassette 64
  exchanges to a transaction (as the recorder commits under load), best of 5;
- `load_ms`: with --load, loading the run bodies and all, as a replay does (best of 3).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

from forkpoint.cassettes.formats import text
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store
from forkpoint.cassettes.transfer import joined
from forkpoint.models import Exchange, Run

BATCH = 64


def head_bytes(exchange: Exchange) -> int:
    lines = [f"{exchange.method} {exchange.route} HTTP/1.1", f"HTTP/1.1 {exchange.status} OK"]
    lines += [f"{name}: {value}" for name, value in exchange.request_headers]
    lines += [f"{name}: {value}" for name, value in exchange.response_headers]
    return sum(len(line.encode()) + 2 for line in lines) + 4


def write(store: Store, run: Run, recorded: list[Exchange]) -> float:
    store.create_run(run)
    started = time.process_time()  # CPU time: on a shared machine, wall time is others' too
    for start in range(0, len(recorded), BATCH):
        store.add_exchanges(recorded[start : start + BATCH])
    return time.process_time() - started


def checkpointed_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def btrees(path: Path) -> dict[str, object]:
    """Per table and index: [pages, bytes, payload, unused bytes], largest first (dbstat)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT name, count(*), sum(pgsize), sum(payload), sum(unused) FROM dbstat "
            "GROUP BY name ORDER BY sum(pgsize) DESC, name"
        ).fetchall()
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return {"page_size": page, "free_pages": free, "btrees": [list(r) for r in rows]}


def postgres_size(url: str, run: Run, recorded: list[Exchange]) -> int:
    import psycopg

    from forkpoint.cassettes.postgres import PostgresStore

    schema = f"growth_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            store = PostgresStore(f"{url}{'&' if '?' in url else '?'}options="
                                  f"{quote(f'-csearch_path={schema}')}")  # fmt: skip
            write(store, run, recorded)
            store.close()
            admin.execute("VACUUM")
            row = admin.execute(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            ).fetchone()
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    return int(row[0]) if row and row[0] else 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cassette", type=Path)
    parser.add_argument("run")
    parser.add_argument("--postgres")
    parser.add_argument("--load", action="store_true")
    args = parser.parse_args()
    found: dict[str, object] = {"sqlite": checkpointed_size(args.cassette)}
    found.update(btrees(args.cassette))
    store = SqliteStore(args.cassette, read_only=True)
    run = store.find_run(args.run)
    recorded = store.exchanges(run.id)
    found["steps"] = len(recorded)
    found["wire"] = sum(len(e.request_body) + len(e.response_body) + head_bytes(e)
                        for e in recorded)  # fmt: skip
    found["vcr"] = len(text.dumps(run, joined(store, recorded)).encode())
    if args.load:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            loaded = store.exchanges(run.id)
            best = min(best, time.perf_counter() - started)
        assert [e.request_body for e in loaded] == [e.request_body for e in recorded]
        found["load_ms"] = best * 1000
    store.close()
    with tempfile.TemporaryDirectory(prefix="forkpoint-growth-") as tmp:
        empty = SqliteStore(Path(tmp) / "empty.db")
        empty.close()
        found["empty"] = checkpointed_size(Path(tmp) / "empty.db")
        times = []
        for attempt in range(5):
            copy = SqliteStore(Path(tmp) / f"copy{attempt}.db")
            times.append(write(copy, run, recorded))
            copy.close()
        found["write_us"] = min(times) / len(recorded) * 1e6
    if args.postgres:
        found["postgres"] = postgres_size(args.postgres, run, recorded)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
