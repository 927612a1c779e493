"""Benchmark: the CPU the gateway's own steps cost to carry out one answer, per request and per
streamed chunk, in process (no sockets): `Gateway.respond` over a decided `Forward`, the
upstream's body read off a real aiohttp `StreamReader` through the sender's response (each
chunk fed on a pass of the loop of its own, so each read waits as on a socket), every
command of the tee carried out to a reply that sends nowhere. What `record_parts.py` leaves
out of the doors and the runtime (the task, the events, the reads, the commands). CPU time,
best of 15. See benchmarks/README.md.

    .venv/bin/python benchmarks/answer_path.py
    PYTHONPATH=OTHER .venv/bin/python benchmarks/answer_path.py   # another forkpoint's
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import _upstream
from aiohttp import StreamReader
from record_parts import body, config, decided, headers, session, stream_head, whole_head

from forkpoint.doors.gateway import Decided, Gateway
from forkpoint.doors.parking import Parker
from forkpoint.engine.decide import Request
from forkpoint.runtime import loops
from forkpoint.runtime.upstream import _AiohttpResponse

ROUNDS, REPEATS = 100, 15


class _Protocol:
    _reading_paused = False
    connected = True

    def pause_reading(self, **_: object) -> None: ...

    def resume_reading(self, **_: object) -> None: ...


class _Upstream:
    """aiohttp's `ClientResponse`, as far as the sender reads it."""

    def __init__(self, head: tuple[tuple[str, str], ...], chunks: list[bytes]):
        self.status = 200
        self.raw_headers = tuple((k.encode(), v.encode()) for k, v in head)
        self.content = StreamReader(_Protocol(), 1 << 20, loop=asyncio.get_running_loop())  # type: ignore[arg-type]
        self.arriving = asyncio.ensure_future(self._arrive(chunks))

    async def _arrive(self, chunks: list[bytes]) -> None:
        """Each chunk on a pass of the loop of its own, as from a socket: the reader waits."""
        for data in chunks:
            await asyncio.sleep(0)
            self.content.feed_data(data)
        await asyncio.sleep(0)
        self.content.feed_eof()

    def release(self) -> None: ...


class _Sender:
    def __init__(self) -> None:
        self.next: Any = None

    async def send(self, *_: object) -> _AiohttpResponse:
        return _AiohttpResponse(self.next)


class _Nowhere:
    response = None

    async def head(self, status: int, headers: object) -> None: ...

    async def body(self, data: bytes) -> None: ...

    async def end(self) -> None: ...

    def drop(self) -> None: ...


class _Recorder:
    def submit(self, item: object) -> None: ...


class _Snapshots:
    def on_request(self, *_: object, **__: object) -> list[asyncio.Task[None]]:
        return []


async def main() -> None:
    sender = _Sender()
    recorder, snapshots = _Recorder(), _Snapshots()
    parking = Parker(None, recorder, snapshots, config.parking)  # type: ignore[arg-type]
    gateway = Gateway(
        sessions=None, config=config, sender=sender, recorder=recorder,  # type: ignore[arg-type]
        snapshots=snapshots, pieces=None, parking=parking,  # type: ignore[arg-type]
    )  # fmt: skip
    reply, frames = _upstream.completion(), _upstream.events(64)
    request = Request("POST", "/v1/chat/completions", headers, body)

    async def answered(head: tuple[tuple[str, str], ...], chunks: list[bytes]) -> float:
        best = []
        for _ in range(REPEATS):
            spent = 0.0
            for _ in range(ROUNDS):
                action = Decided(session, request, decided())
                sender.next = upstream = _Upstream(head, chunks)
                start = time.process_time()
                await gateway.respond(action, _Nowhere(), config, started=time.perf_counter())
                await upstream.arriving
                spent += time.process_time() - start
            best.append(spent / ROUNDS)
        return min(best) * 1e6

    whole = await answered(whole_head, [reply])
    stream = await answered(stream_head, frames)
    print(f"{'answer, non-stream (us/req)':40s} {whole:8.1f}")
    print(f"{'answer, stream of 64 (us/chunk)':40s} {(stream - whole) / 64:8.1f}")


if __name__ == "__main__":
    loops.run(main())  # uvloop where installed, as a command runs
