"""Benchmark: where `record` spends its CPU on gateway.py's c=32 workload, part by part, next
to the minimal proxy's, from py-spy samples of each process while it serves.

The minimal proxy (on uvloop, as forkpoint runs) and forkpoint recording are started in
front of the same upstream, warmed up, then each is loaded alone at c=32 with the `sdk`
workload (4 KB bodies, the openai SDK's own headers) while py-spy samples it and its writer
process. Only samples of a thread holding the GIL are kept (`--gil`): a thread waiting on a
queue, a pipe or a lock is idle, not working, whatever its stack says. Each sample is given
to a part: by the forkpoint module nearest the top of its stack (a library such as orjson,
zstd, re2 or sqlite3 called from forkpoint's code counts as that module's part), in the
process it ran in. Samples per 1,000 requests, and the share of the CPU each part takes
(the process and its writer process, measured over the same seconds). py-spy slows what it
samples, forkpoint's two processes more than the minimal's one: the shares are what this is
for, not the totals. aiohttp and asyncio count as "aiohttp and the loop" wherever they are
called from (forkpoint's upstream client, its replies): what they cost beyond the minimal's
is what forkpoint asks more of them. See benchmarks/README.md.

    .venv/bin/python benchmarks/profile_record.py              # about a minute
    .venv/bin/python benchmarks/profile_record.py --seconds 40 --raw DIR   # keep the samples

Needs py-spy (`pip install py-spy`): a profiler, not a dependency of forkpoint's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _procs
from _workload import concurrent, new_client, sdk_request

# A forkpoint module's part, by the start of its path under forkpoint/ (first match wins);
# named for the process it ran in ("proxy: ", "writer: ").
PARTS = (
    ("runtime/recording/child.py", "frames and unpickling"),
    ("runtime/recording/writer.py", "batches"),
    ("engine/derive.py", "derive (summary, fingerprint)"),
    ("engine/matching.py", "derive (summary, fingerprint)"),
    ("cassettes/sqlite", "SQLite"),
    ("cassettes", "pack (cut, hash, compress, rows)"),
    ("engine/redaction.py", "secrets masked"),
    ("engine/shapes.py", "secrets masked"),
    ("engine/members.py", "secrets masked"),
    ("engine/lifecycle.py", "the tee"),
    ("engine/dialects", "dialects (summaries, an API's shapes)"),
    ("engine/encoding.py", "headers looked up, bodies decoded"),
    ("engine", "the decision, the engine's other parts"),
    ("runtime/recording", "journal and hand-off to the writer"),
    ("runtime/upstream.py", "the upstream request (forkpoint's side)"),
    ("doors", "doors (gateway, carrier, replies, auth)"),
    ("runtime", "sessions and the rest of the runtime"),
    ("models.py", "records (dataclasses)"),
)
LOOP = "aiohttp and the loop"
_WRITER = "recording.child import main"  # in the writer process's command line
_LIBRARIES = ("aiohttp/", "asyncio/", "uvloop/", "multidict/", "yarl/", "runners.py")


def part_of(process: str, frames: list[str]) -> str:
    """The part a sample's stack (outermost first) of `process` (py-spy's line for it) is
    given to."""
    where = "writer: " if _WRITER in process else "proxy: "
    for frame in reversed(frames):
        path = _path(frame)
        inner = _forkpoint_module(path)
        if inner is not None:
            return where + next((part for start, part in PARTS if inner.startswith(start)), inner)
        if path.startswith("<string>"):  # a dataclass's generated __init__
            continue
        if any(library in path for library in _LIBRARIES):
            return LOOP
    return "other"


def _forkpoint_module(path: str) -> str | None:
    """`path`'s name under forkpoint/ (py-spy names a module relative to its sys.path entry)."""
    if path.startswith("forkpoint/"):
        return path.removeprefix("forkpoint/")
    return path.rsplit("/forkpoint/", 1)[1] if "/forkpoint/" in path else None


def _path(frame: str) -> str:
    """The file of a py-spy frame `function (path:line)`."""
    start = frame.rfind("(")
    return frame[start + 1 : frame.rfind(":")] if start >= 0 else frame


