"""The benchmark's child processes: start each one, learn its URL, watch its CPU, stop it.

Every server runs in a process of its own so none shares a GIL with the load generator. A
child either prints its base URL on its first stdout line or (mitmdump) is polled until its
port accepts. Its stderr goes to a log file that is shown if it fails.
"""

from __future__ import annotations

import asyncio
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_TICK = 1 / os.sysconf("SC_CLK_TCK")


class ChildFailed(RuntimeError):
    """A child process exited or never became ready; the message ends with its log."""


class Child:
    def __init__(
        self, name: str, argv: list[str], logs: Path, *, port: int | None = None,
        env: dict[str, str] | None = None,
    ):  # fmt: skip
        self.name = name
        self.log = logs / f"{name}.log"
        self.url = ""
        self._port = port
        with self.log.open("wb") as err:
            self.process = subprocess.Popen(
                argv,
                stdout=subprocess.DEVNULL if port else subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def ready(self, timeout: float = 60.0) -> str:
        """Wait until the child serves; return its base URL."""
        if not self.url:
            self.url = self._poll_port(timeout) if self._port else self._read_url(timeout)
        return self.url

    def _read_url(self, timeout: float) -> str:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline().decode().strip() if readable else ""
        if not line.startswith("http://"):
            self.fail(f"printed no URL within {timeout:.0f} s (got {line!r})")
        return line

    def _poll_port(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.fail(f"exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self._port), timeout=1).close()
                return f"http://127.0.0.1:{self._port}"
            except OSError:
                time.sleep(0.1)
        self.fail(f"port {self._port} did not accept within {timeout:.0f} s")
        raise AssertionError  # unreachable: fail raises

    def cpu(self) -> float:
        """CPU seconds (user + system, all threads) the child and the processes it started
        (forkpoint's cassette writer) have used so far."""
        return sum(_cpu_seconds(pid) for pid in _process_tree(self.pid))

    def own_cpu(self) -> float:
        """CPU seconds of the child's own process (not the processes it started)."""
        return _cpu_seconds(self.pid)

    async def settle(self, *, window: float = 0.05, limit: float = 15.0) -> float:
        """Wait until the child has gone idle (a recorder has drained); its CPU seconds then."""
        deadline = time.monotonic() + limit
        last = self.cpu()
        while time.monotonic() < deadline:
            await asyncio.sleep(window)
            now = self.cpu()
            if now - last < _TICK / 2:
                return now
            last = now
        return last

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then wait: a forkpoint runner commits its recording before it exits."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def fail(self, why: str) -> None:
        self.stop(5)
        tail = self.log.read_text(errors="replace")[-3000:]
        raise ChildFailed(f"{self.name} {why}; its log ({self.log}):\n{tail}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def upstream(logs: Path, chunk_delay: float) -> Child:
    argv = [sys.executable, str(_HERE / "_upstream.py"), "--chunk-delay", str(chunk_delay)]
    return Child("upstream", argv, logs)


def minimal(logs: Path, upstream_url: str, *, uvloop: bool = False) -> Child:
    argv = [sys.executable, str(_HERE / "minimal_proxy.py"), "--upstream", upstream_url]
    name = "minimal-uvloop" if uvloop else "minimal"
    return Child(name, [*argv, "--uvloop"] if uvloop else argv, logs)


def mitmdump(logs: Path, upstream_url: str) -> Child:
    exe = Path(sys.executable).with_name("mitmdump")
    if not exe.exists():
        raise ChildFailed(f"no {exe}: install the dev extras, pip install -e '.[dev]'")
    port = free_port()
    argv = [str(exe), "--mode", f"reverse:{upstream_url}", "-p", str(port), "-q"]
    return Child("mitmdump", argv, logs, port=port)


def forkpoint(
    name: str, logs: Path, *, mode: str, cassette: Path | str, run: str,
    upstream_url: str | None = None,
    profile: Path | None = None, loop: str = "default", rules: bool = False,
    code: Path | None = None,
) -> Child:  # fmt: skip
    """`code`: a tree holding another forkpoint/ to run instead of this one (a before)."""
    argv = [sys.executable, str(_HERE / "_run_forkpoint.py"), "--mode", mode,
            "--cassette", str(cassette), "--run", run, "--loop", loop]  # fmt: skip
    if upstream_url:
        argv += ["--upstream", upstream_url]
    if rules:
        argv.append("--rules")
    if profile:
        argv += ["--profile", str(profile)]
    env = None if code is None else {**os.environ, "PYTHONPATH": str(code.resolve())}
    return Child(name, argv, logs, env=env)


class OtherLoad:
    """How busy other work kept the CPUs while the benchmark ran: the noise in its numbers.

    Busy time from /proc/stat (steal included) minus this process's and its reaped children's.
    """

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._busy, self._own = _busy_seconds(), _own_seconds()

    def cpus(self) -> float:
        """CPUs kept busy by everything else, on average; call after the children are reaped."""
        others = (_busy_seconds() - self._busy) - (_own_seconds() - self._own)
        return max(others, 0.0) / (time.monotonic() - self._started)


def _process_tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields:
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, i = [pid], 0
    while i < len(tree):
        tree += parents.get(tree[i], [])
        i += 1
    return tree


def _cpu_seconds(pid: int) -> float:
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return (int(fields[11]) + int(fields[12])) * _TICK if fields else 0.0


def _stat_fields(stat: Path) -> list[str]:
    """The fields after the command name (which may hold spaces); [] once the process is gone."""
    try:
        return stat.read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return []


def _busy_seconds() -> float:
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) * _TICK


def _own_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
