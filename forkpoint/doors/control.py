"""The proxy's own endpoints, under `/_forkpoint/`: where an agent's adapter registers.

`POST /_forkpoint/adapters` `{"url": URL, "name": NAME}` registers an agent's `/state` URL for
its run. For a fork or a resume the proxy first restores the agent's snapshot there (a
`PUT`), then answers `{"run": ID, "restored_step": N}` (`null` when the agent starts fresh).
"""

from __future__ import annotations

import aiohttp
import orjson
from aiohttp import web

from forkpoint.adapters.http import HttpAdapter
from forkpoint.doors.ports import Snapshots
from forkpoint.engine.session import Session

PREFIX = "/_forkpoint/"


class Control:
    def __init__(self, snapshots: Snapshots):
        self.snapshots = snapshots
        self._client: aiohttp.ClientSession | None = None

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self._client

    async def handle(
        self, request: web.Request, session: Session, route: str, body: bytes
    ) -> web.Response:
        if route.rstrip("/") == PREFIX + "adapters" and request.method == "POST":
            return await self._register(session, body)
        return _error(404, f"forkpoint has no endpoint {request.method} {route}")

    async def _register(self, session: Session, body: bytes) -> web.Response:
        try:
            fields = orjson.loads(body)
            url, name = str(fields["url"]), str(fields.get("name", "agent"))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return _error(400, 'register an adapter with {"url": "http://…/state", "name": …}')
        try:
            step = await self.snapshots.attach(session, HttpAdapter(url, self.client(), name=name))
        except aiohttp.ClientError as error:
            return _error(502, f"forkpoint could not restore state at {url}: {error}")
        return web.json_response({"run": session.run.id, "restored_step": step})

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)
