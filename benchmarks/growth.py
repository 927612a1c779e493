"""Benchmark: how a cassette grows with a conversation's length (issues 16.1, 27.10).

A chat run of N turns through the real openai SDK (`_growth_agent.py`: turn k resends the system
prompt and the k-1 turns before, then asks one more question), recorded by `forkpoint record`
against a local upstream that answers as api.openai.com does, with its headers
(`_openai_upstream.py`). The SDK sends its usual headers, the upstream its own, some values
changing on every answer (a date, a request id, counts). Printed for each N: the bytes on the
wire (bodies and header lines), the SQLite cassette as `record` left it and its ratio to the
wire, the run copied into PostgreSQL, and exported as vcrpy YAML (every body whole); growth
from 100 to 1,000 turns against linear; the writer's time per exchange; and the time to load
the 200-turn run for replay. `--forkpoint CHECKOUT` records and measures with another
checkout's forkpoint (its code alone: this benchmark, its agent and its upstream stay), for a
before and after on one machine.

    .venv/bin/python benchmarks/growth.py [--turns 10,100,1000] [--postgres URL | --no-postgres]
                                          [--forkpoint CHECKOUT]

Targets: the SQLite cassette at most 3% of the wire at 100 turns; growth from 100 to 1,000
turns within 2x of linear (size(1000) / size(100) <= 20).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def start_upstream() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    upstream = subprocess.Popen([sys.executable, str(HERE / "_openai_upstream.py")],
                                stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert upstream.stdout is not None
    return upstream, upstream.stdout.readline().strip()


def record(checkout: Path, folder: Path, upstream: str, turns: int) -> Path:
    """The chat of `turns` turns recorded by `forkpoint record` into a cassette of its own."""
    cassette = folder / f"{turns}.db"
    env = {**os.environ, "PYTHONPATH": str(checkout), "OPENAI_API_KEY": "sk-growth-benchmark",
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "forkpoint", "record", "--cassette", str(cassette), "--upstream",
         upstream, "--name", f"growth-{turns}", "--", sys.executable,
         str(HERE / "_growth_agent.py"), str(turns)],
        check=True, env=env, cwd=folder, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return cassette


def measure(checkout: Path, cassette: Path, turns: int, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(HERE / "_growth_measure.py"), str(cassette), f"growth-{turns}",
         *extra], check=True, env=env, capture_output=True, text=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout)
    if found["steps"] != turns:
        raise SystemExit(f"the {turns}-turn run recorded {found['steps']} steps")
    return found


def print_btrees(turns: int, row: dict[str, Any]) -> None:
    """Where the cassette's bytes go: each table and index that holds something, then the
    empty ones (a page each) together."""
    print(f"\nthe {turns}-turn cassette, {row['page_size']:,d}-byte pages, "
          f"{row['free_pages']} free: per table and index (SQLite's dbstat)")  # fmt: skip
    print(f"{'table or index':36} {'pages':>6} {'bytes':>9} {'payload':>9} {'unused':>8} "
          f"{'/turn':>7}")  # fmt: skip
    empty = [b for b in row["btrees"] if b[3] == 0]
    for name, pages, size, payload, unused in row["btrees"]:
        if payload:
            print(f"{name:36} {pages:6d} {size:9,d} {payload:9,d} {unused:8,d} "
                  f"{size / turns:7.0f}")  # fmt: skip
    if empty:
        size = sum(b[2] for b in empty)
        print(f"{f'{len(empty)} empty tables and indexes':36} {sum(b[1] for b in empty):6d} "
              f"{size:9,d} {0:9,d} {sum(b[4] for b in empty):8,d}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="10,100,1000")
    parser.add_argument("--postgres", default=os.environ.get(
        "FORKPOINT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"))  # fmt: skip
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument(
        "--forkpoint", type=Path, default=HERE.parent,
        help="the checkout whose forkpoint records (default: this one)",
    )  # fmt: skip
    args = parser.parse_args()
    checkout = args.forkpoint.resolve()
    counts = [int(n) for n in args.turns.split(",")]
    pg = [] if args.no_postgres else ["--postgres", args.postgres]
    started = time.monotonic()
    rows: dict[int, dict[str, Any]] = {}
    upstream, url = start_upstream()
    try:
        with tempfile.TemporaryDirectory(prefix="forkpoint-growth-") as tmp:
            for turns in [*counts, 200]:
                if turns == 200 and 200 in rows:
                    continue
                cassette = record(checkout, Path(tmp), url, turns)
                more = ["--load"] if turns == 200 else []
                rows[turns] = measure(checkout, cassette, turns, *pg, *more)
    finally:
        upstream.kill()
        upstream.wait(10)
    print(f"forkpoint cassette growth, the openai SDK through `forkpoint record` "
          f"({checkout}): {', '.join(map(str, counts))} turns; "
          f"{time.monotonic() - started:.0f} s\n")  # fmt: skip
    print(f"{'turns':>6} {'wire':>12} {'SQLite':>12} {'/wire':>7} {'PostgreSQL':>12} {'/wire':>7} "
          f"{'vcrpy YAML':>12} {'/wire':>7} {'write/ex':>9}")  # fmt: skip
    for turns in counts:
        row = rows[turns]
        wire, sqlite, pg_size = row["wire"], row["sqlite"], row.get("postgres")
        pg_cells = f"{pg_size:12,d} {pg_size / wire:7.1%}" if pg_size else f"{'-':>12} {'-':>7}"
        print(f"{turns:6d} {wire:12,d} {sqlite:12,d} {sqlite / wire:7.1%} {pg_cells} "
              f"{row['vcr']:12,d} {row['vcr'] / wire:7.1%} {row['write_us']:7.0f}µs")  # fmt: skip
    print(f"\nan empty cassette: {rows[counts[0]]['empty']:,d} bytes (a page per table and index)")
    if 100 in rows:
        print(f"SQLite at 100 turns: {rows[100]['sqlite'] / rows[100]['wire']:.1%} of the wire "
              f"(target <= 3%)")  # fmt: skip
    if 100 in rows and 1000 in rows:
        growth = rows[1000]["sqlite"] / rows[100]["sqlite"]
        print(f"SQLite growth 100 -> 1,000 turns: x{growth:.1f} (linear x10; target <= x20)")
        if rows[100].get("postgres") and rows[1000].get("postgres"):
            print(f"PostgreSQL growth 100 -> 1,000 turns: "
                  f"x{rows[1000]['postgres'] / rows[100]['postgres']:.1f}")  # fmt: skip
    shown = 100 if 100 in rows else counts[0]
    print_btrees(shown, rows[shown])
    load = rows[200]["load_ms"]
    print(f"loading the 200-turn run for replay (bodies and all): {load:.0f} ms "
          f"({load / 200:.2f} ms per step)")  # fmt: skip


if __name__ == "__main__":
    main()
