"""Benchmark: what the pytest plugin costs a test that replays, and a session that ignores it.

1. Replay: a test that replays a 100-exchange cassette (one in four streamed) over one
   keep-alive connection. Measured inside the test, from just before the `forkpoint` fixture is
   set up to the last response: the first such test in a session (it pays for importing the
   proxy) and a later one. Target: under 0.5 s.
2. Overhead: a session of one trivial test, with the plugin and with `-p no:forkpoint`, rounds
   alternating; and the import of the plugin module on its own. Target: under 0.2 s added.

Every measure is taken as wall time and as CPU time (all threads of the process). On a shared
machine wall times swing by seconds between runs; CPU time is what the work itself costs, and
what wall time comes to on an idle machine, since the work holds the GIL almost throughout.
The targets are checked on CPU time; both are printed.

    .venv/bin/python benchmarks/pytest_plugin.py              # about two minutes
    .venv/bin/python benchmarks/pytest_plugin.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.upstream import ScriptedUpstream

EXCHANGES = 100
REPLAY_LIMIT_S = 0.5
OVERHEAD_LIMIT_S = 0.2

REPLAY_TESTS = f"""
import http.client, json, os, time
from urllib.parse import urlsplit

import pytest

@pytest.fixture
def clock():
    return time.perf_counter(), time.process_time()

def replay(clock, forkpoint, name):
    ready = time.perf_counter(), time.process_time()
    # A plain keep-alive connection: what is measured is forkpoint, not an SDK's own cost.
    connection = http.client.HTTPConnection(urlsplit(forkpoint.url).netloc, timeout=10)
    for i in range({EXCHANGES}):
        body = {{"model": "gpt-4o", "messages": [{{"role": "user", "content": f"question {{i}}"}}]}}
        if i % 4 == 3:
            body["stream"] = True
        headers = {{"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}}
        connection.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        response.read()
    connection.close()
    done = time.perf_counter(), time.process_time()
    if forkpoint.served == "replay":
        row = {{"test": name, "setup": [ready[0] - clock[0], ready[1] - clock[1]],
               "total": [done[0] - clock[0], done[1] - clock[1]]}}
        with open(os.environ["BENCH_OUT"], "a") as out:
            out.write(json.dumps(row) + "\\n")

# No marker: a marked test's proxy starts before any fixture it asks for, `clock` included.
def test_first(clock, forkpoint):
    replay(clock, forkpoint, "first")

def test_second(clock, forkpoint):
    replay(clock, forkpoint, "second")
"""

Times = dict[str, list[tuple[float, float]]]  # measure -> [(wall s, CPU s)]


def pytest_run(folder: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall and CPU seconds of one pytest session in a fresh interpreter; exits if it fails."""
    cpu_before = _children_cpu()
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder, capture_output=True, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"pytest failed in {folder}:\n{result.stdout}\n{result.stderr}")
    return wall, _children_cpu() - cpu_before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def replay_times(folder: Path, rounds: int) -> Times:
    (folder / "test_replay.py").write_text(REPLAY_TESTS)
    thread = LoopThread("bench-upstream")
    upstream = ScriptedUpstream()
    url = thread.call(upstream.start())
    try:
        pytest_run(folder, "test_replay.py", "--forkpoint-record=once", "--forkpoint-upstream", url)
    finally:
        thread.call(upstream.close())
        thread.close()
    out = folder / "replay.jsonl"
    for _ in range(rounds):
        pytest_run(folder, "test_replay.py", env={"BENCH_OUT": str(out)})
    times: Times = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        times.setdefault(f"{row['test']} test: set-up", []).append(
            (row["setup"][0], row["setup"][1])
        )
        times.setdefault(f"{row['test']} test: set-up + replay", []).append(
            (row["total"][0], row["total"][1])
        )
    return times


def overhead_times(folder: Path, rounds: int) -> Times:
    (folder / "test_trivial.py").write_text("def test_nothing():\n    pass\n")
    pytest_run(folder, "test_trivial.py")  # warm the file system and bytecode caches
    times: Times = {"session with the plugin": [], "session, -p no:forkpoint": []}
    for _ in range(rounds):
        times["session with the plugin"].append(pytest_run(folder, "test_trivial.py"))
        times["session, -p no:forkpoint"].append(
            pytest_run(folder, "test_trivial.py", "-p", "no:forkpoint")
        )
    code = (
        "import time, pytest\n"
        "t, c = time.perf_counter(), time.process_time()\n"
        "import forkpoint.testing.pytest_plugin\n"
        "print(time.perf_counter() - t, time.process_time() - c)\n"
    )
    for _ in range(rounds):
        wall, cpu = map(float, subprocess.check_output([sys.executable, "-c", code]).split())
        times.setdefault("import of the plugin module", []).append((wall, cpu))
    return times


def median(values: list[tuple[float, float]], which: int) -> float:
    return statistics.median(v[which] for v in values)


def show(times: Times) -> None:
    for name, values in times.items():
        slowest = max(v[0] for v in values)
        print(
            f"  {name:32} wall median {median(values, 0):.3f} s (max {slowest:.3f})"
            f"   CPU median {median(values, 1):.3f} s"
        )


def check(text: str, value: float, limit: float) -> bool:
    print(f"{text:50} {value:+.3f} s CPU  < {limit} s  {'PASS' if value < limit else 'FAIL'}")
    return value < limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        replay = replay_times(folder, rounds)
        size = (folder / "cassettes" / "test_replay" / "test_first.yaml").stat().st_size
        overhead = overhead_times(folder, rounds)

    print(f"replaying {EXCHANGES} exchanges ({size // 1024} KiB cassette), {rounds} sessions")
    show(replay)
    print(f"a session of one trivial test, {rounds} rounds alternating")
    show(overhead)
    added = median(overhead["session with the plugin"], 1) - median(
        overhead["session, -p no:forkpoint"], 1
    )
    first = median(replay["first test: set-up + replay"], 1)
    later = median(replay["second test: set-up + replay"], 1)
    results = [
        check("first test: set-up (imports too) + replay", first, REPLAY_LIMIT_S),
        check("later test: set-up + replay", later, REPLAY_LIMIT_S),
        check("plugin overhead on a session", added, OVERHEAD_LIMIT_S),
    ]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
