"""`forkpoint serve` on a cassette that takes no writes: locked by another process for a long
time, or full (the proxy's file size limit, RLIMIT_FSIZE: the kernel refuses to grow a file,
as a full disk or a quota does). Clients keep being served, what is not written is held in
the journal, the proxy says so once and again when it recovers, `forkpoint runs` marks the
run, and Ctrl-C ends it in seconds without losing what is held (issue 14.4)."""

from __future__ import annotations

import base64
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from forkpoint.cassettes.sqlite.store import SqliteStore
from tests.cli.test_serve import start_serve, stop

HELD = "the cassette takes no writes"
RECOVERED = "the cassette takes writes again"


class Serving:
    """`forkpoint serve` with its log read as it comes, so a test waits for a line."""

    def __init__(self, cassette: Path, upstream_url: str, *, max_file: int | None = None):
        def limit() -> None:  # in the child, before it starts
            if max_file is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (max_file, max_file))

        self.process = subprocess.Popen(
            [sys.executable, "-m", "forkpoint", "serve", "--port", "0", "--upstream",
             upstream_url, "--cassette", str(cassette)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit,
        )  # fmt: skip
        assert self.process.stdout is not None and self.process.stderr is not None
        line = self.process.stdout.readline()
        assert line.startswith("forkpoint serving on "), line
        self.url = line.split()[3]
        self.log: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.log.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 20.0) -> None:
        with self._changed:
            found = self._changed.wait_for(lambda: any(text in line for line in self.log),
                                           timeout)  # fmt: skip
        assert found, f"no {text!r} in the log:\n{''.join(self.log)}"

    def said(self, text: str) -> int:
        with self._changed:
            return sum(text in line for line in self.log)

    def stop(self) -> tuple[int, float]:
        """Ctrl-C; the exit status and how long it took."""
        began = time.monotonic()
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(60)
        self._reader.join(5)
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        self.process.stderr.close()
        return status, time.monotonic() - began


def ask(url: str, question: str, run: str | None = None) -> float:
    """Ask through the proxy; how long the answer took (it must be a 200)."""
    began = time.monotonic()
    headers = {"x-forkpoint-run": run} if run else {}
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    assert question in answer.text
    return time.monotonic() - began


def questions(cassette: Path, run: str | None = None) -> list[str]:
    """What each run (or `run`) asked, in step order."""
    import json

    store = SqliteStore(cassette)
    try:
        runs = [run] if run else [r.id for r in store.list_runs()]
        return [json.loads(e.request_body)["messages"][0]["content"]
                for run_id in runs for e in store.exchanges(run_id)]  # fmt: skip
    finally:
        store.close()


def runs_listing(cassette: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "forkpoint", "runs", "--cassette",
                             str(cassette)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_a_cassette_locked_by_another_process_holds_writes_and_serves_every_run(
    upstream, tmp_path
):
    cassette = tmp_path / "locked.db"
    serving = Serving(cassette, upstream.url)
    try:
        ask(serving.url, "before")  # the default run is in the cassette
        locker = subprocess.Popen(
            [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.readline()",
             str(cassette)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert locker.stdout is not None and locker.stdin is not None
        assert locker.stdout.readline() == "locked\n"
        try:
            # a run other proxies may serve too is numbered by the store as it writes it: its
            # requests are answered as promptly as the default run's (they were a 503 after
            # 5 s, issue 25.11)
            took = [ask(serving.url, f"locked {index}") for index in range(10)]
            took += [ask(serving.url, f"named {index}", "opened") for index in range(10)]
            serving.wait_for(HELD)
            took += [ask(serving.url, f"held {index}") for index in range(5)]
            took += [ask(serving.url, f"held named {index}", "opened") for index in range(5)]
            assert max(took) < 1.0, took  # served promptly, lock or not
            assert "in the journal, not merged" in runs_listing(cassette)
        finally:
            locker.stdin.close()
            locker.wait(10)
            locker.stdout.close()
        serving.wait_for(RECOVERED)
    finally:
        status, took = serving.stop()
    assert status == 0
    assert serving.said(HELD) == 1 and serving.said(RECOVERED) == 1  # loud once, not per item
    expected = {"before", *(f"locked {i}" for i in range(10)), *(f"held {i}" for i in range(5)),
                *(f"named {i}" for i in range(10)), *(f"held named {i}" for i in range(5))}  # fmt: skip
    stored = questions(cassette)
    assert sorted(stored) == sorted(expected)
    named = [f"named {i}" for i in range(10)] + [f"held named {i}" for i in range(5)]
    assert questions(cassette, "opened") == named  # numbered 0-14 in the order they came
    assert "in the journal, not merged" not in runs_listing(cassette)


def test_a_full_cassette_holds_writes_and_ctrl_c_ends_quickly_losing_nothing(upstream, tmp_path):
    cassette = tmp_path / "full.db"
    serving = Serving(cassette, upstream.url, max_file=3 << 20)
    asked: list[str] = []
    try:
        padding = base64.b64encode(os.urandom(24_000)).decode()  # does not compress
        while not serving.said(HELD):
            assert len(asked) < 400, "the cassette never filled up"
            asked.append(f"q{len(asked)} {padding}")
            ask(serving.url, asked[-1])
        for _ in range(10):  # served while full
            asked.append(f"q{len(asked)} {padding}")
            assert ask(serving.url, asked[-1]) < 1.0
        assert "in the journal, not merged" in runs_listing(cassette)
    finally:
        status, took = serving.stop()
    assert status == 0
    assert took < 15, f"Ctrl-C took {took:.1f} s"
    assert serving.said(HELD) == 1
    assert sorted(asked) != sorted(questions(cassette))  # some are only in the journal…
    process, _ = start_serve(cassette, upstream.url)  # …until the next forkpoint merges them
    try:
        assert sorted(questions(cassette)) == sorted(asked)
    finally:
        stop(process)


def test_ctrl_c_while_the_cassette_is_locked_ends_at_once_and_the_next_proxy_keeps_it_all(
    upstream, tmp_path
):
    """Found by attacking main: Ctrl-C of `serve` took 19.3 s while the cassette was locked
    (each run's end waited on the lock)."""
    cassette = tmp_path / "locked.db"
    serving = Serving(cassette, upstream.url)
    locker = None
    try:
        ask(serving.url, "before")
        ask(serving.url, "named before", "fleet")
        locker = subprocess.Popen(
            [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.readline()",
             str(cassette)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        ask(serving.url, "during")
        ask(serving.url, "named during", "fleet")
        ask(serving.url, "first", "new-run")
        serving.wait_for(HELD)
    finally:
        status, took = serving.stop()
        if locker is not None and locker.stdin is not None and locker.stdout is not None:
            locker.stdin.close()
            locker.wait(10)
            locker.stdout.close()
    assert status == 0 and took < 5, f"Ctrl-C took {took:.1f} s"
    process, _ = start_serve(cassette, upstream.url)  # merges what the first one held
    stop(process)
    assert questions(cassette, "fleet") == ["named before", "named during"]
    assert questions(cassette, "new-run") == ["first"]
    store = SqliteStore(cassette)
    try:
        assert {run.id: run.status for run in store.list_runs()}["fleet"] == "finished"
    finally:
        store.close()
