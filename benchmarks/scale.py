"""Benchmark: reading a large cassette (issue 16.4): 10,000 runs and 1,000,000 exchanges.

Cassettes of 100, 1,000 and 10,000 runs of 100 exchanges each (small chat requests and
answers) are written once into a folder (kept between invocations with --keep DIR), then,
each the best of 5 in this process: `forkpoint runs`' first page (the newest 100 runs with
their exchanges, as `api.runs(newest=100)`), `show` of one run (by name: `api.show`) and
loading one run for replay (the run and its exchanges, bodies and all). Also `forkpoint runs`
as a command (a process's start included). Target: each under 300 ms at 10,000 runs.

    .venv/bin/python benchmarks/scale.py [--runs 100,1000,10000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from forkpoint.api import Options, runs, show
from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Exchange, Run

STEPS = 100
TARGET_MS = 300


def build(path: Path, count: int) -> None:
    if path.exists():
        return
    store = SqliteStore(path.with_suffix(".part"))
    for r in range(count):
        run = Run(f"01SCALE{r:08d}", name=f"ticket-{r}", created_at=1700000000.0 + r)
        store.create_run(run)
        batch = []
        for step in range(STEPS):
            question = f"ticket {r} question {step}: where is my order?"
            request = json.dumps({"model": "gpt-4o", "messages": [
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": question}]}).encode()  # fmt: skip
            response = json.dumps({"id": f"c{r}-{step}", "object": "chat.completion",
                                   "choices": [{"message": {"role": "assistant",
                                                            "content": f"answer {step}"}}]},
                                  ).encode()  # fmt: skip
            batch.append(Exchange(run.id, step, "POST", "/v1/chat/completions",
                                  (("content-type", "application/json"),), request, "f",
                                  status=200, response_body=response))  # fmt: skip
        store.add_exchanges(batch)
    store.close()
    path.with_suffix(".part").rename(path)


def best_ms(work: Callable[[], object], times: int = 5) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best * 1000


def measure(path: Path, count: int) -> dict[str, float]:
    options = Options(cassette=path)
    middle = f"ticket-{count // 2}"

    def replay_load() -> None:
        store = SqliteStore(path, read_only=True)
        try:
            run = store.find_run(middle)
            assert len(store.exchanges(run.id)) == STEPS
        finally:
            store.close()

    def command() -> None:
        subprocess.run([sys.executable, "-m", "forkpoint", "runs", "--cassette", str(path)],
                       check=True, capture_output=True)  # fmt: skip

    return {
        "runs, first page": best_ms(lambda: runs(options, newest=100)),
        "show one run": best_ms(lambda: show(middle, options)),
        "load one run for replay": best_ms(replay_load),
        "`forkpoint runs` command": best_ms(command, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="100,1000,10000")
    parser.add_argument("--keep", help="a folder to keep the cassettes in between runs")
    args = parser.parse_args()
    counts = [int(n) for n in args.runs.split(",")]
    with tempfile.TemporaryDirectory(prefix="forkpoint-scale-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        results, sizes = {}, {}
        for count in counts:
            path = folder / f"scale-{count}.db"
            started = time.monotonic()
            build(path, count)
            print(f"built {count} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)
            results[count], sizes[count] = measure(path, count), path.stat().st_size
    print(f"forkpoint at scale: runs of {STEPS} exchanges; best of 5 (the command: of 3), ms\n")
    header = "".join(f"{f'{c:,} runs':>16}" for c in counts)
    print(f"{'':28}{header}")
    print(f"{'exchanges':28}" + "".join(f"{c * STEPS:>16,}" for c in counts))
    print(f"{'cassette, MB':28}" + "".join(f"{sizes[c] / 1e6:>16,.0f}" for c in counts))
    for name in results[counts[0]]:
        print(f"{name:28}" + "".join(f"{results[c][name]:>16.1f}" for c in counts))
    largest = results[counts[-1]]
    missed = [n for n, ms in largest.items() if ms > TARGET_MS and "command" not in n]
    print(f"\ntarget: each read under {TARGET_MS} ms at {counts[-1]:,} runs: "
          + ("PASS" if not missed else f"MISS ({', '.join(missed)})"))  # fmt: skip


if __name__ == "__main__":
    main()
