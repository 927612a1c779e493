"""Benchmark: what forkpoint's interceptor (`--intercept`) costs, next to mitmdump alone.

One run, one local HTTPS upstream (the gateway benchmark's chat server, with a certificate from
a throwaway CA), three ways to reach it, each server in its own process: `direct` HTTPS,
`mitmdump` as an HTTPS_PROXY (regular mode, its defaults), and forkpoint's interceptor
recording every exchange into an SQLite cassette. Both proxies trust the upstream's CA and
answer with certificates from the same forkpoint CA, which the client trusts.

Target: the interceptor costs at most 1.3 times what mitmdump costs per request, in added c=1
latency (p50) and in proxy CPU per request at c=32.

    .venv/bin/python benchmarks/interceptor.py            # about a minute
    .venv/bin/python benchmarks/interceptor.py --quick    # a smoke run, under 30 s
    .venv/bin/python benchmarks/interceptor.py --strict   # exit 1 when the target is missed
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import _procs
import _upstream
import aiohttp
from _workload import chat_body, concurrent, p50, p99, sequential, streams
from aiohttp import web
from gateway import Measured, Plan

from forkpoint.runtime import certs
from forkpoint.testing.https import TestCA

TARGETS = ("direct", "mitmdump", "intercept")
TARGET_RATIO = 1.3


FULL = Plan(rounds=6, c1=150, c32=400, streams=8, warmup=100)
QUICK = Plan(rounds=1, c1=40, c32=120, streams=8, warmup=24, chunk_delay=0.005)


@dataclass
class Target:
    name: str
    child: _procs.Child
    client: aiohttp.ClientSession
    measured: Measured = field(default_factory=Measured)


# The child processes


async def _serve_upstream(port: int, cert: str, key: str, chunk_delay: float) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    runner = web.AppRunner(_upstream.app(64, chunk_delay), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    await asyncio.Event().wait()


def _upstream_child(logs: Path, cert: Path, key: Path, chunk_delay: float) -> _procs.Child:
    """This file again, serving the chat upstream over HTTPS (polled: `_procs` reads only
    http URLs from a child)."""
    port = _procs.free_port()
    argv = [sys.executable, __file__, "--upstream", str(port), str(cert), str(key),
            str(chunk_delay)]  # fmt: skip
    return _procs.Child("upstream", argv, logs, port=port)


def _forkpoint(logs: Path, upstream_ca: Path) -> _procs.Child:
    """`forkpoint serve --intercept`, as a user runs it, recording into its own cassette."""
    port = _procs.free_port()
    argv = [sys.executable, "-m", "forkpoint", "serve", "--cassette", str(logs / "c.db"),
            "--port", "0", "--intercept", "--intercept-port", str(port),
            "--upstream-ca", str(upstream_ca)]  # fmt: skip
    return _procs.Child("intercept", argv, logs, port=port)


def _mitmdump(logs: Path, confdir: Path, upstream_ca: Path) -> _procs.Child:
    exe = Path(sys.executable).with_name("mitmdump")
    port = _procs.free_port()
    argv = [str(exe), "--mode", f"regular@127.0.0.1:{port}", "-q", "--set", f"confdir={confdir}",
            "--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}"]  # fmt: skip
    return _procs.Child("mitmdump", argv, logs, port=port)


# The measurement


async def measure(plan: Plan) -> dict[str, Measured]:
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as tmp:
        logs = Path(tmp)
        ca = TestCA(logs / "test-ca")
        cert, key = ca.issue(["127.0.0.1"])
        os.environ["XDG_CONFIG_HOME"] = str(logs)  # forkpoint's CA, for the children too
        confdir = certs.config_dir()
        forkpoint_ca = certs.ca_cert(confdir)
        children = [_upstream_child(logs, cert, key, plan.chunk_delay)]
        try:
            url = children[0].ready().replace("http://", "https://")
            children += [_mitmdump(logs, confdir, ca.cert_path), _forkpoint(logs, ca.cert_path)]
            trusted = ssl.create_default_context(cafile=ca.cert_path)
            trusted.load_verify_locations(forkpoint_ca)
            targets = [
                Target(name, child, _client(trusted, None if name == "direct" else child))
                for name, child in zip(TARGETS, children, strict=True)
            ]
            return await _rounds(plan, url, targets)
        finally:
            for child in reversed(children):
                child.stop()


def _client(context: ssl.SSLContext, proxy: _procs.Child | None) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=600, ssl=context)
    return aiohttp.ClientSession(connector=connector, proxy=proxy and proxy.ready())


async def _rounds(plan: Plan, url: str, targets: list[Target]) -> dict[str, Measured]:
    warm = [chat_body("warm", i) for i in range(plan.warmup)]
    c1 = [chat_body("c1", i) for i in range(plan.c1)]
    c32 = [chat_body("c32", i) for i in range(plan.c32)]
    sse = [chat_body("stream", i, stream=True) for i in range(plan.streams)]
    try:
        for target in targets:
            await concurrent(target.client, url, warm, 8)
            await streams(target.client, url, sse, 8)
            await target.child.settle()
        for round_ in range(plan.rounds):
            shift = round_ % len(targets)
            order = targets[shift:] + targets[:shift]  # a noisy moment lands on all alike
            for target in order:
                target.measured.latency += await sequential(target.client, url, c1)
                await target.child.settle()
            for target in order:
                before = target.child.cpu()
                elapsed = await concurrent(target.client, url, c32, 32)
                target.measured.cpu += await target.child.settle() - before
                target.measured.rps.append(len(c32) / elapsed)
                target.measured.requests += len(c32)
            for target in order:
                timings = await streams(target.client, url, sse, 8, stagger=plan.chunk_delay / 8)
                target.measured.first_byte += [first for first, _ in timings]
                target.measured.last_byte += [last for _, last in timings]
                await target.child.settle()
    finally:
        for target in targets:
            await target.client.close()
    return {target.name: target.measured for target in targets}


# The table


def render(
    results: Mapping[str, Measured], plan: Plan, wall_s: float, other: float
) -> tuple[str, bool]:
    """The table as text, and whether the target was missed."""

    def added(pick: Callable[[Measured], float]) -> dict[str, float]:
        base = pick(results["direct"]) * 1000
        return {n: base if n == "direct" else pick(r) * 1000 - base for n, r in results.items()}

    latency = added(lambda r: p50(r.latency))
    cpu = {n: r.cpu / r.requests * 1e6 for n, r in results.items() if n != "direct"}
    rps = {n: statistics.median(r.rps) for n, r in results.items()}
    checks = {
        "c=1 latency p50, ms": latency["intercept"] / latency["mitmdump"],
        "c=32 proxy CPU, us/req": cpu["intercept"] / cpu["mitmdump"],
    }
    rows = [
        ("c=1 latency p50, ms", latency, "{:+.2f}"),
        ("c=1 latency p99, ms", added(lambda r: p99(r.latency)), "{:+.2f}"),
        ("c=32 requests/s", rps, "{:.0f}"),
        ("c=32 req/s / direct's", {n: v / rps["direct"] for n, v in rps.items()}, "{:.2f}"),
        ("c=32 proxy CPU, us/req", cpu, "{:.0f}"),
        ("c=8 SSE first byte p50, ms", added(lambda r: p50(r.first_byte)), "{:+.2f}"),
        ("c=8 SSE last byte p50, ms", added(lambda r: p50(r.last_byte)), "{:+.2f}"),
    ]
    lines = [
        f"forkpoint interceptor benchmark: {plan.rounds} round(s) of {plan.c1} requests at c=1, "
        f"{plan.c32} at c=32, {plan.streams} SSE streams (64 chunks, "
        f"{plan.chunk_delay * 1000:.0f} ms apart) at c=8; {os.cpu_count()} CPUs; {wall_s:.0f} s",
        f"Other work on the machine kept {other:.1f} CPUs busy on average.",
        "",
        f"{'':28}" + "".join(f"{name:>11}" for name in TARGETS) + f"{'intercept/mitmdump':>22}",
    ]
    for label, values, fmt in rows:
        cells = "".join(
            f"{(fmt if n != 'direct' or '+' not in fmt else '{:.2f}').format(values[n]):>11}"
            if n in values else f"{'-':>11}"
            for n in TARGETS
        )  # fmt: skip
        ratio = checks.get(label)
        verdict = (
            ""
            if ratio is None
            else f"{ratio:.2f} <= {TARGET_RATIO} " + ("PASS" if ratio <= TARGET_RATIO else "FAIL")
        )
        lines.append(f"{label:28}{cells}{verdict:>22}")
    lines += [
        "",
        "direct: absolute times. Proxies: +ms they add to direct (p99 row: difference of p99s).",
        "proxy CPU: the proxy process's CPU (all threads, work after the load included) per",
        "  request.",
        "mitmdump buffers SSE unless told to stream, so its first byte comes with its last;",
        "  the interceptor streams each chunk on as it arrives (and records it).",
    ]
    return "\n".join(lines), any(ratio > TARGET_RATIO for ratio in checks.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--upstream", nargs=4, help=argparse.SUPPRESS)  # the upstream child
    args = parser.parse_args()
    if args.upstream:
        port, cert, key, chunk_delay = args.upstream
        asyncio.run(_serve_upstream(int(port), cert, key, float(chunk_delay)))
        return 0
    plan = QUICK if args.quick else FULL
    started, load = time.perf_counter(), _procs.OtherLoad()
    results = asyncio.run(measure(plan))
    table, failed = render(results, plan, time.perf_counter() - started, load.cpus())
    print(table)
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
