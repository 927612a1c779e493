"""The stack harness itself: a call that bypasses forkpoint's base URL is caught."""

from __future__ import annotations

import subprocess
import sys

from forkpoint.cassettes.models import Run

# What a hidden call looks like: a price list or telemetry fetched from its own host.
PHONE_HOME = "import urllib.request as u; u.urlopen('http://prices.example/list.json', timeout=5)"


def test_the_sentinel_catches_a_call_that_bypasses_the_base_url(stacks):
    env = stacks.env("http://127.0.0.1:9", Run(id="r"))
    done = subprocess.run([sys.executable, "-c", PHONE_HOME], env=env, capture_output=True)
    assert done.returncode != 0  # the sentinel answered 502
    assert stacks.sentinel.attempts == ["GET http://prices.example/list.json HTTP/1.1"]
