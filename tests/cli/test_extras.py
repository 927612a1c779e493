"""A missing optional dependency is one line naming the extra to install, never a traceback.

Each extra is hidden from a real `forkpoint` process (a sitecustomize puts None in
`sys.modules` for its packages, as if they were not installed) and the command that needs it
is run as a user would.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

from forkpoint.importing import EXTRAS
from tests.runner import ROOT, Ran, forkpoint

HIDER = """
import os, sys
for name in os.environ["FORKPOINT_TEST_HIDE"].split(","):
    sys.modules[name] = None  # `import name` now raises ModuleNotFoundError
"""


@pytest.fixture
def hiding(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run forkpoint with `packages` not importable (in it and in the commands it starts)."""
    (tmp_path / "sitecustomize.py").write_text(HIDER)

    def run(packages: str, *args: str, env: dict[str, str] | None = None) -> Ran:
        hidden = {
            "FORKPOINT_TEST_HIDE": packages,
            "PYTHONPATH": f"{tmp_path}:{ROOT}",
            "FORKPOINT_CASSETTE": str(tmp_path / "c.db"),
        }
        return forkpoint(*args, env={**hidden, **(env or {})}, clean=True, timeout=60)

    return run


def one_line(done: Ran, extra: str) -> str:
    """The error, checked to be one line on stderr that names the extra, and exit 2."""
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output
    [line] = done.stderr.splitlines()
    assert line.startswith("forkpoint: ") and f"pip install 'forkpoint[{extra}]'" in line
    return line


def test_postgres_store_without_psycopg(hiding):
    line = one_line(
        hiding("psycopg", "serve", "--store", "postgresql://127.0.0.1/test"), "postgres"
    )
    assert "the PostgreSQL store" in line and "needs the extra postgres" in line
    assert "no module named psycopg" in line


def test_postgres_store_without_psycopg_pool_in_a_reading_command(hiding):
    line = one_line(hiding("psycopg_pool", "runs", "--store", "postgresql://x/test"), "postgres")
    assert "no module named psycopg_pool" in line


def test_intercept_without_mitmproxy(hiding):
    done = hiding("mitmproxy", "record", "--intercept", "--", sys.executable, "-c", "pass")
    assert "the interceptor" in one_line(done, "intercept")


def test_ca_without_mitmproxy(hiding):
    assert "needs the extra intercept" in one_line(hiding("mitmproxy", "ca"), "intercept")


def test_uvloop_asked_for_without_the_fast_extra(hiding):
    done = hiding("uvloop", "record", "--", sys.executable, "-c", "pass",
                  env={"FORKPOINT_LOOP": "uvloop"})  # fmt: skip
    assert "FORKPOINT_LOOP=uvloop needs the extra fast" in one_line(done, "fast")


def test_without_the_fast_extra_a_command_runs_on_asyncio(hiding):
    done = hiding("uvloop", "record", "--", sys.executable, "-c", "pass")
    assert done.exit_code == 0, done.output
    assert "finished" in done.stderr and "uvloop" not in done.stderr


def test_worker_without_procrastinate(hiding):
    done = hiding("procrastinate", "worker", "--store", "postgresql://127.0.0.1/test",
                  "--agent", "qa=true")  # fmt: skip
    line = one_line(done, "workers")
    assert "the job queue" in line and "no module named procrastinate" in line


@pytest.mark.parametrize("package", ["jinja2", "markupsafe"])
def test_ui_without_its_extra(hiding, package):
    line = one_line(hiding(package, "ui", "--port", "0"), "ui")
    assert "the web view" in line and package in line  # jinja2 itself needs markupsafe


def test_without_re2_shapes_are_found_by_re(tmp_path):
    """RE2 is the `fast` extra's: without it the same credentials are masked, by `re`."""
    (tmp_path / "sitecustomize.py").write_text(HIDER)
    code = (
        "from forkpoint.engine import shapes; "
        "key = b'sk-proj-' + b'Ab3' * 16; "
        "print(shapes.find.__qualname__, shapes.find(b'key ' + key + b' end'))"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "FORKPOINT_TEST_HIDE": "re2",
             "PYTHONPATH": f"{tmp_path}:{ROOT}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    scanner, spans = done.stdout.split()[0], done.stdout.split(maxsplit=1)[1]
    assert scanner.startswith("re_scanner.") and spans == "[(4, 60)]\n", done.stdout


def test_the_agents_sdk_session_needs_no_sdk(tmp_path):
    """The `openai-agents` extra installs the SDK for the user's agent: forkpoint's adapter
    imports none of it."""
    (tmp_path / "sitecustomize.py").write_text(HIDER)
    code = (
        "import asyncio; from forkpoint.adapters.openai_agents import ForkpointSession; "
        "s = ForkpointSession(); asyncio.run(s.add_items([{'role': 'user', 'content': 'hi'}])); "
        "print(asyncio.run(s.get_items()))"
    )
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "FORKPOINT_TEST_HIDE": "agents",
             "PYTHONPATH": f"{tmp_path}:{ROOT}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[{'role': 'user', 'content': 'hi'}]"


def test_the_table_of_extras_is_pyproject_s():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = declared["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        assert extra in optional, extra
        shipped = {_module(requirement) for requirement in optional[extra]}
        assert set(modules) <= shipped, (extra, modules, shipped)


# What forkpoint imports that no requirement of its own names: brought by one that does.
_BROUGHT = {
    "yarl": "aiohttp",
    "certifi": "mitmproxy (intercept)",
    "cryptography": "mitmproxy (intercept)",
    "pytest": "pytest itself: the plugin is loaded by it",
    "compression": "the standard library from Python 3.14 (backports.zstd before it)",
}


def test_every_import_is_a_dependency_or_an_extra_s():
    """An import of a package forkpoint does not depend on must be an extra's, taken through
    `require_extra`: a new one the team adds lands in EXTRAS (and so in these tests)."""
    core = {_module(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())
            ["project"]["dependencies"]}  # fmt: skip
    known = core | {m for modules in EXTRAS.values() for m in modules} | set(_BROUGHT)
    found: dict[str, Path] = {}
    for path in (ROOT / "forkpoint").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "forkpoint":
                    found.setdefault(top, path)
    assert {m: str(p) for m, p in found.items() if m not in known} == {}


def _module(requirement: str) -> str:
    """The module a requirement installs: `psycopg[binary]>=3.2` -> psycopg."""
    name = re.split(r"[\[<>=;~! ]", requirement, maxsplit=1)[0]
    modules = {"PyYAML": "yaml", "backports.zstd": "backports", "google-re2": "re2"}
    return modules.get(name, name.replace("-", "_"))
