"""park_fleet.py's fleet: one `serve` holding many parked runs, then waking many at once.

Each run's agent is a small shell script (curl): a model call, then a request that parks, then
a model call once woken. Half the runs park on a rule (`POST /approvals*`, sent nowhere); the
other half on the upstream's tool that never answers (`--park-after 1s`), whose requests serve
keeps open while the run is parked. Each agent is started as a platform would: spawned, its
launch told to serve (`POST /_forkpoint/runs/RUN/launch`, with its pid), then let go.

Memory is serve's resident set and its writer process's, read from /proc once each settles.
The writer process starts once, when the recording's pace first passes its threshold (a
gateway under load), whatever number of runs serve holds: its start is a fixed cost, reported
apart, never spread over the runs parked while it happened (as the first version of this
benchmark did: 29 MiB over 500 runs read as 58 KiB a run).
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from _park_serve import (
    Upstream,
    env,
    reading,
    rss_kib,
    start_serve,
    stop,
    wait_until,
)
from _procs import _process_tree

from forkpoint.models import RunStatus

# The agent: it waits for its launch to be told (a line on stdin, or none once woken), then
# asks the model, then makes the request that parks it (WAITS_ON), then asks the model again.
AGENT_SH = """\
read -r _ || true
ask() {
    curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' \\
        "$OPENAI_BASE_URL/chat/completions" \\
        -d '{"model": "gpt-4o", "messages": [{"role": "user", "content": "'"$1"'"}]}'
}
ask "hello"
curl -sf -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"please": 1}' \\
    "$FORKPOINT_URL/r/$FORKPOINT_RUN/$WAITS_ON"
