"""The one way tests run the `forkpoint` command: as a user would, in a process of its own.

    done = forkpoint("record", "--name", "x", "--", *agent, cassette=path)
    assert done.returncode == 0, done.stderr
    done.run_id  # read from stderr: stdout is the command's own

`env` adds to (or, with `clean=True`, replaces) this process's environment minus the
variables that would point a command somewhere else (OPENAI_*, FORKPOINT_*, SUPPORT_*).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = str(Path(sys.executable).with_name("forkpoint"))
_RUN_LINE = re.compile(r"^forkpoint: (?:run|imported run) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str
    output: str = ""  # what a terminal shows: both streams

    @property
    def exit_code(self) -> int:
        return self.returncode

    @property
    def run_id(self) -> str:
        """The run the command made, as it reported it on stderr."""
        found = _RUN_LINE.findall(self.stderr)
        assert found, f"no run reported on stderr:\n{self.stderr}"
        return str(found[-1])


def command_env(
    cassette: Path | None = None, env: Mapping[str, str] | None = None, *, clean: bool = False
) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not clean or not _foreign(k)}
    if cassette is not None:
        base["FORKPOINT_CASSETTE"] = str(cassette)
    base.setdefault("PYTHONPATH", str(ROOT))
    return {**base, **(env or {})}


def forkpoint(
    *args: str | os.PathLike[str],
    cassette: Path | None = None,
    env: Mapping[str, str] | None = None,
    clean: bool = False,
    timeout: float = 120,
    cwd: Path = ROOT,
    console: bool = False,
) -> Ran:
    """`console`: through the installed `forkpoint` script, not `python -m forkpoint`."""
    program = [CONSOLE_SCRIPT] if console else [sys.executable, "-m", "forkpoint"]
    done = subprocess.run(
        [*program, *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env=command_env(cassette, env, clean=clean),
    )  # fmt: skip
    return Ran(done.returncode, done.stdout, done.stderr, done.stdout + done.stderr)


def start_forkpoint(
    *args: str | os.PathLike[str],
    cassette: Path | None = None,
    env: Mapping[str, str] | None = None,
    clean: bool = False,
    cwd: Path = ROOT,
) -> subprocess.Popen[str]:
    """The command started, not awaited: for `serve`, or to kill it mid-run."""
    return subprocess.Popen(
        [sys.executable, "-m", "forkpoint", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        env=command_env(cassette, env, clean=clean),
    )  # fmt: skip


def _foreign(name: str) -> bool:
    return name.startswith(("OPENAI_", "ANTHROPIC_", "FORKPOINT_", "SUPPORT_"))


def invoke(*args: str, cassette: Path | None = None, env: Mapping[str, str] | None = None) -> Ran:
    """The command run in this process (click's runner): for commands that start no proxy,
    where a process's start would only slow the test."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    full = {"COLUMNS": "160", **(env or {})}
    if cassette is not None:
        full["FORKPOINT_CASSETTE"] = str(cassette)
    result = CliRunner().invoke(
        main, list(args), env=full, catch_exceptions=False, prog_name="forkpoint"
    )
    return Ran(result.exit_code, result.stdout, result.stderr, result.output)
