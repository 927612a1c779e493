"""A local HTTP service for the tests: an aiohttp app on a loop thread of its own, at
http://127.0.0.1:PORT, the tool or model API a test points forkpoint at."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from forkpoint.runtime.loop_thread import LoopThread


class Service:
    def __init__(self, app: web.Application, name: str, **runner_options: Any) -> None:
        self._runner = web.AppRunner(app, **runner_options)
        self._thread = LoopThread(name)
        self.url = self._thread.call(self._start())

    async def _start(self) -> str:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def stop(self) -> None:
        if not self._thread.loop.is_closed():
            self._thread.call(self._runner.cleanup())
            self._thread.close()
