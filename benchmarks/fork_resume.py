"""Fork and resume start-up, and the snapshot cost on the live path.

    .venv/bin/python benchmarks/fork_resume.py [--quick] [--rounds N]

1. fork: a 200-step recorded run forked at step 199 by `forkpoint fork`; the agent (a client
   that reissues the run's requests with the openai SDK) gets 199 steps from the cassette,
   then one goes live. Measured: from spawning `forkpoint fork` to the first live request
   reaching the upstream. Target: under 1.5 s (the replayed prefix under 5 ms a step).
2. resume: a run of 200 exchanges with a 1 MB agent state snapshotted at every LLM step,
   crashed, then `forkpoint resume`: from spawning it to the agent's first live request.
   Target: under 1 s.
3. snapshot overhead: p50 latency of an LLM request through `forkpoint record` with a 100 kB
   state pulled at every step, minus the same without an adapter. Target: under 3 ms.

Both starts include the agent's own: a Python interpreter importing openai and sending its
requests, which alone takes most of the time on a slow machine. So each round also runs the
same agent with no forkpoint, straight at the upstream (the fork's client sending all 200
requests, the resumed agent its first), and the report gives forkpoint's share: the
difference, medians over the rounds, which alternate the two.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forkpoint.runtime.loop_thread import LoopThread  # noqa: E402
from forkpoint.testing.upstream import Prompt, Reply, ScriptedUpstream  # noqa: E402

AGENT = ROOT / "tests/e2e/agents/stateful_agent.py"


class Clocked:
    """A scripted upstream that notes when each request reached it."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.upstream = ScriptedUpstream(self.script)
        self.thread = LoopThread("bench-upstream")
        self.url = self.thread.call(self.upstream.start())

    def script(self, prompt: Prompt) -> Reply:
        self.arrivals.append(time.time())
        return Reply(text=f"answer to {prompt.last_user_text}")

    def close(self) -> None:
        self.thread.call(self.upstream.close())
        self.thread.close()


