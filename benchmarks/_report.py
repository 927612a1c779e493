"""The benchmark's table: one row per measure, one column per target, then the targets met.

Latencies in the direct column are absolute; in the proxy columns they are what the proxy
adds to direct, since that is the proxy's own cost.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from _workload import p50, p99

if TYPE_CHECKING:
    from gateway import Measured, Plan

COLUMNS = ("direct", "minimal", "mitmdump", "record", "record-rules", "record-against", "replay")
CHUNKS = 64  # SSE events per stream (the upstream's)
# Above this, the cores are oversubscribed and req/s favours a proxy with more threads (CFS
# shares CPU per thread): forkpoint's writer process then buys it CPU the minimal proxy lacks.
BUSY_CPUS = 0.3
BUSY = ": too busy for req/s ratios to hold; compare the CPU rows."


@dataclass(frozen=True)
class Check:
    """`value` must be at most (or at least) `limit`."""

    value: float
    limit: float
    at_most: bool
    digits: int = 2

    @property
    def passed(self) -> bool:
        return self.value <= self.limit if self.at_most else self.value >= self.limit

    def __str__(self) -> str:
        sign = "<=" if self.at_most else ">="
        return f"{sign} {self.limit:.{self.digits}f} {'PASS' if self.passed else 'FAIL'}"


@dataclass(frozen=True)
class Row:
    label: str
    values: Mapping[str, float]  # a target without a value shows '-'
    fmt: Callable[[str, float], str]
    record: Check | None = None
    replay: Check | None = None


def _added(name: str, value: float) -> str:
    return f"{value:.2f}" if name == "direct" else f"{value:+.2f}"


def _plain(digits: int) -> Callable[[str, float], str]:
    return lambda _name, value: f"{value:.{digits}f}"


def _ms_added(
    results: Mapping[str, Measured], pick: Callable[[Measured], float]
) -> dict[str, float]:
    """Per target, ms above direct; direct itself keeps its absolute value."""
    base = pick(results["direct"]) * 1000
    return {n: base if n == "direct" else pick(r) * 1000 - base for n, r in results.items()}


def _paired(results: Mapping[str, Measured], base: str) -> dict[str, float]:
    """Median over rounds of each target's req/s over `base`'s in the same round: the noise
    of a shared machine moves both sides of a ratio taken seconds apart alike."""
    return {
        n: statistics.median(a / b for a, b in zip(r.rps, results[base].rps, strict=True))
        for n, r in results.items()
    }


def rows(results: Mapping[str, Measured]) -> list[Row]:
    c1_p50 = _ms_added(results, lambda r: p50(r.latency))
    c1_p99 = _ms_added(results, lambda r: p99(r.latency))
    rps = {n: statistics.median(r.rps) for n, r in results.items()}
    to_minimal = _paired(results, "minimal")
    cpu = {n: r.cpu / r.requests * 1e6 for n, r in results.items() if n != "direct"}
    # What each proxy could serve were its own CPU the bottleneck, relative to the minimal one.
    per_cpu = {n: cpu["minimal"] / v for n, v in cpu.items()}
    to_cpu = {n: v / cpu["minimal"] for n, v in cpu.items()}
    writer = {n: (r.cpu - r.own_cpu) / r.requests * 1e6 for n, r in results.items() if n in cpu}
    per_stream = {n: r.stream_cpu / r.streams * 1e6 for n, r in results.items() if n != "direct"}
    # A stream's CPU beyond a plain request's, per SSE event; and that, beyond the minimal's.
    per_chunk = {n: (per_stream[n] - cpu[n]) / CHUNKS for n in per_stream}
    chunk_added = {n: v - per_chunk["minimal"] for n, v in per_chunk.items()}
    ttfb = _ms_added(results, lambda r: p50(r.first_byte))
    ttlb = _ms_added(results, lambda r: p50(r.last_byte))
    return [
        Row("c=1 latency p50, ms", c1_p50, _added,
            record=Check(c1_p50["record"], 1.5 * c1_p50["minimal"], at_most=True)),
        Row("c=1 latency p99, ms", c1_p99, _added),
        Row("c=32 requests/s", rps, _plain(0)),
        Row("c=32 req/s / direct's", _paired(results, "direct"), _plain(2)),
        Row("c=32 req/s / minimal's", to_minimal, _plain(2),
            record=Check(to_minimal["record"], 0.75, at_most=False),
            replay=Check(to_minimal["replay"], 1.0, at_most=False) if "replay" in rps else None),
        Row("c=32 proxy CPU, us/req", cpu, _plain(0)),
        Row("  of which writer process", writer, _plain(0)),
        Row("c=32 proxy CPU / minimal's", to_cpu, _plain(2),
            record=Check(to_cpu["record"], 1.5, at_most=True)),
        Row("c=32 req per CPU-s / minimal's", per_cpu, _plain(2)),
        Row("c=8 proxy CPU, us/stream", per_stream, _plain(0)),
        Row("c=8 proxy CPU, us/chunk", per_chunk, _plain(1)),
        Row("c=8 us/chunk over minimal's", chunk_added, _plain(1),
            record=Check(chunk_added["record"], 30, at_most=True, digits=0)),
        Row("c=8 SSE first byte p50, ms", ttfb, _added,
            record=Check(ttfb["record"], 1.5 * ttfb["minimal"], at_most=True)),
        Row("c=8 SSE last byte p50, ms", ttlb, _added),
    ]  # fmt: skip


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    first, *rest = zip(cells, widths, strict=True)
    return first[0].ljust(first[1]) + "".join(c.rjust(w) for c, w in rest)


def render(
    results: Mapping[str, Measured], plan: Plan, workload: str, wall_s: float, other_cpus: float
) -> tuple[str, bool]:
    """The table as text, and whether any target failed."""
    table = rows(results)
    columns = [n for n in COLUMNS if n in results] + [n for n in results if n not in COLUMNS]
    widths = [31, *[13] * len(columns), 18, 18]
    lines = [
        f"forkpoint gateway benchmark, workload {workload}: {plan.rounds} round(s); per target "
        "and round "
        f"{plan.c1} requests at c=1, {plan.c32} at c=32, {plan.streams} SSE streams "
        f"(64 chunks, {plan.chunk_delay * 1000:.0f} ms apart) at c=8; {os.cpu_count()} CPUs; "
        f"{wall_s:.0f} s",
        f"Other work on the machine kept {other_cpus:.1f} CPUs busy on average"
        + (BUSY if other_cpus > BUSY_CPUS else "."),
        "",
        _line(["", *columns, "record target", "replay target"], widths),
    ]
    for row in table:
        cells = [row.fmt(n, row.values[n]) if n in row.values else "-" for n in columns]
        checks = [str(check) if check else "" for check in (row.record, row.replay)]
        lines.append(_line([row.label, *cells, *checks], widths))
    lines += [
        "",
        "direct: absolute times. Proxies: +ms they add to direct (p99 row: difference of p99s).",
        "req/s: median over rounds; ratios: median of ratios within each round.",
        "proxy CPU: its process's CPU (and its writer process's), all threads, work after the",
        "  load included, per request or stream; per chunk: a stream's beyond a request's, / 64;",
        "  req per CPU-s: what a proxy would serve were its own CPU the bottleneck (steadier",
        "  than req/s here, where client, upstream and proxy share the cores).",
        "Targets are set against the minimal aiohttp proxy (benchmarks/minimal_proxy.py).",
        "record-rules: record with optional routes, an MCP route, secret names and ignored",
        "  fields that no request here meets (benchmarks/_run_forkpoint.py RULES).",
        "record-against: record, with the forkpoint/ of --against (a before, in the same run).",
        "mitmdump buffers SSE unless told to stream, so its first byte comes with its last.",
        "replay serves recorded streams as fast as it can (no upstream, no pacing).",
    ]
    failed = any(c and not c.passed for row in table for c in (row.record, row.replay))
    return "\n".join(lines), failed
