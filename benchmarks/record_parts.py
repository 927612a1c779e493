"""Benchmark: the CPU each part of `record` costs per request and per streamed chunk.

The parts of one exchange of benchmarks/gateway.py's `sdk` workload (a 4 KB request with the
openai SDK's headers; a 1 KB answer, or a stream of 64 SSE events), each timed in this process
on its own: the engine's decision (the request's secrets masked), the tee, the journal's
pickle, and the writer's unpickle, derive (summary, fingerprint), pack and SQLite; then the
writer's parts for distinct requests (as gateway.py's are: each packs a new body), by batch
size. CPU time, the best of 7 repeats where repeated, so a shared machine moves it little.
What is not here (aiohttp's server and client, asyncio, the gateway's own steps, the writer
process's frames) is the rest of gateway.py's `proxy CPU, us/req`. See benchmarks/README.md.

    .venv/bin/python benchmarks/record_parts.py
    PYTHONPATH=OTHER .venv/bin/python benchmarks/record_parts.py   # another forkpoint's
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _upstream
import _workload

from forkpoint.api import Options, engine_config
from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.rows import exchange_rows
from forkpoint.engine import matching, shapes
from forkpoint.engine.decide import Action, Request, decide
from forkpoint.engine.derive import derive
from forkpoint.engine.dialects import summarize_exchange
from forkpoint.engine.encoding import decode_headers
from forkpoint.engine.lifecycle import Body, End, Head, Tee
from forkpoint.engine.session import Session
from forkpoint.models import Exchange, Run
from forkpoint.runtime import collector
from forkpoint.runtime.recording.writer import CassetteWriter

collector.tune()
config = engine_config(Options(upstream="http://127.0.0.1:1"), live=True)
sdk_headers, body = _workload.sdk_request("c32", 7)
raw = [(k.encode(), v.encode()) for k, v in sdk_headers.items()]
raw += [(b"Host", b"127.0.0.1:5"), (b"Content-Length", str(len(body)).encode())]
headers = decode_headers(raw)
session = Session(Run("bench"))
reply = _upstream.completion()
whole_head = (
    ("Content-Type", "application/json; charset=utf-8"),
    ("Content-Length", str(len(reply))),
    ("Date", "Wed, 02 Dec 2026 08:00:00 GMT"),
    ("Server", "Python/3.12 aiohttp/3.13"),
)
frames = _upstream.events(64)
stream_head = (
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-cache"),
    ("Transfer-Encoding", "chunked"),
    ("Date", "Wed, 02 Dec 2026 08:00:00 GMT"),
    ("Server", "Python/3.12 aiohttp/3.13"),
)
rules = config.redaction


def t(label: str, fn: Callable[[], object], n: int = 700, per: int = 1) -> None:
    fn()
    best = []
    for _ in range(7):
        s = time.process_time()
        for _ in range(n // 7):
            fn()
        best.append((time.process_time() - s) / (n // 7))
    print(f"{label:56s} {min(best) * 1e6 / per:8.1f}")


def decided() -> Action:
    return decide(session, Request("POST", "/v1/chat/completions", headers, body), config)


def teed(action: Action, stream: bool) -> Exchange:
    tee = Tee(action.record, 0.0, redaction=action.redaction)
    if stream:
        tee.feed(Head(200, stream_head), 0.001)
        for frame in frames:
            tee.feed(Body(frame), 0.002)
        tee.feed(End(), 0.003)
    else:
        tee.feed(Head(200, whole_head), 0.001)
        tee.feed(Body(reply), 0.002)
        tee.feed(End(), 0.002)
    return tee.record


def distinct(writer: CassetteWriter, count: int = 512) -> None:
    """The writer's parts for exchanges whose requests all differ (as gateway.py's do: each
    body is new, so it is hashed, compressed alone and against its run's keyframes), by batch
    size; the same request again and again packs nothing new. One pass warms up."""
    first, steps = 1000, iter(range(10**6, 10**7))  # after those written above
    for size in (32, 1, 8, 32, 128):
        pickles = []
        for index in range(first, first + count):
            _, sdk_body = _workload.sdk_request("c32", index)
            asked = decide(session, Request("POST", "/v1/chat/completions", headers, sdk_body),
                           config)  # fmt: skip
            pickles.append(pickle.dumps(teed(asked, False), protocol=5))
        first += count
        parts = {"unpickle": 0.0, "derive": 0.0, "pack": 0.0, "whole": 0.0}
        for start in range(0, count, size):
            begun = time.process_time()
            batch = [pickle.loads(p) for p in pickles[start : start + size]]
            parts["unpickle"] += time.process_time() - begun
            for exchange in batch:
                exchange.step = next(steps)
            copies = [pickle.loads(p) for p in pickles[start : start + size]]
            begun = time.process_time()
            for exchange in copies:
                derive(exchange, config.match)
            parts["derive"] += time.process_time() - begun
            begun = time.process_time()
            new, _ = exchange_rows(copies, packer, lambda digest: False)
            packer.committed(new.values())  # as the store's packer learns after its commit
            parts["pack"] += time.process_time() - begun
            begun = time.process_time()
            writer.write(batch)
            parts["whole"] += time.process_time() - begun
        if first == 1000 + count:
            continue  # the warm-up
        per = {name: spent * 1e6 / count for name, spent in parts.items()}
        sqlite = per["whole"] - per["derive"] - per["pack"]
        print(
            f"  batches of {size:3d}: unpickle {per['unpickle']:5.1f}, derive "
            f"{per['derive']:5.1f}, pack {per['pack']:5.1f}, SQLite {sqlite:5.1f}; "
            f"write {per['whole']:5.1f}"
        )


packer = Packer(compact=True)


def main() -> None:
    action = decided()
    whole, stream = teed(action, False), teed(action, True)
    print("per request (us)")
    t("decide: whole", decided)
    t(
        "  redaction of the request (body, headers)",
        lambda: rules.request("/v1/chat/completions", headers, body),
    )
    t("    secret shapes in the 4 KB body", lambda: shapes.find(body))
    t("    request headers masked", lambda: action.redaction.headers(headers))
    t("tee, non-stream answer (head, body, commit)", lambda: teed(action, False))
    t("  response body masked (1 KB)", lambda: action.redaction.body(reply, whole_head))
    t("journal pickle (non-stream)", lambda: pickle.dumps(whole, protocol=5))
    p_whole = pickle.dumps(whole, protocol=5)
    t("writer: unpickle", lambda: pickle.loads(p_whole))

    def derived(exchange: Exchange) -> None:
        exchange.summary, exchange.fingerprint = None, ""
        derive(exchange, config.match)

    t("writer: derive (summary + fingerprint)", lambda: derived(whole))
    t("  summary", lambda: summarize_exchange(whole))
    t(
        "  fingerprint",
        lambda: matching.fingerprint(
            whole.method,
            whole.route,
            whole.request_body,
            whole.request_headers,
            config.match,
            masked=True,
        ),
    )
    folder = tempfile.mkdtemp(prefix="forkpoint-parts-")
    store = open_store(str(Path(folder) / "parts.db"))
    writer = CassetteWriter(store, config.match, kept=None)
    writer.write([session.run])
    step = iter(range(10**6))

    def written(exchange: Exchange, n: int = 32) -> None:
        batch = []
        for _ in range(n):
            e = pickle.loads(pickle.dumps(exchange, protocol=5))
            e.step = next(step)
            batch.append(e)
        writer.write(batch)

    t(
        "writer: unpickle, derive, pack, SQLite (batches of 32)",
        lambda: written(whole),
        n=70,
        per=32,
    )
    print("per request, each a new one as in gateway.py (us)")
    distinct(writer)
    requests = iter([_workload.sdk_request("pack", i)[1] for i in range(720)])
    packing, steps = Packer(compact=True), iter(range(10**6))

    def packed() -> None:  # each a new body of one run: cut, hashed, compressed against it
        packing.pack_request("pack", next(steps), next(requests), {}, lambda digest: False)

    t("  pack of the request alone (a new 4 KB body of its run)", packed)
    print("per stream of 64 chunks, per chunk (us)")
    t("tee, stream (64 chunks, commit)", lambda: teed(action, True), n=140, per=64)
    t(
        "  stream masked at its end",
        lambda: action.redaction.chunks(stream.chunks, stream_head),
        n=140,
        per=64,
    )
    t("journal pickle (stream)", lambda: pickle.dumps(stream, protocol=5), n=140, per=64)
    t("writer: summary of the stream", lambda: summarize_exchange(stream), n=140, per=64)
    t("writer: unpickle, derive, pack, SQLite", lambda: written(stream, 8), n=35, per=64 * 8)
    store.close()
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
