"""Coding agents run headless under forkpoint, as a user runs them: Claude Code and the Codex
CLI from the npm registry (pinned in package.json and its lock, installed by scripts/bootstrap)
against aimock, a mock model server no one here wrote.

Each agent gets a task that reads a file with a tool and writes another: a fixture answers its
first model call with a read, its second with a write, its third with the final answer. The
fixtures match on the tool call ids the agent echoes, so they are stateless and a fork or a
second run gets the same answers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

AGENTS = Path(__file__).parent
BIN = AGENTS / "node_modules" / ".bin"
SECRET = "The secret word is PINEAPPLE."
ANSWER = "The file says: The secret word is PINEAPPLE. I wrote PINEAPPLE to answer.txt."
PROMPT = "Read the file hello.txt, then write its secret word to answer.txt."
RUN_TIMEOUT = 60  # s for one forkpoint command and its agent


def fixtures(read: str, read_args: dict[str, Any], write_args: dict[str, Any]) -> dict[str, Any]:
    """The agent's script: read (tool `read`), then write, then answer."""
    return {
        "fixtures": [
            {
                "match": {"userMessage": "hello.txt", "toolName": read, "hasToolResult": False},
                "response": {
                    "toolCalls": [{"id": "call_READ", "name": read, "arguments": read_args}]
                },
            },
            {
                "match": {"toolCallId": "call_READ"},
                "response": {"toolCalls": [{"id": "call_WRITE", **write_args}]},
            },
            {"match": {"toolCallId": "call_WRITE"}, "response": {"content": ANSWER}},
            {"match": {}, "response": {"content": "ok"}},  # side calls (a session title)
        ]
    }


@dataclass
class Aimock:
    """aimock on a free port, serving one fixture file."""

    process: subprocess.Popen[str]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def start_aimock(directory: Path, script: dict[str, Any]) -> Aimock:
    if not (BIN / "llmock").exists():
        pytest.fail(
            f"the coding agents are not installed in {AGENTS}: run scripts/bootstrap (needs npm)",
            pytrace=False,
        )
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fixtures.json").write_text(json.dumps(script))
    process = subprocess.Popen(
        [str(BIN / "llmock"), "-p", "0", "-f", str(directory / "fixtures.json")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:  # "[aimock] aimock server listening on http://127.0.0.1:PORT"
        if "listening on " in line:
            return Aimock(process, line.rsplit(" ", 1)[1].strip())
    raise AssertionError(f"aimock did not start (exit {process.wait()})")


@pytest.fixture
def aimock_for(tmp_path: Path) -> Iterator[Any]:
    started: list[Aimock] = []

    def start(script: dict[str, Any]) -> Aimock:
        started.append(start_aimock(tmp_path / "aimock", script))
        return started[-1]

    yield start
    for mock in started:
        mock.stop()


@dataclass(frozen=True)
class Place:
    """Where one agent run happens: its project directory and its fresh HOME."""

    project: Path
    home: Path


def place(root: Path, name: str) -> Place:
    """A new project directory holding hello.txt, and an empty HOME, under `root/name`."""
    project, home = root / name / "project", root / name / "home"
    project.mkdir(parents=True)
    home.mkdir()
    (project / "hello.txt").write_text(SECRET + "\n")
    return Place(project, home)


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str

    @property
    def run_id(self) -> str:
        for line in reversed(self.stderr.splitlines()):
            if line.startswith("forkpoint: run "):
                return line.split()[2]
        raise AssertionError(f"no run reported:\n{self.stderr}")


def forkpoint(
    *args: str, cassette: Path, at: Place, env: Mapping[str, str], timeout: float = RUN_TIMEOUT
) -> Done:
    """`forkpoint ARGS` in `at.project` with HOME at `at.home` and only `env` beside the
    basics: nothing of this machine's own configuration reaches the agent."""
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(at.home),
        "TERM": "dumb",
        "SHELL": shutil.which("bash") or "/bin/sh",
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        [sys.executable, "-m", "forkpoint", *args],
        cwd=at.project, env={**base, **env, "FORKPOINT_CASSETTE": str(cassette)},
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return Done(done.returncode, done.stdout, done.stderr)


def show(run: str, cassette: Path, at: Place) -> dict[str, Any]:
    done = forkpoint("show", "--json", run, cassette=cassette, at=at, env={})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]
