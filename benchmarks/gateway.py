"""Benchmark: what forkpoint's gateway costs, next to a direct connection and two other proxies.

One run measures, against the same local upstream and each in its own process: a direct
connection, a minimal aiohttp pass-through (the floor for a Python proxy), mitmdump in reverse
mode, forkpoint recording (plainly, and with match and route settings no request of the
workload meets), and forkpoint replaying a run recorded from the same workload. The machine is
shared and noisy, so rounds alternate the targets and only ratios within one run mean anything.
See benchmarks/README.md for the workloads and targets.

    .venv/bin/python benchmarks/gateway.py            # about 3 minutes
    .venv/bin/python benchmarks/gateway.py --quick    # a smoke run, under 30 s
    .venv/bin/python benchmarks/gateway.py --workload history   # the ~2 KB history bodies
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import _procs
import _report
import aiohttp
from _workload import (
    HEADERS,
    Headers,
    chat_body,
    concurrent,
    new_client,
    sdk_request,
    sequential,
    streams,
)

TARGETS = ("direct", "minimal", "mitmdump", "record", "record-rules", "record-against", "replay")
SOURCE_RUN = "bench-source"  # the recording the replay target serves


@dataclass(frozen=True)
class Plan:
    """How much to send: per target and per round, except warm-up (once per target)."""

    rounds: int
    c1: int  # sequential requests
    c32: int  # requests at 32 in flight
    streams: int  # SSE streams at 8 in flight
    warmup: int
    chunk_delay: float = 0.02  # seconds between the upstream's 64 SSE events


FULL = Plan(rounds=8, c1=150, c32=500, streams=8, warmup=200)
# A smoke run: streams 4x faster, so the whole run stays well under 20 s on a busy machine.
QUICK = Plan(rounds=1, c1=40, c32=160, streams=8, warmup=32, chunk_delay=0.005)


@dataclass
class Measured:
    latency: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    cpu: float = 0.0  # CPU seconds of the target's process over the c=32 requests
    own_cpu: float = 0.0  # of them, its own process's (the rest: its writer process's)
    requests: int = 0
    stream_cpu: float = 0.0  # CPU seconds of the target's process over the streams
    streams: int = 0
    first_byte: list[float] = field(default_factory=list)
    last_byte: list[float] = field(default_factory=list)


def _sdk_body(kind: str, index: int, *, stream: bool = False) -> bytes:
    return sdk_request(kind, index, stream=stream)[1]


# A workload's request bodies, and the headers every request carries (`_workload`).
WORKLOADS = {"sdk": _sdk_body, "history": chat_body}


@dataclass(frozen=True)
class Bodies:
    headers: Headers
    warm: list[bytes]
    warm_streams: list[bytes]
    c1: list[bytes]
    c32: list[bytes]
    streams: list[bytes]

    @classmethod
    def for_plan(cls, plan: Plan, workload: str) -> Bodies:
        body = WORKLOADS[workload]
        return cls(
            headers=sdk_request("headers", 0)[0] if workload == "sdk" else HEADERS,
            warm=[body("warm", i) for i in range(plan.warmup)],
            warm_streams=[body("warm", i, stream=True) for i in range(8)],
            c1=[body("c1", i) for i in range(plan.c1)],
            c32=[body("c32", i) for i in range(plan.c32)],
            streams=[body("stream", i, stream=True) for i in range(plan.streams)],
        )


async def record_source(url: str, bodies: Bodies, rounds: int) -> None:
    """Send through a recording proxy every body the replay target will be sent, as often."""
    async with new_client() as client:
        await asyncio.gather(
            concurrent(client, url, bodies.warm + (bodies.c1 + bodies.c32) * rounds, 32,
                       bodies.headers),
            streams(client, url, bodies.warm_streams + bodies.streams * rounds, 32,
                    headers=bodies.headers),
        )  # fmt: skip


async def measure(
    plan: Plan, workload: str, profile: Path | None, loops: bool, skip: set[str],
    against: Path | None,
) -> dict[str, Measured]:  # fmt: skip
    bodies = Bodies.for_plan(plan, workload)
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as tmp:
        logs = Path(tmp)
        children: list[_procs.Child] = []
        try:
            upstream = _procs.upstream(logs, plan.chunk_delay)
            children.append(upstream)
            upstream_url = upstream.ready()
            source = _procs.forkpoint("source", logs, mode="record", cassette=logs / "replay.db",
                                      run=SOURCE_RUN, upstream_url=upstream_url)  # fmt: skip
            children.append(source)
            others = {
                "minimal": _procs.minimal(logs, upstream_url),
                "mitmdump": _procs.mitmdump(logs, upstream_url),
                "record": _procs.forkpoint(
                    "record", logs, mode="record", cassette=logs / "record.db", run="bench",
                    upstream_url=upstream_url, profile=profile and profile / "record.prof",
                    loop="asyncio" if profile else "default",  # cProfile reads asyncio's loop
                ),
                # settings no request here meets: they must cost it nothing
                "record-rules": _procs.forkpoint(
                    "record-rules", logs, mode="record", cassette=logs / "rules.db",
                    run="bench", upstream_url=upstream_url, rules=True,
                ),
            }  # fmt: skip
            if against is not None:  # the same, with other code: a before and an after
                others["record-against"] = _procs.forkpoint(
                    "record-against", logs, mode="record", cassette=logs / "against.db",
                    run="bench", upstream_url=upstream_url, code=against,
                )  # fmt: skip
            for name in skip - {"replay"}:  # replay starts later
                others.pop(name).stop()
            if loops:  # like for like: forkpoint on asyncio's loop, the floor on uvloop's
                others["record-asyncio"] = _procs.forkpoint(
                    "record-asyncio", logs, mode="record", cassette=logs / "record-aio.db",
                    run="bench", upstream_url=upstream_url, loop="asyncio",
                )  # fmt: skip
                others["minimal-uvloop"] = _procs.minimal(logs, upstream_url, uvloop=True)
            children += others.values()
            await record_source(source.ready(), bodies, plan.rounds)
            source.stop()  # commits the recording before the replay target loads it
            others["replay"] = _procs.forkpoint(
                "replay", logs, mode="replay", cassette=logs / "replay.db", run=SOURCE_RUN,
                profile=profile and profile / "replay.prof",
            )  # fmt: skip
            children.append(others["replay"])
            if "replay" in skip:
                others.pop("replay").stop()
            targets = {"direct": upstream, **others}
            return await _measure_all(plan, bodies, targets)
        finally:
            for child in reversed(children):
                child.stop()


@dataclass
class Target:
    """One column of the table: the process serving it, a keep-alive client, what it measured."""

    name: str
    child: _procs.Child
    client: aiohttp.ClientSession
    stagger: float  # between stream starts: spread over one chunk interval
    headers: Headers
    measured: Measured = field(default_factory=Measured)

    @property
    def url(self) -> str:
        return self.child.url

    async def latency(self, bodies: list[bytes]) -> None:
        self.measured.latency += await sequential(self.client, self.url, bodies, self.headers)
        await self.child.settle()

    async def throughput(self, bodies: list[bytes]) -> None:
        before, own = self.child.cpu(), self.child.own_cpu()
        elapsed = await concurrent(self.client, self.url, bodies, 32, self.headers)
        self.measured.cpu += await self.child.settle() - before  # and what it did afterwards
        self.measured.own_cpu += self.child.own_cpu() - own
        self.measured.rps.append(len(bodies) / elapsed)
        self.measured.requests += len(bodies)

    async def streams(self, bodies: list[bytes]) -> None:
        before = self.child.cpu()
        timings = await streams(
            self.client, self.url, bodies, 8, stagger=self.stagger, headers=self.headers
        )
        self.measured.first_byte += [first for first, _ in timings]
        self.measured.last_byte += [last for _, last in timings]
        self.measured.stream_cpu += await self.child.settle() - before
        self.measured.streams += len(bodies)


async def _measure_all(
    plan: Plan, bodies: Bodies, children: dict[str, _procs.Child]
) -> dict[str, Measured]:
    """Warm every target up, then run the rounds; each round rotates which target goes first,
    and each workload visits every target before the next workload starts."""
    stagger = plan.chunk_delay / 8
    names = [n for n in TARGETS if n in children] + [n for n in children if n not in TARGETS]
    targets = [
        Target(name, children[name], new_client(), stagger, bodies.headers) for name in names
    ]
    try:
        await asyncio.gather(*(_warm_up(target, bodies) for target in targets))
        for target in targets:
            await target.child.settle()
        for round_ in range(plan.rounds):
            shift = round_ % len(targets)
            order = targets[shift:] + targets[:shift]
            for target in order:
                await target.latency(bodies.c1)
            for target in order:
                await target.throughput(bodies.c32)
            for target in order:
                await target.streams(bodies.streams)
    finally:
        for target in targets:
            await target.client.close()
    return {target.name: target.measured for target in targets}


async def _warm_up(target: Target, bodies: Bodies) -> None:
    """Connections, imports and caches, for every target at once (the replay target may still
    be starting): none of it is measured."""
    await asyncio.to_thread(target.child.ready)
    await concurrent(target.client, target.url, bodies.warm, 8, bodies.headers)
    await streams(target.client, target.url, bodies.warm_streams, 8, headers=bodies.headers)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (under 30 s)")
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="sdk",
                        help="sdk (default): 4 KB bodies with the openai SDK's own headers; "
                             "history: ~2 KB tool-using histories")  # fmt: skip
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="add record-against: record with the forkpoint/ in DIR (a before)",
    )
    parser.add_argument(
        "--skip",
        default="",
        metavar="T,T",
        help="targets left out (mitmdump, replay, record-rules)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="cProfile the forkpoint processes into DIR/{record,replay}.prof "
                             "and their writer processes into DIR/*-writer.prof, record on "
                             "asyncio's loop (it slows them: the targets then mean "
                             "nothing)")  # fmt: skip
    parser.add_argument("--loops", action="store_true",
                        help="add record-asyncio and minimal-uvloop: record runs on uvloop "
                             "where it is installed, minimal on asyncio")  # fmt: skip
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    skip = {name for name in args.skip.split(",") if name}
    if unknown := skip - {"mitmdump", "replay", "record-rules"}:
        parser.error(f"--skip: not a target that can be left out: {', '.join(sorted(unknown))}")
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        args.profile = args.profile.resolve()
    started, load = time.perf_counter(), _procs.OtherLoad()
    measuring = measure(plan, args.workload, args.profile, args.loops, skip, args.against)
    results = asyncio.run(measuring)
    wall = time.perf_counter() - started
    table, failed = _report.render(results, plan, args.workload, wall, load.cpus())
    print(table)
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