def tally(raw: Path) -> collections.Counter[str]:
    """Samples by part, from py-spy's raw (collapsed) output."""
    parts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            # py-spy's first "frame" is the process's command line, which for the writer
            # process is Python code with semicolons of its own
            process, _, rest = (
                stack.partition(' main()";') if _WRITER in stack else (stack.partition(";"))
            )
            parts[part_of(process, rest.split(";"))] += int(count)
    return parts


async def load(
    child: _procs.Child, spy: list[str], seconds: float, out: Path, bodies: list[bytes]
) -> tuple[int, float]:
    """Load `child` at c=32 with `bodies` while py-spy samples it: the requests sent, the CPU
    it took."""
    headers = sdk_request("headers", 0)[0]
    async with new_client() as client:
        await concurrent(client, child.url, bodies[:400], 32, headers)  # warm
        await child.settle()
        argv = [*spy, "record", "--gil", "--subprocesses", "--rate", "400", "--format", "raw",
                "--duration", str(round(seconds)), "--output", str(out),
                "--pid", str(child.pid)]  # fmt: skip
        sampler = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await asyncio.sleep(0.5)  # attached
        before, sent = child.cpu(), 0
        while sampler.poll() is None:
            await concurrent(client, child.url, bodies, 32, headers)
            sent += len(bodies)
        cpu = await child.settle() - before
        if sampler.returncode != 0 or not out.exists():
            error = sampler.stderr.read().decode() if sampler.stderr else ""
            raise SystemExit(f"profile_record: py-spy failed: {error.strip()[-300:]}")
        return sent, cpu


async def measure(seconds: float, raw: Path, spy: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="forkpoint-profile-") as tmp:
        logs = Path(tmp)
        upstream = _procs.upstream(logs, 0.02)
        children = [upstream]
        try:
            url = upstream.ready()
            targets = {
                "minimal": _procs.minimal(logs, url, uvloop=True),
                "record": _procs.forkpoint(
                    "record",
                    logs,
                    mode="record",
                    cassette=logs / "record.db",
                    run="bench",
                    upstream_url=url,
                ),
            }
            children += targets.values()
            for child in targets.values():
                child.ready()
            results = {}
            bodies = [sdk_request("c32", i)[1] for i in range(1000)]  # the same for both
            for name, child in targets.items():
                sent, cpu = await load(child, spy, seconds, raw / f"{name}.txt", bodies)
                results[name] = (sent, cpu, tally(raw / f"{name}.txt"))
        finally:
            for child in reversed(children):
                child.stop()
    print(render(results))


def render(results: dict[str, tuple[int, float, collections.Counter[str]]]) -> str:
    lines = ["`record` and the minimal proxy at c=32 (sdk workload), py-spy samples of threads "
             "holding the GIL,", "per 1,000 requests; us: that part's share of the process's "
             "CPU per request (py-spy attached)", ""]  # fmt: skip
    names = list(results)
    parts = sorted({p for _, _, t in results.values() for p in t},
                   key=lambda p: (p != LOOP, -results["record"][2][p]))  # fmt: skip
    head = f"{'part':<52}" + "".join(f"{n + ' samples':>17}{'us':>8}" for n in names)
    lines += [head, "-" * len(head)]
    for part in parts:
        row = f"{part:<52}"
        for name in names:
            sent, cpu, counted = results[name]
            share = counted[part] / max(sum(counted.values()), 1)
            row += f"{counted[part] * 1000 / sent:>17.1f}{share * cpu / sent * 1e6:>8.0f}"
        lines.append(row)
    total = f"{'whole process (and its writer process)':<52}"
    for name in names:
        sent, cpu, counted = results[name]
        total += f"{sum(counted.values()) * 1000 / sent:>17.1f}{cpu / sent * 1e6:>8.0f}"
    lines += ["-" * len(head), total]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25, help="sampled per target")
    parser.add_argument("--raw", type=Path, metavar="DIR",
                        help="keep py-spy's raw samples in DIR/{minimal,record}.txt")  # fmt: skip
    args = parser.parse_args()
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        print("profile_record: needs py-spy (pip install py-spy)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.raw is not None:
        args.raw.mkdir(parents=True, exist_ok=True)
        asyncio.run(measure(args.seconds, args.raw, [spy]))
    else:
        with tempfile.TemporaryDirectory() as raw:
            asyncio.run(measure(args.seconds, Path(raw), [spy]))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
