"""The stack harness itself: a call that bypasses forkpoint's base URL is caught; the README's
compatibility table names the tests that prove it."""

from __future__ import annotations

import re
import subprocess
import sys

from forkpoint.models import Run
from tests.stacks.conftest import ROOT

# What a hidden call looks like: a price list or telemetry fetched from its own host.
PHONE_HOME = "import urllib.request as u; u.urlopen('http://prices.example/list.json', timeout=5)"


def test_the_sentinel_catches_a_call_that_bypasses_the_base_url(stacks):
    env = stacks.env("http://127.0.0.1:9", Run(id="r"))
    done = subprocess.run([sys.executable, "-c", PHONE_HOME], env=env, capture_output=True)
    assert done.returncode != 0  # the sentinel answered 502
    assert stacks.sentinel.attempts == ["GET http://prices.example/list.json HTTP/1.1"]


def test_the_readme_table_names_every_stack_test_and_only_real_ones():
    readme = (ROOT / "README.md").read_text()
    table = readme.partition("## Compatibility")[2]
    named = set(re.findall(r"tests/stacks/test_\w+\.py", table))
    assert named == {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests/stacks").glob("test_*.py")
        if path.name != "test_harness.py"
    }
    for path in re.findall(r"tests/\w+/test_\w+\.py", table):
        assert (ROOT / path).is_file(), path
