"""Benchmark: how a cassette grows with a conversation's length (issue 16.1).

A chat run of N turns, as an agent sends it: turn k's request resends the system prompt and
the k-1 earlier turns, then asks one more question; each answer is a chat.completion. The run
is written to an SQLite cassette and to the PostgreSQL store (as the recorder writes, in
batches), and exported as a vcrpy YAML cassette (`forkpoint export --format vcr`: vcrpy's
envelope, every body whole). Printed: the bytes on the wire, each store's size and its ratio to
the wire, growth from 100 to 1,000 turns against linear, and the time to load the 200-turn run
for replay.

    .venv/bin/python benchmarks/growth.py [--turns 10,100,1000] [--postgres URL | --no-postgres]

Targets: the SQLite cassette at most 5% of the wire bytes at 100 turns; growth from 100 to
1,000 turns within 2x of linear (size(1000) / size(100) <= 20).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

from forkpoint.cassettes.formats import text
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store
from forkpoint.models import Exchange, Run

SYSTEM = "You are a support agent for an online shop. Be brief and exact. " * 8
BATCH = 64  # exchanges per transaction, as the recorder commits under load


def conversation(turns: int) -> list[tuple[bytes, bytes]]:
    """(request, response) bodies of each turn, serialized as the openai SDK does."""
    messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    pairs = []
    for turn in range(turns):
        question = f"Question {turn}: where is order A{turn:05d}? " + "It has not arrived. " * 18
        messages.append({"role": "user", "content": question})
        request = json.dumps({"messages": messages, "model": "gpt-4o"}).encode()
        answer = f"Answer {turn}: order A{turn:05d} ships today. " + "We are sorry. " * 30
        response = json.dumps({
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 1700000000 + turn,
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": len(request) // 4, "completion_tokens": 60,
                      "total_tokens": len(request) // 4 + 60},
        }).encode()  # fmt: skip
        messages.append({"role": "assistant", "content": answer})
        pairs.append((request, response))
    return pairs


def exchanges(run_id: str, pairs: list[tuple[bytes, bytes]]) -> list[Exchange]:
    return [
        Exchange(run_id=run_id, step=step, method="POST", route="/v1/chat/completions",
                 request_headers=(("content-type", "application/json"),), request_body=request,
                 fingerprint="", status=200,
                 response_headers=(("content-type", "application/json"),),
                 response_body=response, started_at=1700000000.0 + step)
        for step, (request, response) in enumerate(pairs)
    ]  # fmt: skip


def write(store: Store, run: Run, recorded: list[Exchange]) -> None:
    store.create_run(run)
    for start in range(0, len(recorded), BATCH):
        store.add_exchanges(recorded[start : start + BATCH])


def sqlite_size(folder: Path, run: Run, recorded: list[Exchange]) -> int:
    path = folder / f"{run.id}.db"
    store = SqliteStore(path)
    write(store, run, recorded)
    store.query("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return path.stat().st_size


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


def load_seconds(folder: Path, run: Run, recorded: list[Exchange]) -> float:
    """Seconds to load the run, bodies and all, as a replay does (best of 3)."""
    path = folder / f"{run.id}.db"
    if not path.exists():
        sqlite_size(folder, run, recorded)
    store = SqliteStore(path, read_only=True)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        loaded = store.exchanges(run.id)
        best = min(best, time.perf_counter() - started)
    store.close()
    assert [e.request_body for e in loaded] == [e.request_body for e in recorded]
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="10,100,1000")
    parser.add_argument("--postgres", default=os.environ.get(
        "FORKPOINT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    counts = [int(n) for n in args.turns.split(",")]
    started = time.monotonic()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="forkpoint-growth-") as tmp:
        folder = Path(tmp)
        for turns in [*counts, 200]:
            run = Run(f"growth-{turns}", name=f"{turns} turns", created_at=1700000000.0)
            recorded = exchanges(run.id, conversation(turns))
            if turns == 200:
                load = load_seconds(folder, run, recorded)
                continue
            wire = sum(len(e.request_body) + len(e.response_body) for e in recorded)
            vcr = len(text.dumps(run, recorded).encode())
            pg = None if args.no_postgres else postgres_size(args.postgres, run, recorded)
            rows[turns] = (wire, sqlite_size(folder, run, recorded), pg, vcr)
    print(f"forkpoint cassette growth: {', '.join(map(str, counts))} turns; "
          f"{time.monotonic() - started:.0f} s\n")  # fmt: skip
    print(f"{'turns':>6} {'wire':>12} {'SQLite':>12} {'/wire':>7} {'PostgreSQL':>12} {'/wire':>7} "
          f"{'vcrpy YAML':>12} {'/wire':>7}")  # fmt: skip
    for turns, (wire, sqlite, pg, vcr) in rows.items():
        pg_cells = f"{pg:12,d} {pg / wire:7.1%}" if pg is not None else f"{'-':>12} {'-':>7}"
        print(f"{turns:6d} {wire:12,d} {sqlite:12,d} {sqlite / wire:7.1%} {pg_cells} "
              f"{vcr:12,d} {vcr / wire:7.1%}")  # fmt: skip
    if 100 in rows:
        print(f"\nSQLite at 100 turns: {rows[100][1] / rows[100][0]:.1%} of the wire "
              f"(target <= 5%)")  # fmt: skip
    if 100 in rows and 1000 in rows:
        growth = rows[1000][1] / rows[100][1]
        print(f"SQLite growth 100 -> 1,000 turns: x{growth:.1f} (linear x10; target <= x20)")
        if rows[100][2] and rows[1000][2]:
            print(f"PostgreSQL growth 100 -> 1,000 turns: x{rows[1000][2] / rows[100][2]:.1f}")
    print(f"loading the 200-turn run for replay (bodies and all): {load * 1000:.0f} ms "
          f"({load * 1000 / 200:.2f} ms per step)")  # fmt: skip


if __name__ == "__main__":
    main()
