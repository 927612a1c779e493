"""scripts/demo's park-and-wake part, run as a user runs it (`scripts/demo park`): the support
agent parks on a refund's approval (exit 75, no agent process left), `forkpoint runs --status
parked` lists it, `forkpoint answer` wakes it, and the woken agent's own last line says who
approved the refund. The project's scripts run in a copy whose .venv is this interpreter."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.models import Origin, RunStatus
from tests.runner import ROOT, command_env

TICKET = "The headphones from order A1005 stopped charging after a week so I want my money back"


def demo_project(tmp_path: Path) -> Path:
    """scripts/ and pyproject.toml copied, examples/ linked, and a .venv whose python and
    forkpoint are this interpreter and this checkout (installed already: no bootstrap runs)."""
    (tmp_path / "scripts").mkdir()
    for name in ("bootstrap", "demo"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, command in (("python", f'"{sys.executable}"'),
                          ("forkpoint", f'"{sys.executable}" -m forkpoint')):  # fmt: skip
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        script.chmod(0o755)
    (tmp_path / ".venv" / ".forkpoint-demo").touch()  # newer than pyproject.toml: installed
    return tmp_path


def test_the_demo_parks_a_run_on_its_approval_and_wakes_it_with_the_answer(tmp_path):
    project = demo_project(tmp_path)
    started = time.monotonic()
    done = subprocess.run(
        [str(project / "scripts" / "demo"), "park"], capture_output=True, text=True,
        timeout=180, cwd=project, env=command_env(None, {"PYTHONPATH": str(ROOT)}, clean=True),
    )  # fmt: skip
    took = time.monotonic() - started
    print(f"\nscripts/demo park: {took:.1f} s")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "exit code: 75 (75: parked)" in done.stdout
    assert f"$ pgrep -f '{TICKET}'" in done.stdout
    after_pgrep = done.stdout.split(f"$ pgrep -f '{TICKET}'", 1)[1].splitlines()
    assert after_pgrep[1] == "(none)", after_pgrep[:3]  # pgrep printed no process
    assert "forkpoint: run " in done.stderr and " parked at step 5" in done.stderr
    parked = done.stdout.split("$ forkpoint runs --status parked", 1)[1]
    assert re.search(r"\n\S+\s+5\s+parked\s+.*rule 'POST /tools/approvals\*'", parked), parked
    # the woken agent's own last line: the model's answer, naming who approved it
    woken = done.stdout.split("# wakes it here", 1)[1].splitlines()[1]
    assert woken.startswith("Good news! Order A1005") and "approved by alice" in woken, woken
    assert "agent: approved by alice" in done.stderr
    assert not subprocess.run(["pgrep", "-f", TICKET], capture_output=True).stdout

    store = SqliteStore(project / ".forkpoint" / "demo.db")
    try:
        run = store.find_run("needs-approval")
        exchanges = store.exchanges(run.id)
    finally:
        store.close()
    assert run.status is RunStatus.FINISHED
    assert [(e.route, e.origin) for e in exchanges[4:]] == [
        ("/v1/chat/completions", Origin.LIVE),
        ("/tools/approvals", Origin.ANSWERED),
        ("/tools/refunds", Origin.LIVE),
        ("/v1/chat/completions", Origin.LIVE),
    ]
    assert "$ forkpoint show needs-approval" in done.stdout