ask "thanks"
"""
TARGET_KIB = 20.0
CONCURRENCY = 8  # agents being started and parked at a time
WARM_UP = 20  # runs parked before the baseline is read: serve's lazy imports and caches


@dataclass
class Fleet:
    runs: int
    rule_kib: float  # serve's RSS added per run parked on a rule (with its writer's)
    upstream_kib: float  # per run parked on an upstream (its request kept open)
    writer_kib: int  # the writer process's RSS when it started (0: it never did)
    parked_s: float  # wall time to start and park them all
    agents_alive: int
    woken: int
    finished: int
    wake_wall_s: float

    def text(self) -> str:
        half = self.runs // 2
        both = (self.rule_kib + self.upstream_kib) / 2
        writer = (f"serve's writer process, started once under load: {self.writer_kib / 1024:.1f} "
                  "MiB when first seen (a fixed cost, not counted per run)" if self.writer_kib
                  else "no writer process started")  # fmt: skip
        lines = [
            f"{self.runs} parked runs held by one serve (SQLite): {half} on a rule, {half} on "
            f"an upstream that never answers; parked in {self.parked_s:.1f} s",
            f"  memory added per parked run: {both:.1f} KiB  (on a rule {self.rule_kib:.1f}, "
            f"on an upstream {self.upstream_kib:.1f})   target < {TARGET_KIB:.0f} KiB "
            f"{'PASS' if both < TARGET_KIB else 'FAIL'}",
            f"  {writer}",
            f"  agent processes alive while parked: {self.agents_alive}   "
            f"{'PASS' if self.agents_alive == 0 else 'FAIL'}",
            f"  {self.woken} answered at once: {self.finished} finished, wall "
            f"{self.wake_wall_s:.1f} s (first answer sent to last run finished)   "
            f"{'PASS' if self.finished == self.woken else 'FAIL'}",
        ]
        return "\n".join(lines)


def run_fleet(work: Path, upstream: Upstream, runs: int, woken: int) -> Fleet:
    script = work / "agent.sh"
    script.write_text(AGENT_SH)
    location = str(work / "fleet.db")
    serve, url = start_serve(location, upstream.url, "--park", "POST /approvals*",
                             "--park-after", "1s", log=work / "serve-fleet.log")  # fmt: skip
    try:
        agents: list[subprocess.Popen[bytes]] = []
        park_all(url, script, [f"warm-{i}" for i in range(WARM_UP)], agents)
        wait_parked(location, WARM_UP)
        before = Memory.settled(serve.pid)
        started = time.monotonic()
        half = runs // 2
        park_all(url, script, [f"rule-{i}" for i in range(half)], agents)
        wait_parked(location, WARM_UP + half)
        on_rule = Memory.settled(serve.pid)
        park_all(url, script, [f"stall-{i}" for i in range(half)], agents)
        wait_parked(location, WARM_UP + 2 * half)
        parked_s = time.monotonic() - started
        after = Memory.settled(serve.pid)
        alive = sum(1 for agent in agents if agent.poll() is None)
        alive += len(_process_tree(serve.pid)) - len(writers(serve.pid))
        wall, done = wake_at_once(url, location, [f"rule-{i}" for i in range(woken)])
    finally:
        stop(serve)
    return Fleet(
        runs=2 * half, rule_kib=on_rule.added(before) / half,
        upstream_kib=after.added(on_rule) / half, writer_kib=after.writer_started(before),
        parked_s=parked_s, agents_alive=alive, woken=woken, finished=done, wake_wall_s=wall,
    )  # fmt: skip


@dataclass
class Memory:
    """serve's resident set and its writer processes' (KiB, by pid), at one moment."""

    serve: int
    writers: dict[int, int]

    @classmethod
    def settled(cls, pid: int) -> Memory:
        """Once serve's RSS (with its writer's) stopped changing (its writer drained)."""
        settled_rss(pid)
        return cls(rss_kib(pid, tree=False), {w: rss_kib(w, tree=False)
                                              for w in writers(pid) if w != pid})  # fmt: skip

    def added(self, before: Memory) -> int:
        """KiB added since `before`: serve's, and its writers' that ran then already (a
        writer started since is `writer_started`)."""
        grown = sum(kib - before.writers[w] for w, kib in self.writers.items()
                    if w in before.writers)  # fmt: skip
        return self.serve - before.serve + grown

    def writer_started(self, before: Memory) -> int:
        """The RSS of a writer process that started since `before`, else of the one there."""
        new = [kib for w, kib in self.writers.items() if w not in before.writers]
        return sum(new) if new else sum(self.writers.values())


def park_all(url: str, script: Path, run_ids: list[str], agents: list) -> None:  # type: ignore[type-arg]
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool, httpx.Client() as client:
        for agent in pool.map(lambda run_id: park_one(client, url, script, run_id), run_ids):
            agents.append(agent)


def park_one(client: httpx.Client, url: str, script: Path, run_id: str) -> subprocess.Popen[bytes]:
    """Start `run_id`'s agent through serve, tell serve its launch, and wait until it has been
    ended by its park (its exit status reaped)."""
    waits_on = "approvals/ok" if run_id.startswith(("rule", "warm")) else "stall/slow"
    kept = env({"WAITS_ON": waits_on})
    agent = subprocess.Popen(
        ["sh", str(script)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
        env={**kept, "OPENAI_BASE_URL": f"{url}/r/{run_id}/v1", "FORKPOINT_URL": url,
             "FORKPOINT_RUN": run_id},
    )  # fmt: skip
    launch = {"command": ["sh", str(script)], "cwd": str(script.parent), "env": kept,
              "pid": agent.pid}  # fmt: skip
    client.post(f"{url}/_forkpoint/runs/{run_id}/launch", json=launch).raise_for_status()
    assert agent.stdin is not None
    agent.stdin.write(b"go\n")
    agent.stdin.close()
    if agent.wait(120) == 0:
        raise SystemExit(f"run {run_id}'s agent finished without parking")
    return agent


def wait_parked(location: str, count: int) -> None:
    def parked() -> bool:
        found = reading(location, lambda s: s.parks(states=("parked",), limit=count + 1))
        return len(found) >= count

    wait_until(parked, 120, f"{count} runs parked", every=0.2)


def settled_rss(pid: int) -> int:
    """serve's RSS (KiB) once it stopped changing for a second (its writer drained)."""
    last = rss_kib(pid)
    for _ in range(20):
        time.sleep(1.0)
        now = rss_kib(pid)
        if abs(now - last) < 64:
            return now
        last = now
    return last


def writers(pid: int) -> list[int]:
    """serve and the processes it runs of its own (its writer): not agents."""
    own = []
    for each in _process_tree(pid):
        try:
            command = Path(f"/proc/{each}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkpoint" in command or b"multiprocessing" in command or each == pid:
            own.append(each)
    return own


def wake_at_once(url: str, location: str, run_ids: list[str]) -> tuple[float, int]:
    """Answer every run in `run_ids` at once; seconds from the first answer sent to the last
    run finished (its `ended_at`), and how many finished within 10 minutes."""

    def answer(run_id: str) -> int:
        body = '{"approved": true, "by": "bench"}'
        return httpx.post(f"{url}/_forkpoint/runs/{run_id}/answer", content=body,
                          timeout=120).status_code  # fmt: skip

    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(run_ids)) as pool:
        statuses = list(pool.map(answer, run_ids))
    if set(statuses) != {200}:
        raise SystemExit(f"answers refused: {sorted(set(statuses))}")

    def ends() -> list[float]:
        runs = reading(location, lambda s: [s.get_run(run_id) for run_id in run_ids])
        return [r.ended_at for r in runs if r.status is RunStatus.FINISHED and r.ended_at]

    deadline = time.monotonic() + 600
    done = ends()
    while len(done) < len(run_ids) and time.monotonic() < deadline:
        time.sleep(0.5)
        done = ends()
    return (max(done) - started if done else float("nan")), len(done)
