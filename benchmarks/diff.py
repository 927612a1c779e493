"""Benchmark: `forkpoint diff` of two 500-step runs, end to end and in process. Target: < 1 s.

The runs are built directly in a temporary cassette through the store: A is a recorded run
that alternates model calls (a growing Chat Completions history, a tool call, usage with cached
tokens) and HTTP tool calls with JSON responses; B forks A at step 250 (steps < 250 replayed)
with another model that asks for other tool arguments now and then. Bodies are realistic in
size, so pricing every step and rendering are measured on realistic data (`forkpoint diff` does not
load bodies: tool responses are compared by their content hashes).

    .venv/bin/python benchmarks/diff.py              # about 20 s
    .venv/bin/python benchmarks/diff.py --rounds 3   # quicker
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.compare.diff import diff_stored
from forkpoint.compare.html import diff_html
from forkpoint.compare.render import diff_json, diff_renderable
from forkpoint.models import (
    Exchange,
    Kind,
    Mode,
    Origin,
    Run,
    RunStatus,
    Summary,
    ToolCall,
    Usage,
)

STEPS = 500
FORK_AT = 250
TARGET_S = 1.0
START = 1_780_000_000.0
SYSTEM = "You are a support agent for an online shop. Be brief, check policy first. " * 8


def build(path: Path) -> None:
    """Runs `a` (recorded, gpt-4o) and `b` (a fork of `a` at FORK_AT, gpt-4o-mini)."""
    store = SqliteStore(path)
    store.create_run(Run("a", name="a", status=RunStatus.FINISHED, created_at=START))
    fork = Run("b", name="b", status=RunStatus.FINISHED, mode=Mode.FORK, parent_id="a")
    fork.fork_step, fork.change, fork.created_at = FORK_AT, {"model": "gpt-4o-mini"}, START + 3600
    store.create_run(fork)
    a = run_exchanges("a", "gpt-4o", START)
    live = run_exchanges("b", "gpt-4o-mini", START + 3600)[FORK_AT:]
    b = [replayed(e) for e in a[:FORK_AT]] + live
    store.add_exchanges(a)
    store.add_exchanges(b)
    store.close()


def run_exchanges(run_id: str, model: str, start: float) -> list[Exchange]:
    """A model call at every even step (a growing history), a GET tool call at every odd one.

    gpt-4o-mini asks for another order than gpt-4o at every tenth step, so B differs there.
    """
    history: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Please refund my order, the shoes don't fit."},
    ]
    exchanges: list[Exchange] = []
    for step in range(STEPS):
        other = model != "gpt-4o" and step % 10 == 0
        order = f"{'B' if other else 'A'}{step // 2:04d}"
        at = start + step * 0.5
        if step % 2 == 0:
            exchanges.append(model_call(run_id, step, model, order, history, at))
        else:
            result = json.dumps({"id": order, "status": "shipped", "total": 59.9, "items": 2})
            history.append({"role": "tool", "tool_call_id": f"call_{step - 1}", "content": result})
            summary = Summary(Kind.TOOL, "generic")
            exchanges.append(
                exchange(run_id, step, ("GET", f"/orders/{order}"), b"", result.encode(), summary)
            )
            exchanges[-1].started_at, exchanges[-1].duration_ms = at, 15.0
    return exchanges


def model_call(
    run_id: str, step: int, model: str, order: str, history: list[dict[str, object]], at: float
) -> Exchange:
    body = json.dumps({"model": model, "messages": history, "tools": []}).encode()
    prompt = len(body) // 4
    usage = Usage(input=prompt, output=24, cached=prompt // 2)
    call = ToolCall("lookup_order", json.dumps({"order_id": order}), f"call_{step}")
    function = {"name": call.name, "arguments": call.arguments}
    calls = [{"id": call.id, "type": "function", "function": function}]
    history.append({"role": "assistant", "tool_calls": calls})
    response = {
        "id": f"chatcmpl-{step}",
        "model": model,
        "choices": [{"message": {"role": "assistant", "tool_calls": calls}}],
        "usage": {"prompt_tokens": usage.input, "completion_tokens": usage.output},
    }
    text = f"[{model}] answer after step {step}"
    summary = Summary(
        Kind.LLM, "openai_chat", model=model, usage=usage, tool_calls=(call,), text=text
    )
    made = exchange(
        run_id, step, ("POST", "/v1/chat/completions"), body, json.dumps(response).encode(), summary
    )
    made.started_at, made.duration_ms = at, 420.0
    return made


def exchange(
    run_id: str,
    step: int,
    request: tuple[str, str],
    body: bytes,
    response: bytes,
    summary: Summary,
) -> Exchange:
    method, route = request
    return Exchange(
        run_id=run_id,
        step=step,
        method=method,
        route=route,
        request_headers=(("content-type", "application/json"),),
        request_body=body,
        fingerprint=f"{method} {route} {hashlib.sha256(body).hexdigest()}",
        status=200,
        response_headers=(("content-type", "application/json"),),
        response_body=response,
        summary=summary,
    )


def replayed(recorded: Exchange) -> Exchange:
    """B's copy of one of A's steps before the fork, as a fork records it."""
    return dataclasses.replace(
        recorded,
        run_id="b",
        origin=Origin.REPLAYED,
        started_at=START + 3600 + recorded.step * 0.001,
        duration_ms=0.2,
    )


def timed(action: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return times


def cli(cassette: Path, *args: str) -> Callable[[], object]:
    env = {**os.environ, "FORKPOINT_CASSETTE": str(cassette), "COLUMNS": "160"}

    def run() -> None:
        command = [sys.executable, "-m", "forkpoint", *args]
        done = subprocess.run(command, env=env, capture_output=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"forkpoint {' '.join(args)} failed: {done.stderr.decode()}")

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        cassette = Path(folder) / "bench.db"
        began = time.perf_counter()
        build(cassette)
        size = cassette.stat().st_size / 1e6
        print(f"built 2 x {STEPS} steps in {time.perf_counter() - began:.1f} s ({size:.1f} MB)\n")

        store = SqliteStore(cassette, create=False)
        first = time.perf_counter()
        diff = diff_stored(store, "a", "b")  # the first call loads the price table
        cold = time.perf_counter() - first
        assert diff.first_difference == FORK_AT and len(diff.steps) == STEPS

        def render() -> None:
            Console(file=io.StringIO(), width=160).print(diff_renderable(diff))

        rows: list[tuple[str, list[float]]] = [
            ("in process: load + price + diff (first)", [cold]),
            (
                "in process: again, prices cached",
                timed(lambda: diff_stored(store, "a", "b"), rounds),
            ),
            ("in process: terminal render", timed(render, rounds)),
            ("in process: JSON", timed(lambda: json.dumps(diff_json(diff)), rounds)),
            ("in process: HTML", timed(lambda: diff_html(diff), rounds)),
        ]
        store.close()
        page = str(Path(folder) / "diff.html")
        startup = [sys.executable, "-c", "import forkpoint.cli"]
        rows += [
            (
                "CLI: import forkpoint.cli",
                timed(lambda: subprocess.run(startup, check=True), rounds),
            ),
            ("CLI: forkpoint diff a b", timed(cli(cassette, "diff", "a", "b"), rounds)),
            (
                "CLI: forkpoint diff a b --json",
                timed(cli(cassette, "diff", "a", "b", "--json"), rounds),
            ),
            (
                "CLI: forkpoint diff a b --html F",
                timed(cli(cassette, "diff", "a", "b", "--html", page), rounds),
            ),
        ]

    print(f"{'measure':42} {'median s':>9} {'min s':>7}  target")
    medians = {label: statistics.median(times) for label, times in rows}
    for label, times in rows:
        verdict = ""
        if label.startswith("CLI: forkpoint diff"):
            verdict = f"< {TARGET_S:.1f} s {'PASS' if medians[label] < TARGET_S else 'FAIL'}"
        print(f"{label:42} {medians[label]:9.3f} {min(times):7.3f}  {verdict}")
    own = medians["CLI: forkpoint diff a b"] - medians["CLI: import forkpoint.cli"]
    print(f"\nforkpoint diff beyond importing forkpoint.cli: {own:.3f} s (median)")


if __name__ == "__main__":
    main()
