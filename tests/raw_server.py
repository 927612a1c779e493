"""Upstreams that misbehave in ways an HTTP framework will not: a TCP server on a loop thread of
its own whose subclass writes the bytes (or drops the connection) itself."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod

from forkpoint.runtime.loop_thread import LoopThread


class RawServer(ABC):
    """Call `super().__init__()` last: it starts serving. `url` is where it listens."""

    def __init__(self) -> None:
        self._thread = LoopThread(type(self).__name__)
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        self._serving: set[asyncio.Task[None]] = set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            await self.serve(reader, writer)
        finally:
            self._serving.discard(task)

    @abstractmethod
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer one connection, byte by byte as the test needs."""

    def stop(self) -> None:
        """Stop listening (again: nothing)."""
        if self._thread.loop.is_closed():
            return

        async def close() -> None:
            self._server.close()
            for task in self._serving:  # connections still being answered end with the server
                task.cancel()
            await asyncio.gather(*self._serving, return_exceptions=True)

        self._thread.call(close())
        self._thread.close()
