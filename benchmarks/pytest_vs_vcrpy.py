"""Benchmark: cassette tests under forkpoint's pytest plugin against vcrpy with pytest-recording.

The same 40 tests of 3 chat completions each, written twice (once with the openai SDK, once
with plain httpx), are recorded once against a scripted upstream by each tool, then replayed
with the upstream gone, rounds alternating between the tools. Reported: the median wall time
of a replay session per tool and client, the median of their ratio within each round (a pair
run back to back, so the machine's drift cancels), and the cassettes' total size (target:
forkpoint at most 1.0x vcrpy's time, and no larger cassettes). Both replays must serve every
body byte for byte: each test asserts the answer it got.

Both tools are measured as installed: pip compiled vcrpy's modules to bytecode when it
installed them, so forkpoint's are compiled first too. A checkout installed editable, under
PYTHONDONTWRITEBYTECODE, would otherwise compile every forkpoint module in every session.

    .venv/bin/pip install -e '.[bench]'          # vcrpy and pytest-recording
    .venv/bin/python benchmarks/pytest_vs_vcrpy.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import forkpoint
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.testing.upstream import ScriptedUpstream

TESTS = 40
CALLS = 3
TARGET = 1.0

CLIENTS = {
    "openai": """
import openai

def ask(question):
    with openai.OpenAI(max_retries=0) as client:
        answer = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}])
    return answer.choices[0].message.content
""",
    "httpx": """
import os, httpx

def ask(question):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": question}]}
    headers = {"Authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "sk-x")}
    with httpx.Client(base_url=os.environ["OPENAI_BASE_URL"]) as client:
        answer = client.post("/chat/completions", json=body, headers=headers).json()
    return answer["choices"][0]["message"]["content"]
""",
}
MARKERS = {"forkpoint": "@pytest.mark.forkpoint", "vcrpy": "@pytest.mark.vcr"}


def write_suite(root: Path, tool: str, client: str) -> Path:
    suite = root / f"{tool}-{client}"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "import os, pytest\n\n"
        "@pytest.fixture(scope='module')\n"
        "def vcr_config():\n"
        "    return {'filter_headers': ['authorization']}\n"
    )
    tests = ["import pytest", CLIENTS[client]]
    for index in range(TESTS):
        questions = [f"test {index} question {call}" for call in range(CALLS)]
        tests.append(
            f"\n{MARKERS[tool]}\ndef test_{index}():\n"
            + "".join(f"    assert ask({q!r}) == {('[gpt-4o] ' + q)!r}\n" for q in questions)
        )
    (suite / "test_agent.py").write_text("\n".join(tests))
    return suite


def pytest_session(suite: Path, tool: str, *, record: bool, upstream: str) -> float:
    mode = "once" if record else "none"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)]
    args += ["--forkpoint-record", mode] if tool == "forkpoint" else ["--record-mode", mode]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "FORKPOINT_"))}
    env["OPENAI_API_KEY"] = "sk-bench"
    if tool == "vcrpy":  # pytest-recording's tests reach the upstream by their base URL
        env["OPENAI_BASE_URL"] = f"{upstream}/v1"
    else:
        env["FORKPOINT_UPSTREAM"] = upstream
    started = time.perf_counter()
    done = subprocess.run(args, cwd=suite, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tool} {suite.name} {'record' if record else 'replay'} failed:\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")  # fmt: skip
    return elapsed


def cassette_bytes(suite: Path) -> int:
    return sum(p.stat().st_size for p in suite.rglob("*.yaml"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    try:
        import pytest_recording  # noqa: F401
    except ImportError:
        raise SystemExit("needs pytest-recording: .venv/bin/pip install -e '.[bench]'") from None
    compileall.compile_dir(Path(forkpoint.__file__).parent, quiet=1)  # as pip would (above)
    upstream = ScriptedUpstream()
    thread = LoopThread("bench-upstream")
    url = thread.call(upstream.start())
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as work:
        suites = {
            (tool, client): write_suite(Path(work), tool, client)
            for tool in MARKERS
            for client in CLIENTS
        }
        for (tool, _), suite in suites.items():
            pytest_session(suite, tool, record=True, upstream=url)
        thread.call(upstream.close())  # replay has no upstream to reach
        times: dict[tuple[str, str], list[float]] = {key: [] for key in suites}
        for round_ in range(rounds):
            order = list(suites) if round_ % 2 == 0 else list(reversed(suites))
            for key in order:
                times[key].append(pytest_session(suites[key], key[0], record=False, upstream=url))
        sizes = {key: cassette_bytes(suite) for key, suite in suites.items()}
    thread.close()
    print(f"{TESTS} tests x {CALLS} chat calls, replayed with the upstream gone; median of "
          f"{rounds} rounds, tools alternating; ratio: the median of each round's")  # fmt: skip
    print(f"{'client':8} {'vcrpy s':>9} {'forkpoint s':>12} {'ratio':>7} {'target':>8}  "
          f"{'vcrpy KB':>9} {'forkpoint KB':>13} {'ratio':>7}")  # fmt: skip
    for client in CLIENTS:
        vcr_s = statistics.median(times[("vcrpy", client)])
        fp_s = statistics.median(times[("forkpoint", client)])
        pairs = zip(times[("forkpoint", client)], times[("vcrpy", client)], strict=True)
        ratio = statistics.median(fp / vcr for fp, vcr in pairs)
        size_ratio = sizes[("forkpoint", client)] / sizes[("vcrpy", client)]
        ok = "PASS" if ratio <= TARGET and size_ratio <= 1.0 else "FAIL"
        vcr_kb, fp_kb = sizes[("vcrpy", client)] / 1024, sizes[("forkpoint", client)] / 1024
        print(f"{client:8} {vcr_s:>9.2f} {fp_s:>12.2f} {ratio:>7.2f} {'<= 1.0':>8}  "
              f"{vcr_kb:>9.1f} {fp_kb:>13.1f} {size_ratio:>7.2f}  {ok}")  # fmt: skip


if __name__ == "__main__":
    main()
