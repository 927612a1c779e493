"""Benchmark: what masking secrets costs a body, per byte, by size.

Bodies of 64 KiB to 16 MiB, each a Chat Completions request whose one message is text made
here (prose, code, base64 as an image's data URL would be), with no credential in it: the cost
every request pays. Three passes are timed, best of `--rounds`:

- `shapes re2` / `shapes re`: the credential shapes alone, by each scanner (`engine.shapes`:
  RE2 with the `fast` extra's google-re2, else a `re` pattern per shape);
- `body`: `Redaction.body` as a request's record gets it (names, shapes) with the installed
  scanner;
- `known`: `Redaction.body` of an exchange that knows a Bearer token and a query key (every
  SDK sends one), over a body that holds neither: what looking for them costs.

Printed: microseconds per body and nanoseconds per byte.

    .venv/bin/python benchmarks/redaction.py             # about a minute
    .venv/bin/python benchmarks/redaction.py --rounds 1  # quicker
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import time
from collections.abc import Callable

from forkpoint.engine import shapes
from forkpoint.engine.redaction import Redaction

SIZES = (64 << 10, 1 << 20, 4 << 20, 16 << 20)
PROSE = "the refund policy says orders ship within two days unless the customer asks"
CODE = "def total(items): return sum(item.price * item.quantity for item in items)"
WORDS = [*PROSE.split(" "), *CODE.split(" "), "max_tokens", "tool_calls", '{"order_id":']
JSON = (("content-type", "application/json"),)


def text(kind: str, size: int, rng: random.Random) -> str:
    if kind == "base64":
        return "data:image/png;base64," + base64.b64encode(rng.randbytes(size * 3 // 4)).decode()
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def best(rounds: int, work: Callable[[], object]) -> float:
    fastest = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(7)
    scanners = {"shapes re": shapes.re_scanner()}
    try:
        scanners["shapes re2"] = shapes.re2_scanner()
    except ImportError:
        print("(google-re2 is not installed: pip install 'forkpoint[fast]')")
    rules = Redaction()
    headers = (("authorization", "Bearer opaque-Token-77a1c9e0"),)
    knowing, _ = rules.request("/v1/chat/completions?key=q-Value-5e1d2b", headers, b"")
    print(f"{'body':>16} {'pass':>11} {'µs':>10} {'ns/byte':>8}")
    for kind in ("prose", "base64"):
        for size in SIZES:
            body = json.dumps(
                {
                    "model": "gpt-4o",
                    "messages": [{"role": "user", "content": text(kind, size, rng)}],
                }
            ).encode()
            passes: dict[str, Callable[[bytes], object]] = {
                **scanners,
                "body": lambda data: rules.body(data, JSON),
                "known": lambda data: knowing.body(data, JSON),
            }
            for name, work in passes.items():
                seconds = best(args.rounds, lambda work=work, body=body: work(body))
                per_byte = seconds * 1e9 / len(body)
                label = f"{kind} {size >> 10} KiB"
                print(f"{label:>16} {name:>11} {seconds * 1e6:>10.0f} {per_byte:>8.2f}")


if __name__ == "__main__":
    main()
