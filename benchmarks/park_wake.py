"""Wake latency: from an answer to the woken agent's next live request at the upstream.

    .venv/bin/python benchmarks/park_wake.py [--steps 50] [--state-kb 100] [--rounds 3]
        [--ways serve-sqlite,serve-postgres,answer]

The agent (`_park_agent.py`: a Python process importing openai, its STATE_KB state in
forkpoint's agent helper, snapshotted at each model call) makes STEPS model calls, then asks
for an approval, which `--park 'POST /approvals*'` parks (its process ended). Timed from the
answer to the woken agent's next live request reaching the upstream: the answer stored, the
wake claimed, the run's session opened (its snapshot, the recorded steps), the agent started,
its state restored, its approval served from the store, then its next model call. Three ways:

- serve-sqlite, serve-postgres: a long-lived `forkpoint serve --park …` on an SQLite file or
  PostgreSQL, the agent started as a platform would (its launch told to serve); timed from the
  answer's POST /_forkpoint/runs/RUN/answer (serve wakes the run itself), sent by a client made
  beforehand (a new httpx client's TLS context, 60-90 ms under load, was counted before).
- answer: `forkpoint record --park … -- AGENT` parks it, then `forkpoint answer RUN --body …`
  (timed from its spawn: a Python start, forkpoint's imports) answers and wakes it in the
  foreground.

Each round also starts the same agent with no forkpoint where it parked (`AT_APPROVAL`: it asks
the upstream's approval tool itself, then makes its model call): timed from its spawn to that
model request, what restarting the agent costs anyway. forkpoint's share is the total minus that
(medians; the rounds alternate the two). Targets (issue 26): the share under 100 ms, the total
under 1 s. On a shared machine the agent's own imports (openai's: 1 s quiet, several under
load) vary by more than the share, so each round's share is also given with them set aside:
each agent notes when its process started and when its imports were done (PARK_TIMES), and
that span is taken off both sides. The report says how busy other work kept the machine.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _park_serve import (
    ROOT,
    Upstream,
    env,
    load_line,
    reading,
    start_serve,
    stop,
    store_at,
    wait_until,
)
from _procs import OtherLoad

from forkpoint.models import RunStatus

AGENT = [sys.executable, str(ROOT / "benchmarks/_park_agent.py")]
FORKPOINT = [sys.executable, "-m", "forkpoint"]
PARK = ("--park", "POST /approvals*")
APPROVAL = '{"approved": true, "by": "bench"}'
SHARE_MS, TOTAL_S = 100.0, 1.0
WAYS = ("serve-sqlite", "serve-postgres", "answer")


class Timed(NamedTuple):
    """One wake, or one start of the agent alone: seconds to its live model request, and of
    them the agent's own imports (from its process's start)."""

    seconds: float
    imports: float


class Way(NamedTuple):
    wakes: list[Timed]
    alones: list[Timed]


class Bench:
    def __init__(self, upstream: Upstream, work: Path, steps: int, state_kb: int):
        self.upstream = upstream
        self.work = work
        self.times = work / "times"
        self.knobs = {"STEPS": str(steps), "STATE_KB": str(state_kb),
                      "PARK_TIMES": str(self.times)}  # fmt: skip

    def agent_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return env({**self.knobs, **(extra or {})})

    def imports(self) -> float:
        """The imports of the agent that went live last (its note in PARK_TIMES)."""
        _, started, imported = self.times.read_text().splitlines()[-1].split()
        return float(imported) - float(started)

    def alone(self) -> Timed:
        """The agent with no forkpoint, started where it parked: seconds from its spawn to its
        model request at the upstream (after asking the approval tool itself)."""
        self.upstream.arrivals.clear()
        started = time.time()
        agent = subprocess.Popen(
            AGENT, env=self.agent_env({
                "OPENAI_BASE_URL": f"{self.upstream.url}/v1", "AT_APPROVAL": "1",
                "APPROVALS_URL": self.upstream.url,
            }), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        arrived = self.upstream.first_arrival()
        agent.kill()
        agent.wait()
        return Timed(arrived - started, self.imports())

    def rounds(self, rounds: int, wake: Callable[[int], float]) -> Way:
        """`rounds` wakes (`wake(round)`: its seconds) and as many starts of the agent alone,
        alternating which goes first."""
        way = Way([], [])
        for n in range(rounds):
            for which in ("wake", "alone") if n % 2 == 0 else ("alone", "wake"):
                if which == "alone":
                    way.alones.append(self.alone())
                else:
                    way.wakes.append(Timed(wake(n), self.imports()))
        return way

    def on_serve(self, kind: str, rounds: int) -> Way:
        """serve (an SQLite file or PostgreSQL): each round's run parked through it, then
        answered through its endpoint; seconds to the woken agent's next live request."""
        with store_at(kind, self.work, f"wake-{kind}") as location:
            serve, url = start_serve(location, self.upstream.url, *PARK,
                                     log=self.work / f"serve-{kind}.log")  # fmt: skip
            # Made before any clock starts, as a platform keeps its client: a new httpx client
            # builds a TLS context first (60-90 ms on a busy machine), which no wake costs.
            answering = httpx.Client(timeout=30)
            try:

                def wake(n: int) -> float:
                    run_id = f"wake-{kind}-{n}"
                    self.park_on_serve(url, location, run_id)
                    self.upstream.arrivals.clear()
                    started = time.time()
                    answered = answering.post(f"{url}/_forkpoint/runs/{run_id}/answer",
                                              content=APPROVAL)  # fmt: skip
                    answered.raise_for_status()
                    total = self.upstream.first_arrival() - started
                    wait_until(lambda: finished(location, run_id), 120, f"{run_id} finished")
                    return total

                return self.rounds(rounds, wake)
            finally:
                answering.close()
                stop(serve)

    def park_on_serve(self, url: str, location: str, run_id: str) -> None:
        """The agent started for `run_id` through serve as a platform would (its launch told
        to serve), until it has parked and its process is gone."""
        agent = subprocess.Popen(
            AGENT, env=self.agent_env({
                "OPENAI_BASE_URL": f"{url}/r/{run_id}/v1", "FORKPOINT_URL": url,
                "FORKPOINT_RUN": run_id,
            }), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        launch = {"command": AGENT, "cwd": str(ROOT), "env": self.agent_env(), "pid": agent.pid}
        told = httpx.post(f"{url}/_forkpoint/runs/{run_id}/launch", json=launch, timeout=30)
        told.raise_for_status()
        if agent.wait(300) == 0:
            raise SystemExit(f"run {run_id} finished without parking")
        wait_until(lambda: reading(location, lambda s: s.parked(run_id)), 60, f"{run_id} parked")

    def in_foreground(self, rounds: int) -> Way:
        """`record` parks each round's run; `forkpoint answer` (spawned) answers and wakes it
        in the foreground; seconds from its spawn to the woken agent's next live request."""
        cassette = self.work / "foreground.db"

        def wake(n: int) -> float:
            name = f"foreground-{n}"
            parked = subprocess.run(
                [*FORKPOINT, "record", "--cassette", str(cassette), "--name", name, "--upstream",
                 self.upstream.url, *PARK, "--", *AGENT], env=self.agent_env(),
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if parked.returncode != 75:
                raise SystemExit(f"record did not park ({parked.returncode}):\n{parked.stderr}")
            self.upstream.arrivals.clear()
            started = time.time()
            woken = subprocess.run(
                [*FORKPOINT, "answer", "--cassette", str(cassette), name, "--body", APPROVAL],
                env=self.agent_env(), capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if woken.returncode != 0:
                raise SystemExit(f"answer failed ({woken.returncode}):\n{woken.stderr}")
            return self.upstream.first_arrival() - started

        return self.rounds(rounds, wake)


def finished(location: str, run_id: str) -> bool:
    return reading(location, lambda s: s.get_run(run_id).status) is RunStatus.FINISHED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--state-kb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ways", default=",".join(WAYS), help=f"of {', '.join(WAYS)}")
    args = parser.parse_args()
    ways = [way.strip() for way in args.ways.split(",") if way.strip()]
    if not ways or set(ways) - set(WAYS):
        parser.error(f"--ways: some of {', '.join(WAYS)}")
    load = OtherLoad()
    upstream = Upstream()
    measured: dict[str, Way] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bench = Bench(upstream, Path(tmp), args.steps, args.state_kb)
            for way in ways:
                if way == "answer":
                    measured["record, then forkpoint answer"] = bench.in_foreground(args.rounds)
                else:
                    kind = way.removeprefix("serve-")
                    store = "SQLite" if kind == "sqlite" else "PostgreSQL"
                    measured[f"serve, {store}"] = bench.on_serve(kind, args.rounds)
    finally:
        upstream.stop()
    report(measured, args.rounds, args.steps, args.state_kb, load.cpus())


def report(measured: dict[str, Way], rounds: int, steps: int, state_kb: int, others: float) -> None:
    median = statistics.median
    print(f"wake latency: a {steps}-step run, {state_kb} KB state, a Python agent importing "
          f"openai; medians of {rounds} round(s)")  # fmt: skip
    print(f"{'woken by':32}{'total':>10}{'alone':>10}{'share':>10}   targets")
    for name, way in measured.items():
        totals, alones = [w.seconds for w in way.wakes], [a.seconds for a in way.alones]
        total, start = median(totals), median(alones)
        share_ms = (total - start) * 1000
        verdict = (f"share < {SHARE_MS:.0f} ms {_ok(share_ms < SHARE_MS)}, "
                   f"total < {TOTAL_S:.0f} s {_ok(total < TOTAL_S)}")  # fmt: skip
        print(f"{name:32}{total:>9.3f}s{start:>9.3f}s{share_ms:>8.0f}ms   {verdict}")
        print(f"{'':32}rounds: " + ", ".join(f"{t:.3f}" for t in totals)
              + "; alone: " + ", ".join(f"{a:.3f}" for a in alones))  # fmt: skip
        bare = [(w.seconds - w.imports) - (a.seconds - a.imports)
                for w, a in zip(way.wakes, way.alones, strict=True)]  # fmt: skip
        imports = median([t.imports for t in (*way.wakes, *way.alones)])
        print(f"{'':32}share with the agent's imports set aside (median {imports:.3f} s): "
              f"median {median(bare) * 1000:.0f} ms ("
              + ", ".join(f"{b * 1000:.0f}" for b in bare) + ")")  # fmt: skip
    print(f"\n{load_line(others)}")


def _ok(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


if __name__ == "__main__":
    main()
