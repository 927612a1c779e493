"""Benchmark: the memory `forkpoint import` takes, by file size (issue 25.7).

A run of `--interactions` small chat exchanges (100,000 by default: a short JSON request and
answer, OpenAI's usual headers, every tenth one streamed in 4 events) is written once as a
vcrpy YAML cassette, a HAR and JSON lines, with forkpoint's own writers. Each file is then
imported by `forkpoint import` in a process of its own, into a new SQLite cassette, and its
peak resident memory read from the kernel as it exits (VmHWM); so is the peak of importing
the first 100 interactions alone, the part that does not depend on the file. The files are
written by a process of their own too, so no import starts as a copy of a large parent. Reported per
format: the file's size, the import's time, its peak RSS, the small file's peak, and the
peak over the file's size. Target: the large file's peak within 64 MiB of the small one's
(bounded: a small constant plus one interaction, whatever the file's size).

`--against DIR` runs the imports with another forkpoint's code (a tree holding `forkpoint/`,
e.g. `git archive a127cb9 forkpoint | tar -x -C DIR`) first on the path: before and after.

    .venv/bin/python benchmarks/import_memory.py                       # about 3 minutes
    .venv/bin/python benchmarks/import_memory.py --interactions 20000  # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkpoint.cassettes.formats import har, jsonl, text
from forkpoint.models import Chunk, Exchange, Run

FORMATS = {
    "yaml": (".yaml", text.dumps),
    "har": (".har", har.dumps),
    "jsonl": (".jsonl", jsonl.dumps),
}
SMALL = 100
BOUND_MIB = 64
HEADERS = (
    ("content-type", "application/json"),
    ("openai-processing-ms", "412"),
    ("x-request-id", "req_0123456789abcdef"),
)


def chat(step: int) -> Exchange:
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"order A{step}?"}]}
    chunks = None
    if step % 10 == 9:
        events = [f'data: {{"n":{i},"text":"part {i}"}}\n\n'.encode() for i in range(3)]
        events.append(b"data: [DONE]\n\n")
        chunks = [Chunk(20.0 * i, event) for i, event in enumerate(events)]
        body = b"".join(events)
        headers = (("content-type", "text/event-stream"), *HEADERS[1:])
    else:
        body = json.dumps({"id": f"c{step}", "answer": f"A{step} ships on Monday"}).encode()
        headers = HEADERS
    return Exchange(
        run_id="bench", step=step, method="POST", route="/v1/chat/completions",
        request_headers=(("content-type", "application/json"),),
        request_body=json.dumps(request).encode(), fingerprint="", status=200,
        response_headers=headers, response_body=body, chunks=chunks,
        upstream="https://api.openai.com/v1/chat/completions",
        started_at=1_780_000_000.0 + step, ttfb_ms=120.5, duration_ms=180.25,
    )  # fmt: skip


def files(folder: Path) -> dict[str, tuple[Path, Path]]:
    """Per format, the file of every interaction and the one of the first SMALL."""
    return {
        name: (folder / f"large{suffix}", folder / f"small{suffix}")
        for name, (suffix, _) in FORMATS.items()
    }


def write_files(folder: Path, count: int) -> None:
    run = Run(id="bench", name="bench")
    exchanges = [chat(step) for step in range(count)]
    for name, (large, small) in files(folder).items():
        dumps = FORMATS[name][1]
        large.write_text(dumps(run, exchanges), encoding="utf-8")
        small.write_text(dumps(run, exchanges[:SMALL]), encoding="utf-8")


# The command, then its peak RSS (KiB) and where its forkpoint is, on stdout as it exits.
IMPORT = """
import atexit, re, forkpoint
def peak():
    with open("/proc/self/status") as status:
        print(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1), forkpoint.__file__)
atexit.register(peak)
from forkpoint.cli import main
main()
"""


def imported(path: Path, cassette: Path, against: Path | None) -> tuple[float, float]:
    """`forkpoint import PATH` in a process of its own: (seconds, peak RSS in MiB). Checks
    that it ran the forkpoint asked for."""
    env = dict(os.environ)
    if against is not None:
        env["PYTHONPATH"] = str(against)
    command = [sys.executable, "-c", IMPORT, "import", str(path), "--cassette", str(cassette)]
    started = time.perf_counter()
    # from a folder of its own: the current one may hold another forkpoint, first on the path
    done = subprocess.run(
        command, env=env, cwd=path.parent, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"import of {path} failed: {done.stderr}")
    kib, ran = done.stdout.split()[-2:]
    if against is not None and not Path(ran).is_relative_to(against.resolve()):
        raise SystemExit(f"ran the forkpoint in {ran}, not the one in {against}")
    return seconds, int(kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interactions", type=int, default=100_000)
    parser.add_argument("--against", type=Path, help="another forkpoint's tree to run instead")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--write", type=Path, help=argparse.SUPPRESS)  # the files' process
    options = parser.parse_args()
    if options.write is not None:
        write_files(options.write, options.interactions)
        return
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        count = str(options.interactions)
        subprocess.run(
            [sys.executable, __file__, "--write", work, "--interactions", count], check=True
        )
        code = f"the code in {options.against}" if options.against else "this forkpoint"
        print(f"forkpoint import of {options.interactions:,} interactions, {code}")
        print(f"{'format':<6} {'file MiB':>9} {'seconds':>8} {'peak MiB':>9} "
              f"{f'{SMALL} peak':>9} {'peak/file':>10}  bounded")  # fmt: skip
        for name in options.formats.split(","):
            large, small = files(folder)[name]
            size = large.stat().st_size / 2**20
            seconds, peak = imported(large, folder / f"{name}.db", options.against)
            _, base = imported(small, folder / f"{name}-small.db", options.against)
            bounded = "yes" if peak - base <= BOUND_MIB else "NO"
            print(f"{name:<6} {size:>9.1f} {seconds:>8.1f} {peak:>9.0f} {base:>9.0f} "
                  f"{peak / size:>10.1f}  {bounded}")  # fmt: skip


if __name__ == "__main__":
    main()
