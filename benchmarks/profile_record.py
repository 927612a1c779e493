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

With `--sampler perf`, Linux's `perf` samples instead, on-CPU time only (Python's perf maps,
PYTHONPERFSUPPORT, name each sample's innermost Python function): a process that holds the
GIL but waits for a core, as on 2 cores shared by four busy processes it often does, is not
sampled, where py-spy's wall-clock samples count it as work; and the kernel's share is its
own line. A sample goes to the innermost Python function's part (perf cannot unwind past
Python's trampolines): a library called from forkpoint counts as forkpoint's part, aiohttp
code as the loop's.

    .venv/bin/python benchmarks/profile_record.py              # about a minute
    .venv/bin/python benchmarks/profile_record.py --seconds 40 --raw DIR   # keep the samples
    .venv/bin/python benchmarks/profile_record.py --sampler perf           # on-CPU time

Needs py-spy (`pip install py-spy`) or perf (Debian's `linux-perf`): profilers, not
dependencies of forkpoint's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
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


KERNEL = "of which in the kernel"
# Python code perf shows innermost that only one part calls (perf cannot unwind past it)
_CALLED_BY = (("/re2/", "secrets masked"), ("<string>", "records (dataclasses)"))


def tally_perf(data: Path, proxy_pid: int) -> collections.Counter[str]:
    """Samples by part, from `perf record`'s data: each sample's innermost Python frame
    (`py::function:path`), in the proxy's process or its writer's."""
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "pid,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    parts: collections.Counter[str] = collections.Counter()
    for sample in script.split("\n\n"):
        lines = sample.strip().splitlines()
        if len(lines) < 2:
            continue
        proxy = lines[0].split()[0] == str(proxy_pid)
        where = "proxy: " if proxy else "writer: "
        python = next((line.split("py::", 1)[1] for line in lines[1:] if "py::" in line), None)
        if python is None:  # the loop's C code, or the kernel under it
            part = LOOP
        else:
            function, _, path = python.partition(":")
            path = path.split(" (")[0]
            called_by = next((part for module, part in _CALLED_BY if module in path), None)
            frame = f"{function} ({path}:0)"
            process = "proxy" if proxy else _WRITER
            part = where + called_by if called_by else part_of(process, [frame])
        parts[part] += 1
        if "kernel" in lines[1]:
            parts[where + KERNEL] += 1
    return parts


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


def sampling(sampler: str, pids: list[int], seconds: float, out: Path) -> list[str]:
    """The command that samples processes `pids` for `seconds` into `out`."""
    if Path(sampler).name == "perf":
        return [sampler, "record", "-F", "997", "--call-graph", "dwarf,16384", "-o", str(out),
                "-p", ",".join(map(str, pids)), "--", "sleep", str(seconds)]  # fmt: skip
    return [sampler, "record", "--gil", "--subprocesses", "--rate", "400", "--format", "raw",
            "--duration", str(round(seconds)), "--output", str(out),
            "--pid", str(pids[0])]  # fmt: skip


def writers(pid: int) -> list[int]:
    """Process `pid`'s children: forkpoint's writer process."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def load(
    child: _procs.Child, sampler: str, seconds: float, out: Path, bodies: list[bytes]
) -> tuple[int, float, list[int]]:
    """Load `child` at c=32 with `bodies` while `sampler` samples it and its writer process:
    the requests sent, the CPU they took, the pids sampled."""
    headers = sdk_request("headers", 0)[0]
    async with new_client() as client:
        await concurrent(client, child.url, bodies[:400], 32, headers)  # warm
        await child.settle()
        pids = [child.pid, *writers(child.pid)]
        argv = sampling(sampler, pids, seconds, out)
        sampled = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await asyncio.sleep(0.5)  # attached
        before, sent = child.cpu(), 0
        while sampled.poll() is None:
            await concurrent(client, child.url, bodies, 32, headers)
            sent += len(bodies)
        cpu = await child.settle() - before
        if sampled.returncode != 0 or not out.exists():
            error = sampled.stderr.read().decode() if sampled.stderr else ""
            raise SystemExit(f"profile_record: {argv[0]} failed: {error.strip()[-300:]}")
        return sent, cpu, pids


async def measure(seconds: float, raw: Path, sampler: str, *, kept: bool) -> None:
    perf = Path(sampler).name == "perf"
    if perf:  # Python writes /tmp/perf-PID.map, naming its functions for perf
        os.environ["PYTHONPERFSUPPORT"] = "1"
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
            results, sampled = {}, [upstream.pid]
            bodies = [sdk_request("c32", i)[1] for i in range(1000)]  # the same for both
            for name, child in targets.items():
                out = raw / (f"{name}.data" if perf else f"{name}.txt")
                sent, cpu, pids = await load(child, sampler, seconds, out, bodies)
                sampled += pids
                counted = tally_perf(out, child.pid) if perf else tally(out)
                results[name] = (sent, cpu, counted)
        finally:
            for child in reversed(children):
                child.stop()
            for pid in [] if kept else sampled:  # Python's perf maps, read
                Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)
    print(render(results, sampler))


def render(results: dict[str, tuple[int, float, collections.Counter[str]]], sampler: str) -> str:
    how = ("perf samples of on-CPU time" if Path(sampler).name == "perf"
           else "py-spy samples of threads holding the GIL")  # fmt: skip
    lines = [f"`record` and the minimal proxy at c=32 (sdk workload), {how},",
             "per 1,000 requests; us: that part's share of the process's CPU per request "
             f"({Path(sampler).name} attached)", ""]  # fmt: skip
    names = list(results)
    kernel = [f"proxy: {KERNEL}", f"writer: {KERNEL}"]
    parts = sorted({p for _, _, t in results.values() for p in t} - set(kernel),
                   key=lambda p: (p != LOOP, -results["record"][2][p]))  # fmt: skip
    head = f"{'part':<52}" + "".join(f"{n + ' samples':>17}{'us':>8}" for n in names)
    lines += [head, "-" * len(head)]
    for part in [*parts, *kernel] if Path(sampler).name == "perf" else parts:
        row = f"{part:<52}"
        for name in names:
            sent, cpu, counted = results[name]
            share = counted[part] / max(_whole(counted), 1)
            row += f"{counted[part] * 1000 / sent:>17.1f}{share * cpu / sent * 1e6:>8.0f}"
        lines.append(row)
    total = f"{'whole process (and its writer process)':<52}"
    for name in names:
        sent, cpu, counted = results[name]
        total += f"{_whole(counted) * 1000 / sent:>17.1f}{cpu / sent * 1e6:>8.0f}"
    lines += ["-" * len(head), total]
    return "\n".join(lines)


def _whole(counted: collections.Counter[str]) -> int:
    """Samples in all: the kernel's are a part's too."""
    return sum(n for part, n in counted.items() if not part.endswith(KERNEL))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=25, help="sampled per target")
    parser.add_argument("--sampler", choices=("py-spy", "perf"), default="py-spy",
                        help="py-spy (GIL-holding samples) or perf (on-CPU samples)")  # fmt: skip
    parser.add_argument("--raw", type=Path, metavar="DIR",
                        help="keep the raw samples in DIR/{minimal,record}.{txt,data} "
                             "(and with perf, the /tmp/perf-PID.map files they need)")  # fmt: skip
    args = parser.parse_args()
    here = str(Path(sys.executable).parent)
    sampler = shutil.which(args.sampler) or shutil.which(args.sampler, path=here)
    if sampler is None:
        how = "pip install py-spy" if args.sampler == "py-spy" else "apt-get install linux-perf"
        print(f"profile_record: needs {args.sampler} ({how})", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if args.raw is not None:
        args.raw.mkdir(parents=True, exist_ok=True)
        asyncio.run(measure(args.seconds, args.raw, sampler, kept=True))
    else:
        with tempfile.TemporaryDirectory() as raw:
            asyncio.run(measure(args.seconds, Path(raw), sampler, kept=False))
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
