"""Fork and resume start-up, and the snapshot cost on the live path.

    .venv/bin/python benchmarks/fork_resume.py [--quick]

1. fork: a 200-step recorded run forked at step 199 by `forkpoint fork`; the agent (a client
   that reissues the run's requests) gets 199 steps from the cassette, then one goes live.
   Measured: from spawning `forkpoint fork` to the first live request reaching the upstream.
   Target: under 1.5 s (the replayed prefix under 5 ms a step).
2. resume: a run of 200 exchanges with a 1 MB agent state snapshotted at every LLM step,
   crashed, then `forkpoint resume`: from spawning it to the agent's first live request.
   Target: under 1 s.
3. snapshot overhead: p50 latency of an LLM request through `forkpoint record` with a 100 kB
   state pulled at every step, minus the same without an adapter. Target: under 3 ms.
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


def bench_fork(work: Path, upstream: Clocked, steps: int) -> tuple[float, float, float]:
    """Seconds from spawning `forkpoint fork` to the first live request; of which the agent's
    own start-up (until its first request); and the replayed prefix per step."""
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
    upstream.arrivals.clear()
    marks = work / "marks.json"
    started = time.time()
    process = forkpoint(
        cassette,
        "fork",
        run_id,
        "--at",
        str(steps - 1),
        "--upstream",
        upstream.url,
        "--",
        *client,
        str(marks),
    )
    finish(process)
    assert len(upstream.arrivals) == 1, upstream.arrivals
    first_sent = json.loads(marks.read_text())["first_sent"]
    live = upstream.arrivals[0]
    return live - started, first_sent - started, (live - first_sent) / (steps - 1)


def bench_resume(work: Path, upstream: Clocked, steps: int, state_kb: int) -> float:
    cassette = work / "resume.db"
    env = {"TURNS": str(steps + 1), "STATE_KB": str(state_kb)}
    finish(
        forkpoint(
            cassette,
            "record",
            "--name",
            "r",
            "--upstream",
            upstream.url,
            "--",
            sys.executable,
            str(AGENT),
            env={**env, "CRASH_AFTER": str(steps)},
        )
    )
    upstream.arrivals.clear()
    started = time.time()
    finish(
        forkpoint(
            cassette,
            "resume",
            "r",
            "--upstream",
            upstream.url,
            "--",
            sys.executable,
            str(AGENT),
            env=env,
        )
    )
    assert len(upstream.arrivals) == 1, upstream.arrivals
    return upstream.arrivals[0] - started


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
    quick = parser.parse_args().quick
    steps = 20 if quick else 200
    upstream = Clocked()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            fork_s, startup_s, per_step_s = bench_fork(work, upstream, steps)
            resume_s = bench_resume(work, upstream, steps, 1024)
            with_adapter, without = bench_snapshot_overhead(work, upstream, 30 if quick else 200)
    finally:
        upstream.close()
    rows = [
        (
            f"fork at step {steps - 1} of {steps}: to first live request",
            f"{fork_s:.3f} s",
            1.5,
            fork_s,
        ),
        (
            "  of which start-up (forkpoint, then the agent's imports)",
            f"{startup_s:.3f} s",
            1.5,
            startup_s,
        ),
        ("  per replayed step", f"{per_step_s * 1000:.2f} ms", 5.0, per_step_s * 1000),
        (
            f"resume, {steps} steps, 1 MB state: to first live request",
            f"{resume_s:.3f} s",
            1.0,
            resume_s,
        ),
        (
            "snapshot overhead, 100 kB state, p50 per LLM request",
            f"{with_adapter - without:.2f} ms ({with_adapter:.2f} vs {without:.2f})",
            3.0,
            with_adapter - without,
        ),
    ]
    print(f"{'measure':58}  {'value':>30}  {'target':>8}  ok")
    for name, text, limit, value in rows:
        print(
            f"{name:58}  {text:>30}  {'< ' + str(limit):>8}  {'PASS' if value < limit else 'FAIL'}"
        )


if __name__ == "__main__":
    main()
