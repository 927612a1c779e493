"""What parked runs cost one `serve`: 1,000 held at once, then 100 woken at once.

    .venv/bin/python benchmarks/park_fleet.py [--quick] [--runs 1000] [--woken 100]

One `serve` (SQLite) holds RUNS parked runs of a curl agent (`_park_many.py`), half parked on
a rule, half on an upstream that never answers (`--park-after 1s`: serve keeps those requests
open). Measured: serve's resident memory (with its writer process's) per parked run, each half
apart (target under 20 KiB); the writer process's own start, a fixed cost, apart; no agent
process alive while parked; then WOKEN answered at once: all finish, and the wall time from the
first answer sent to the last run finished. Wake latency is benchmarks/park_wake.py's.

The machine is usually shared: the report gives the CPUs other work kept busy meanwhile.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _park_many import run_fleet
from _park_serve import Upstream, load_line
from _procs import OtherLoad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 runs, 10 woken")
    parser.add_argument("--runs", type=int, default=1000, help="parked runs held by serve")
    parser.add_argument("--woken", type=int, default=100, help="of them, woken at once")
    args = parser.parse_args()
    runs, woken = (40, 10) if args.quick else (args.runs, args.woken)
    load = OtherLoad()
    upstream = Upstream()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            fleet = run_fleet(Path(tmp), upstream, runs, woken)
    finally:
        upstream.stop()
    print(fleet.text())
    print(f"\n{load_line(load.cpus())}")


if __name__ == "__main__":
    main()
