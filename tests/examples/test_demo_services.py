"""scripts/demo's `start` reads a service's URL from the service's own log: a service started again
(restart_tools, a fresh shop for each fork) must never hand the demo the URL of the one it
replaced, whose port nothing listens on any more (CI saw the park demo fail so, under load)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.runner import ROOT

RESTARTS = 200


def start_function() -> str:
    """The demo's own `start`, as the script defines it."""
    demo = (ROOT / "scripts" / "demo").read_text()
    found = re.search(r"^start\(\) \{\n.*?^\}\n", demo, re.M | re.S)
    assert found, "scripts/demo defines no start()"
    return found.group(0)


def test_a_service_started_again_gives_its_own_url_never_the_one_it_replaced(tmp_path):
    restarts = f"""
logs={tmp_path}; pids=()
for i in $(seq {RESTARTS}); do
    start TOOLS echo "serving on http://127.0.0.1:$i"
    echo "$TOOLS"
done
"""
    # More busy processes than cores, as on a loaded CI machine: the shell that forks the service
    # then now and again reads the log before the service has opened it.
    spin = [sys.executable, "-c", "while True: pass"]
    busy = [subprocess.Popen(spin) for _ in range((os.cpu_count() or 2) + 1)]
    try:
        done = subprocess.run(
            ["bash", "-c", start_function() + restarts], capture_output=True, text=True, timeout=120
        )
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert done.returncode == 0, done.stderr
    urls = done.stdout.split()
    stale = [(i, url) for i, url in enumerate(urls, 1) if url != f"http://127.0.0.1:{i}"]
    assert len(urls) == RESTARTS, done.stdout
    assert stale == [], f"{len(stale)} starts read an earlier URL: {stale[:5]}"
