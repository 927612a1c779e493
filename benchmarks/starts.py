"""How long a forkpoint command takes to start: `--help`, `runs` and `show` of a small cassette.

Each command runs in a fresh interpreter, as a user's shell runs it; the figure is the median
wall time over rounds (`--rounds`). A command that only reads a cassette should not pay for the
proxy's imports (aiohttp, the runtime).

    .venv/bin/python benchmarks/starts.py            # about 20 s
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one command in a fresh interpreter."""
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "FORKPOINT_CASSETTE": f"{work}/c.db"}
        made = subprocess.run(
            [sys.executable, "-m", "forkpoint", "record", "--", sys.executable, "-c", "pass"],
            env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        said = re.search(r"forkpoint: run (\w+)", made.stderr)
        run = said.group(1) if said else "last"
        commands = {"--help": ["--help"], "runs": ["runs"], "show RUN": ["show", run]}
        times: dict[str, list[float]] = {name: [] for name in commands}
        # the interpreter's own start, the floor under every command
        python = [timed([sys.executable, "-c", "pass"], env) for _ in range(rounds)]
        for _ in range(rounds):
            for name, args in commands.items():
                times[name].append(timed([sys.executable, "-m", "forkpoint", *args], env))
    print(f"{'command':<22}{'median':>10}{'target':>10}  ok   ({rounds} rounds)")
    print(f"{'python -c pass':<22}{statistics.median(python):>9.3f}s")
    for name, spent in times.items():
        median = statistics.median(spent)
        verdict = "PASS" if median <= TARGET_S else "FAIL"
        print(f"{'forkpoint ' + name:<22}{median:>9.3f}s{'<= ' + str(TARGET_S):>10}  {verdict}")


if __name__ == "__main__":
    main()
