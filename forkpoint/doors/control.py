"""The proxy's own endpoints, under `/_forkpoint/`: where an agent's adapter registers.

`POST /r/RUN/_forkpoint/adapters` `{"url": URL, "name": NAME}` (or the `X-Forkpoint-Run`
header for the run) registers an agent's `/state` URL for run RUN. For a fork or a resume the
proxy first restores the agent's snapshot there (a `PUT`), then answers
`{"run": ID, "restored_step": N}` (`null` when the agent starts fresh).

`POST /r/RUN/_forkpoint/mcp` `{"url": URL, "name": NAME}` registers where the stdio door
(`forkpoint mcp -- CMD`) reaches MCP server NAME of run RUN live (`doors.stdio_server`): the
run's requests to `/mcp-stdio/NAME` that go live are sent there (`routed`), so a fork's live
steps reach the server its own door starts, never the one its parent's door had.

The proxy fetches a registered URL at each step of its run and hands it the run's state on a
fork, so it takes only an agent's own: a registration names its run, and the adapter is
pulled for that run alone; its host is loopback (127.0.0.0/8, ::1, localhost) unless
`--adapter-host` allows another; the name `workspace` is forkpoint's own (`--workspace`). No
stranger's URL is fetched, and no redirect is followed (`forkpoint.adapters.http`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from forkpoint.adapters.http import AdapterError, HttpAdapter
from forkpoint.adapters.workspace import WorkspaceAdapter
from forkpoint.doors.ports import Snapshots
from forkpoint.doors.reach import is_loopback
from forkpoint.engine.config import EngineConfig, Routes
from forkpoint.engine.dialects.mcp import STDIO_PREFIX
from forkpoint.engine.session import Session

PREFIX = "/_forkpoint/"


class Control:
    def __init__(self, snapshots: Snapshots, *, adapter_hosts: Iterable[str] = ()):
        self.snapshots = snapshots
        self.adapter_hosts = frozenset(host.lower().strip("[]") for host in adapter_hosts)
        self._client: aiohttp.ClientSession | None = None
        # (run id, server name) -> where its stdio door takes live requests
        self._mcp_servers: dict[tuple[str, str], str] = {}

    def client(self) -> aiohttp.ClientSession:
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self._client

    async def handle(
        self, request: web.Request, session: Session, route: str, body: bytes, *, named: bool
    ) -> web.Response:
        """`named`: the request named its run (a `/r/RUN/` prefix or the run header)."""
        if route.rstrip("/") == PREFIX + "adapters" and request.method == "POST":
            if not named:
                return _error(
                    400,
                    "name the run the adapter is for: POST /r/RUN/_forkpoint/adapters "
                    "(or send the X-Forkpoint-Run header)",
                )
            return await self._register(session, body)
        if route.rstrip("/") == PREFIX + "mcp" and request.method == "POST":
            return self._register_mcp(session, body)
        return _error(404, f"forkpoint has no endpoint {request.method} {route}")

    def _register_mcp(self, session: Session, body: bytes) -> web.Response:
        try:
            fields = orjson.loads(body)
            url, name = str(fields["url"]), str(fields["name"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return _error(400, 'register an MCP server with {"url": "http://…", "name": …}')
        if not name or "/" in name:
            return _error(400, f"an MCP server's name is one path segment, not {name!r}")
        refused = self.refusal(url)
        if refused is not None:
            return _error(403, refused.replace("as an adapter", "as an MCP server"))
        self._mcp_servers[session.run.id, name] = url.rstrip("/")
        # `live`: the run's requests go live from the first (a recording): start the server now
        answer = {"run": session.run.id, "route": STDIO_PREFIX + name, "live": session.live}
        return web.json_response(answer)

    def routed(self, config: EngineConfig, run_id: str, route: str) -> EngineConfig:
        """The engine config for a request of run `run_id`: a stdio MCP server's route goes
        where its door registered, and nowhere when no door did (never to a default
        upstream)."""
        if not route.startswith(STDIO_PREFIX):
            return config
        name = route[len(STDIO_PREFIX) :].partition("/")[0].partition("?")[0]
        url = self._mcp_servers.get((run_id, name))
        prefix = STDIO_PREFIX.strip("/")
        return dataclasses.replace(config, routes=Routes(prefixes={prefix: url} if url else {}))

    async def _register(self, session: Session, body: bytes) -> web.Response:
        try:
            fields = orjson.loads(body)
            url, name = str(fields["url"]), str(fields.get("name", "agent"))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return _error(400, 'register an adapter with {"url": "http://…/state", "name": …}')
        if name == WorkspaceAdapter.name:
            return _error(400, "the adapter name 'workspace' is forkpoint's own (--workspace)")
        refused = self.refusal(url)
        if refused is not None:
            return _error(403, refused)
        try:
            step = await self.snapshots.attach(session, HttpAdapter(url, self.client(), name=name))
        except (aiohttp.ClientError, AdapterError) as error:
            return _error(502, f"forkpoint could not restore state at {url}: {error}")
        return web.json_response({"run": session.run.id, "restored_step": step})

    def refusal(self, url: str) -> str | None:
        """Why the proxy will not fetch `url` as an adapter, or None when it will."""
        try:
            parsed = URL(url)
        except ValueError:
            parsed = URL()
        host = (parsed.host or "").lower()
        if parsed.scheme not in ("http", "https") or not host:
            return f"forkpoint fetches only an http(s) URL with a host as an adapter, not {url!r}"
        if host in self.adapter_hosts or is_loopback(host):
            return None
        return (
            f"forkpoint fetches adapters on loopback only, not at {host}: start it with "
            f"--adapter-host {host} to allow that host"
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)
