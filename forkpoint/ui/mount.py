"""The web view inside `forkpoint serve`, under `/_forkpoint/ui/`: made on its first request,
its modules imported on a thread, so the proxy starts as fast as without it and its loop never
waits on an import."""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING

from aiohttp import web

from forkpoint.api import Options
from forkpoint.errors import ConfigError

if TYPE_CHECKING:
    from forkpoint.ui.views import Views

__all__ = ["MOUNT", "WebView"]

# Where `forkpoint serve` shows the web view.
MOUNT = "/_forkpoint/ui"


class WebView:
    """`forkpoint.doors.ports.Pages` for a proxy: the views over `options`' cassette, guarded
    to loopback names when the proxy listens on loopback (`loopback`)."""

    def __init__(self, options: Options, *, loopback: bool) -> None:
        self.options = options
        self.loopback = loopback
        self._views: Views | None = None
        self._making: asyncio.Lock | None = None

    async def __call__(self, request: web.Request, path: str) -> web.StreamResponse:
        self._making = self._making or asyncio.Lock()
        async with self._making:
            if self._views is None:
                try:
                    server = await asyncio.to_thread(importlib.import_module, "forkpoint.ui.server")
                except ConfigError as error:  # the `ui` extra is not installed
                    return web.Response(status=501, text=f"forkpoint: {error}\n")
                self._views = server.views_for(self.options, mount=MOUNT, loopback=self.loopback)
        return await self._views(request, path)

    async def close(self) -> None:
        if self._views is not None:
            await self._views.close()