def forkpoint(
    cassette: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    full = {
        **os.environ,
        "FORKPOINT_CASSETTE": str(cassette),
        "OPENAI_API_KEY": "k",
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "forkpoint", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(process: subprocess.Popen[bytes]) -> str:
    _, err = process.communicate(timeout=600)
    if process.returncode not in (0, 137):
        raise SystemExit(f"forkpoint failed ({process.returncode}):\n{err.decode()}")
    said = re.search(r"forkpoint: run (\w+)", err.decode())  # the run id goes to stderr
    return said.group(1) if said else ""


def bench_fork(
    work: Path, upstream: Clocked, steps: int, rounds: int
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per round: seconds from spawning `forkpoint fork` to the first live request; of which
    the agent's own start-up (until its first request); the replayed prefix per step; and
    the same agent alone, from its spawn to its last request reaching the upstream."""
    cassette = work / "fork.db"
    bodies = [
        {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": f"question {i} " + "context " * 200}],
        }
        for i in range(steps)
    ]
    requests = work / "requests.json"
    requests.write_text(json.dumps(bodies))
    client = [sys.executable, str(ROOT / "benchmarks/_reissue_client.py"), str(requests)]
    run_id = finish(forkpoint(cassette, "record", "--upstream", upstream.url, "--", *client))
    marks = work / "marks.json"
    forks: list[float] = []
    starts: list[float] = []
    per_step: list[float] = []
    alone: list[float] = []
    for round_ in range(rounds):
        for which in ("fork", "alone") if round_ % 2 == 0 else ("alone", "fork"):
            upstream.arrivals.clear()
            started = time.time()
            if which == "alone":
                alone_run(upstream, client, steps)
                alone.append(upstream.arrivals[-1] - started)
                continue
            at = str(steps - 1)
            process = forkpoint(cassette, "fork", run_id, "--at", at, "--upstream",
                                upstream.url, "--", *client, str(marks))  # fmt: skip
            finish(process)
            assert len(upstream.arrivals) == 1, upstream.arrivals
            first_sent = json.loads(marks.read_text())["first_sent"]
            live = upstream.arrivals[0]
            forks.append(live - started)
            starts.append(first_sent - started)
            per_step.append((live - first_sent) / (steps - 1))
    return forks, starts, per_step, alone


def alone_run(
    upstream: Clocked, cmd: list[str], requests: int, env: dict[str, str] | None = None
) -> None:
    """`cmd` with no forkpoint, its clients pointed straight at the upstream."""
    full = {**os.environ, "OPENAI_BASE_URL": f"{upstream.url}/v1", "OPENAI_API_KEY": "k",
            "PYTHONPATH": str(ROOT), **(env or {})}  # fmt: skip
    for name in ("FORKPOINT_URL", "FORKPOINT_RUN"):
        full.pop(name, None)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    subprocess.run(cmd, env=full, check=True, timeout=600, **quiet)
    assert len(upstream.arrivals) == requests, upstream.arrivals


def bench_resume(
    work: Path, upstream: Clocked, steps: int, state_kb: int, rounds: int
) -> tuple[list[float], list[float]]:
    """Per round: seconds from spawning `forkpoint resume` of a crashed run to the agent's
    first live request; and the same agent alone, from its spawn to its first request."""
    agent = [sys.executable, str(AGENT)]
    env = {"TURNS": str(steps + 1), "STATE_KB": str(state_kb)}
    resumes: list[float] = []
    alone: list[float] = []
    for round_ in range(rounds):
        cassette = work / f"resume-{round_}.db"
        record = forkpoint(cassette, "record", "--name", "r", "--upstream", upstream.url, "--",
                           *agent, env={**env, "CRASH_AFTER": str(steps)})  # fmt: skip
        finish(record)
        for which in ("resume", "alone") if round_ % 2 == 0 else ("alone", "resume"):
            upstream.arrivals.clear()
            started = time.time()
            if which == "alone":
                alone_run(upstream, agent, 1, env={**env, "TURNS": "1"})
                alone.append(upstream.arrivals[0] - started)
                continue
            resume = forkpoint(cassette, "resume", "r", "--upstream", upstream.url, "--",
                               *agent, env=env)  # fmt: skip
            finish(resume)
            assert len(upstream.arrivals) == 1, upstream.arrivals
            resumes.append(upstream.arrivals[0] - started)
    return resumes, alone


def bench_snapshot_overhead(work: Path, upstream: Clocked, requests: int) -> tuple[float, float]:
    """p50 request latency (ms) with a 100 kB state pulled every step, and without an adapter."""
    timed = work / "timed_agent.py"
    timed.write_text(TIMED_AGENT)
    results = []
    for attach in ("1", "0"):
        out = work / f"latencies-{attach}.json"
        finish(
            forkpoint(
                work / "overhead.db",
                "record",
                "--upstream",
                upstream.url,
                "--",
                sys.executable,
                str(timed),
                str(out),
                env={"ATTACH": attach, "REQUESTS": str(requests)},
            )
        )
        results.append(statistics.median(json.loads(out.read_text())))
    return results[0], results[1]


TIMED_AGENT = """
import json, os, sys, time
import openai
from forkpoint.adapters.agent import attach
if os.environ["ATTACH"] == "1":
    state = attach(default={"memory": "m" * 100 * 1024})
latencies = []
with openai.OpenAI(max_retries=0) as client:
    for i in range(int(os.environ["REQUESTS"])):
        started = time.perf_counter()
        question = [{"role": "user", "content": f"q{i}"}]
        client.chat.completions.create(model="gpt-4o", messages=question)
        latencies.append((time.perf_counter() - started) * 1000)
with open(sys.argv[1], "w") as out:
    json.dump(latencies[5:], out)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    parser.add_argument("--rounds", type=int, default=5, help="fork and resume rounds")
    args = parser.parse_args()
    steps = 20 if args.quick else 200
    rounds = 1 if args.quick else args.rounds
    upstream = Clocked()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            forks, starts, per_step, fork_alone = bench_fork(work, upstream, steps, rounds)
            resumes, resume_alone = bench_resume(work, upstream, steps, 1024, rounds)
            requests = 30 if args.quick else 200
            with_adapter, without = bench_snapshot_overhead(work, upstream, requests)
    finally:
        upstream.close()
    median = statistics.median
    fork_s, resume_s, per_step_ms = median(forks), median(resumes), median(per_step) * 1000
    rows = [
        (f"fork at step {steps - 1} of {steps}: to first live request", f"{fork_s:.3f} s",
         1.5, fork_s),
        ("  of which start-up (forkpoint, then the agent's imports)",
         f"{median(starts):.3f} s", 1.5, median(starts)),
        ("  per replayed step", f"{per_step_ms:.2f} ms", 5.0, per_step_ms),
        ("  the agent alone, to its last request", f"{median(fork_alone):.3f} s", None, 0),
        ("  forkpoint's share", f"{fork_s - median(fork_alone):.3f} s", None, 0),
        (f"resume, {steps} steps, 1 MB state: to first live request", f"{resume_s:.3f} s",
         1.0, resume_s),
        ("  the agent alone, to its first request", f"{median(resume_alone):.3f} s", None, 0),
        ("  forkpoint's share", f"{resume_s - median(resume_alone):.3f} s", None, 0),
        ("snapshot overhead, 100 kB state, p50 per LLM request",
         f"{with_adapter - without:.2f} ms ({with_adapter:.2f} vs {without:.2f})", 3.0,
         with_adapter - without),
    ]  # fmt: skip
    print(f"{rounds} round(s); fork and resume: medians over the rounds")
    print(f"{'measure':58}  {'value':>30}  {'target':>8}  ok")
    for name, text, limit, value in rows:
        target, ok = ("", "") if limit is None else (f"< {limit}", _ok(value < limit))
        print(f"{name:58}  {text:>30}  {target:>8}  {ok}")


def _ok(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


if __name__ == "__main__":
    main()
