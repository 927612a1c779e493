"""mitmproxy run in-process, on the proxy's own event loop, with the interceptor as its addon.

A `Proxy` started with `intercept=InterceptOptions(...)` starts and stops one beside its
gateway; its addon hands every request to that gateway, so both ways in feed one run through
one door. Only the mitmproxy addons an HTTP(S) forward proxy needs are loaded (no dumper,
no scripts, no flow storage), and the master's lifecycle is driven here rather than by
`Master.run`, which would swap the loop's task factory and exception handler for the
gateway's tasks too.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig
from mitmproxy.exceptions import OptionsError
from mitmproxy.master import Master
from mitmproxy.options import Options

from forkpoint.doors.interceptor import Interceptor
from forkpoint.errors import ConfigError
from forkpoint.runtime.certs import (
    ca_cert,
    client_bundle,
    client_env,
    config_dir,
    upstream_bundle,
)
from forkpoint.runtime.intercept import InterceptOptions

STOP_GRACE_S = 2.0


class InterceptServer:
    """The interceptor of one `Proxy`. One per process: mitmproxy keeps its master and options
    in a module-level context."""

    def __init__(
        self,
        options: InterceptOptions,
        *,
        gateway: tuple[str, int],
        secret: str,
        token: str | None = None,
    ):
        self.options = options
        self.confdir = options.confdir or config_dir()
        self.addon = Interceptor(gateway, secret, token)
        self._token = token
        self._master: Master | None = None
        self._server: proxyserver.Proxyserver | None = None
        self.url = ""

    async def start(self) -> str:
        """Listen; the proxy URL (`http://127.0.0.1:PORT`)."""
        ca_cert(self.confdir)  # made here, so a config dir we cannot write is a clear error
        master = Master(Options(), event_loop=asyncio.get_running_loop())
        # Master puts a handler for mitmproxy's deprecated log hook on the root logger, which
        # silences Python's last-resort handler: forkpoint's and mitmproxy's warnings would no
        # longer reach stderr. Nothing here uses that hook.
        logging.getLogger().removeHandler(master._legacy_log_events)
        server = proxyserver.Proxyserver()
        master.addons.add(
            core.Core(), server, next_layer.NextLayer(), tlsconfig.TlsConfig(), self.addon
        )
        try:
            master.options.update(**self._settings())
        except OptionsError as error:
            raise ConfigError(f"interceptor: {error}") from error
        self._master, self._server = master, server
        if not await server.setup_servers():
            await self.stop()
            where = f"{self.options.host}:{self.options.port}"
            raise ConfigError(f"the interceptor cannot listen on {where} (is the port in use?)")
        await master.running()
        host, port = server.listen_addrs()[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def env(self, run_id: str, base: Mapping[str, str] = os.environ) -> dict[str, str]:
        """The variables that intercept a command's HTTP(S) traffic as run `run_id`."""
        # `RUN:` with its empty password, or the proxy's token: requests drops a user name
        # that has no password.
        password = quote(self._token or "", safe="")
        proxy_url = self.url.replace("http://", f"http://{run_id}:{password}@", 1)
        ca = ca_cert(self.confdir)
        return client_env(proxy_url, client_bundle(self.confdir), ca, base)

    async def stop(self) -> None:
        """Stop listening and close the connections still open (a keep-alive from a client
        that has not hung up), so each flow in progress ends in its error hook."""
        master, server = self._master, self._server
        if master is None or server is None:
            return
        self._master = self._server = None
        await server.servers.update([])
        for handler in list(server.connections.values()):
            client = handler.transports.get(handler.client)
            if client is not None and client.handler is not None:
                client.handler.cancel("forkpoint stopped")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE_S
        while server.connections and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await master.done()

    def _settings(self) -> dict[str, Any]:
        options = self.options
        upstream_ca = options.upstream_ca and upstream_bundle(self.confdir, options.upstream_ca)
        return {
            "mode": [f"regular@{options.host}:{options.port}"],
            "confdir": str(self.confdir),
            # Connect only when a request is sent: each goes to the gateway, which reaches the
            # upstream itself (a replay, none); a bad upstream fails that request alone.
            "connection_strategy": "lazy",
            "http2": False,  # one wire format to translate; clients fall back to HTTP/1.1
            # What mitmproxy still sends upstream itself (websockets) is checked alike.
            "ssl_insecure": options.insecure_upstream,
            "ssl_verify_upstream_trusted_ca": str(upstream_ca) if upstream_ca else None,
        }
