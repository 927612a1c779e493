"""What an upload costs the proxy in memory: a real `forkpoint serve` recording, then replaying,
request bodies of 20 and 200 MiB sent by a client in another process.

```sh
.venv/bin/python benchmarks/uploads.py                       # 20 and 200 MiB, about a minute
.venv/bin/python benchmarks/uploads.py --sizes 20 200 500    # any sizes, MiB
.venv/bin/python benchmarks/uploads.py --forkpoint /path/to/another/checkout  # before/after
```

For each size it prints the peak resident memory (VmHWM) of `serve` and every process under
it (its writer), first recording the upload (the upstream reads it whole and answers its
sha256), then replaying it from the cassette; and the resident memory (VmRSS) once the upload
is answered and the proxy has been idle a second, to show whether it was given back. Each size
gets a fresh `serve`, so one peak never hides another. The client streams the body from a file
(never holding it), as a file upload does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

MIB = 2**20

UPSTREAM = textwrap.dedent("""
    import asyncio, hashlib
    from aiohttp import web

    async def upload(request):
        digest, size = hashlib.sha256(), 0
        async for data in request.content.iter_chunked(1 << 20):
            digest.update(data)
            size += len(data)
        return web.json_response({"size": size, "sha256": digest.hexdigest()})

    async def main():
        app = web.Application(client_max_size=2**40)
        app.router.add_post("/v1/files", upload)
        runner = web.AppRunner(app, auto_decompress=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _tree(pid: int) -> Iterator[int]:
    yield pid
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            yield from _tree(int(child))


def memory(pid: int, field: str) -> int:
    """`field` (VmHWM, VmRSS) of a process and every process under it, in bytes."""
    return sum(_status(each, field) for each in _tree(pid))


def serve(cassette: Path, checkout: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    process = subprocess.Popen(
        [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--cassette", str(cassette),
         "--max-body", "4096", *args],
        stdout=subprocess.PIPE, text=True, cwd=checkout, env=env,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("forkpoint serving on "):
        raise SystemExit(f"serve did not start: {line!r}")
    return process, line.split()[3]


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(2)
    process.wait(60)
    if process.stdout is not None:
        process.stdout.close()


def upload(url: str, body: Path, run: str | None) -> dict[str, object]:
    headers = {"Content-Type": "application/octet-stream"}
    if run is not None:
        headers["X-Forkpoint-Run"] = run

    def parts() -> Iterator[bytes]:
        with body.open("rb") as file:
            while data := file.read(MIB):
                yield data

    headers["Content-Length"] = str(body.stat().st_size)
    answer = httpx.post(url + "/v1/files", content=parts(), headers=headers, timeout=600)
    answer.raise_for_status()
    return dict(answer.json())


def measure(size_mib: int, checkout: Path, workdir: Path, upstream: str) -> list[str]:
    body = workdir / f"{size_mib}.bin"
    digest = hashlib.sha256()
    with body.open("wb") as file:
        for index in range(size_mib):
            block = hashlib.sha256(str(index).encode()).digest() * (MIB // 32)
            digest.update(block)
            file.write(block)
    expected = {"size": size_mib * MIB, "sha256": digest.hexdigest()}
    cassette = workdir / f"{size_mib}.db"
    rows = []
    for mode in ("record", "replay"):
        args = ["--upstream", upstream] if mode == "record" else ["--replay", "up"]
        process, url = serve(cassette, checkout, *args)
        try:
            before = memory(process.pid, "VmRSS")
            started = time.perf_counter()
            got = upload(url, body, "up" if mode == "record" else None)
            took = time.perf_counter() - started
            assert got == expected, (mode, got, expected)
            time.sleep(1.0)
            peak, after = memory(process.pid, "VmHWM"), memory(process.pid, "VmRSS")
        finally:
            stop(process)
        rows.append(
            f"{size_mib:>6} MiB  {mode:7}  peak {peak / MIB:6.0f} MiB  "
            f"({before / MIB:4.0f} at start, {after / MIB:5.0f} after)  {took:5.1f} s"
        )
    body.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 200], help="MiB")
    parser.add_argument(
        "--forkpoint", type=Path, default=Path(__file__).resolve().parent.parent,
        help="the checkout whose forkpoint runs (default: this one)",
    )  # fmt: skip
    options = parser.parse_args()
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, text=True)
    try:
        assert upstream.stdout is not None
        url = f"http://127.0.0.1:{upstream.stdout.readline().strip()}"
        print(f"forkpoint from {options.forkpoint}")
        print(
            "  upload    mode     peak RSS of serve and its writer (resident at start, 1 s after)"
        )
        with tempfile.TemporaryDirectory(prefix="uploads-") as workdir:
            for size in options.sizes:
                for row in measure(size, options.forkpoint.resolve(), Path(workdir), url):
                    print(row, flush=True)
    finally:
        upstream.kill()
        upstream.wait(10)


if __name__ == "__main__":
    main()
