"""Benchmark: the PostgreSQL store next to the SQLite cassette, and a fleet on one database.

Two tables, one run, one local upstream, every server in its own process:

1. Record mode at c=32 through one proxy: its runs in an SQLite file vs in PostgreSQL,
   alternating round by round (target: PostgreSQL >= 0.8x SQLite's requests/s).
2. Four replicas on one PostgreSQL store, c=32 each, all requests of one run (`/r/RUN/`, so
   every step is allocated by the store) and, separately, each replica's own run: aggregate
   requests/s, and exchanges lost (answered 200 but not in the store after the replicas
   stop; must be 0).

    .venv/bin/python benchmarks/postgres.py [--url postgresql://...] [--quick]

The database is $FORKPOINT_BENCH_POSTGRES (default: the local server's `test`); the benchmark
works in a schema of its own and drops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import _procs
import psycopg
from _workload import chat_body, concurrent, new_client

from forkpoint.cassettes.open import open_store

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def in_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


async def one_proxy(logs: Path, upstream_url: str, pg: str, rounds: int, count: int) -> dict:
    targets = {
        "sqlite": _procs.forkpoint("sqlite", logs, mode="record", cassette=logs / "bench.db",
                                   run="bench", upstream_url=upstream_url),
        "postgres": _procs.forkpoint("postgres", logs, mode="record", cassette=pg, run="bench",
                                     upstream_url=upstream_url),
    }  # fmt: skip
    rps: dict[str, list[float]] = {name: [] for name in targets}
    ratios: list[float] = []
    try:
        urls = {name: child.ready() for name, child in targets.items()}
        async with new_client() as client:
            for name, url in urls.items():  # warm up
                warm = [chat_body(f"warm-{name}", i) for i in range(200)]
                await concurrent(client, url, warm, 32)
                await targets[name].settle()
            for round_ in range(rounds):
                order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
                got = {}
                for name in order:
                    bodies = [chat_body(f"r{round_}-{name}", i) for i in range(count)]
                    seconds = await concurrent(client, urls[name], bodies, 32)
                    got[name] = count / seconds
                    await targets[name].settle()
                for name, value in got.items():
                    rps[name].append(value)
                ratios.append(got["postgres"] / got["sqlite"])
    finally:
        for child in targets.values():
            child.stop()
    return {"rps": {k: statistics.median(v) for k, v in rps.items()},
            "ratio": statistics.median(ratios)}  # fmt: skip


async def fleet(logs: Path, upstream_url: str, pg: str, count: int, *, shared: bool) -> dict:
    """Four replicas, c=32 each; `shared`: every request names one run."""
    kind = "shared" if shared else "own"
    replicas = [
        _procs.forkpoint(f"replica-{kind}-{i}", logs, mode="record", cassette=pg,
                         run=f"{kind}-replica-{i}", upstream_url=upstream_url)
        for i in range(4)
    ]  # fmt: skip
    sent = 0
    try:
        urls = [child.ready() for child in replicas]
        targets = [f"{url}/r/fleet" if shared else url for url in urls]
        async with new_client() as client:
            started = time.perf_counter()
            await asyncio.gather(*(
                concurrent(client, url, [chat_body(f"{kind}-{r}", i) for i in range(count)], 32)
                for r, url in enumerate(targets)
            ))  # fmt: skip
            seconds = time.perf_counter() - started
            sent = 4 * count
    finally:
        for child in replicas:
            child.stop()  # commits what it holds
    store = open_store(pg, read_only=True)
    try:
        runs = ["fleet"] if shared else [f"{kind}-replica-{i}" for i in range(4)]
        stored = sum(store.step_count(run) for run in runs)
        steps = store.exchanges("fleet", bodies=False) if shared else []
    finally:
        store.close()
    gapless = not shared or [e.step for e in steps] == list(range(len(steps)))
    return {"rps": sent / seconds, "lost": sent - stored, "gapless": gapless}


async def main_async(url: str, quick: bool) -> None:
    rounds, count = (2, 300) if quick else (6, 1000)
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    pg = in_schema(url, schema)
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="forkpoint-bench-pg-") as tmp:
            logs = Path(tmp)
            upstream = _procs.upstream(logs, 0.02)
            try:
                upstream_url = upstream.ready()
                single = await one_proxy(logs, upstream_url, pg, rounds, count)
                own = await fleet(logs, upstream_url, pg, count, shared=False)
                shared = await fleet(logs, upstream_url, pg, count, shared=True)
            finally:
                upstream.stop()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    print(f"forkpoint PostgreSQL benchmark: {rounds} rounds of {count} requests at c=32; "
          f"{os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s\n")  # fmt: skip
    ratio = single["ratio"]
    print(f"{'one proxy, record, c=32':40} {'req/s':>8}")
    print(f"{'  SQLite cassette':40} {single['rps']['sqlite']:8.0f}")
    print(f"{'  PostgreSQL store':40} {single['rps']['postgres']:8.0f}")
    print(f"{'  PostgreSQL / SQLite (median of rounds)':40} {ratio:8.2f}   "
          f"target >= 0.80 {'PASS' if ratio >= 0.8 else 'MISS'}\n")  # fmt: skip
    print(f"{'four replicas, one PostgreSQL store':40} {'req/s':>8} {'lost':>6} {'gapless':>8}")
    for label, got in (("  each its own run, c=32 each", own),
                       ("  one run (/r/RUN/), c=32 each", shared)):  # fmt: skip
        print(f"{label:40} {got['rps']:8.0f} {got['lost']:6d} {got['gapless']!s:>8}")
    if own["lost"] or shared["lost"] or not shared["gapless"]:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("FORKPOINT_BENCH_POSTGRES", DEFAULT_URL))
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    asyncio.run(main_async(args.url, args.quick))


if __name__ == "__main__":
    main()
