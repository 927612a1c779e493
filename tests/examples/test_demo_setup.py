"""scripts/demo installs what the demo runs, no more: `scripts/bootstrap demo` (the `demo` extra),
not the test suite's extras and coding agents (1.4 GB, npm), which `scripts/bootstrap dev`
(scripts/test, CI) installs."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.runner import ROOT

EXAMPLE = ROOT / "examples" / "support_agent"


FAKE_PYTHON = """#!/bin/sh
echo "$@" >>"$(dirname "$0")/../calls"
"""


def copy_scripts(tmp_path: Path) -> Path:
    """The project's scripts and pyproject.toml in a directory of their own, with a .venv whose
    python only notes how it was called (`calls`): what the bootstrap would install."""
    (tmp_path / "scripts").mkdir()
    for name in ("bootstrap", "demo", "test"):
        shutil.copy2(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def calls(project: Path) -> list[str]:
    log = project / ".venv" / "calls"
    return log.read_text().splitlines() if log.exists() else []


def bootstrap(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """scripts/bootstrap with nothing but a shell's tools on PATH: no npm."""
    bare = project / "bare-bin"
    bare.mkdir(exist_ok=True)
    for tool in ("bash", "dirname", "touch", "tail"):
        found = shutil.which(tool)
        if found and not (bare / tool).exists():
            (bare / tool).symlink_to(found)
    return subprocess.run(
        [str(project / "scripts" / "bootstrap"), *args], capture_output=True, text=True,
        timeout=60, env={"PATH": str(bare), "HOME": os.environ.get("HOME", "/root")},
    )  # fmt: skip


def test_the_demo_s_install_needs_no_npm_and_no_dev_extras(tmp_path):
    project = copy_scripts(tmp_path)
    (project / ".venv" / ".forkpoint-demo").touch()  # installed since pyproject.toml changed
    done = bootstrap(project, "demo")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and calls(project) == []  # nothing to install: no pip, no npm


def test_a_dev_install_serves_the_demo_too(tmp_path):
    project = copy_scripts(tmp_path)
    (project / ".venv" / ".forkpoint-dev").touch()
    done = bootstrap(project, "demo")
    assert done.returncode == 0 and done.stderr == "" and calls(project) == [], done.stderr


def test_a_changed_pyproject_installs_again_and_an_unknown_profile_is_refused(tmp_path):
    project = copy_scripts(tmp_path)
    stamp = project / ".venv" / ".forkpoint-demo"
    stamp.touch()
    os.utime(stamp, (1, 1))  # older than pyproject.toml
    done = bootstrap(project, "demo")
    assert done.returncode == 0, done.stderr
    assert "installing forkpoint[demo] into .venv" in done.stderr
    [pip, compiled] = calls(project)
    assert pip.startswith("-m pip install") and pip.endswith("-e .[demo]")
    assert "--no-compile" not in pip  # kept compiled: PYTHONDONTWRITEBYTECODE keeps nothing
    assert compiled == "-m compileall -q forkpoint"  # the editable install's own modules
    assert stamp.stat().st_mtime > 1  # and noted as installed
    refused = bootstrap(project, "everything")
    assert refused.returncode == 2 and "usage: scripts/bootstrap [demo|dev]" in refused.stderr


def test_the_demo_scripts_use_the_demo_profile_and_the_tests_the_dev_one():
    assert "scripts/bootstrap demo\n" in (ROOT / "scripts" / "demo").read_text()
    assert "scripts/bootstrap dev\n" in (ROOT / "scripts" / "test").read_text()
    assert "scripts/bootstrap dev\n" in (ROOT / ".ci" / "run").read_text()


def test_what_the_demo_runs_is_installed_by_the_demo_extra():
    """Each package the example's programs import is a dependency of forkpoint or its `demo`
    extra: the demo never needs what only the tests install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    demo = project["optional-dependencies"]["demo"]
    installed = {_name(r) for r in [*project["dependencies"], *demo]}
    installed |= {_name(r) for e in _extras(demo) for r in project["optional-dependencies"][e]}
    imported = set()
    for path in EXAMPLE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"forkpoint", "examples"}
    assert third_party and third_party <= installed, (third_party, installed)


def _name(requirement: str) -> str:
    for stop in "[<>=;~! ":
        requirement = requirement.split(stop)[0]
    return requirement.replace("-", "_")


def _extras(requirements: list[str]) -> list[str]:
    """The extras of forkpoint that `requirements` pull in (`forkpoint[fast]`)."""
    return [r.split("[")[1].rstrip("]") for r in requirements if r.startswith("forkpoint[")]
