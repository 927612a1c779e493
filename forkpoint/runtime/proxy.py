"""A running proxy: store, recorder, sessions, sender, snapshots and the front doors, wired
together, started and stopped together.

`Proxy` lives on an asyncio loop; `ProxyThread` runs one on a background thread for
synchronous callers such as tests and the pytest plugin, with sync forms of opening sessions.
"""

from __future__ import annotations

import logging
import secrets
import socket
import ssl
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from forkpoint.cassettes.store import Store
from forkpoint.doors.gateway import SERVER_OPTIONS, Gateway
from forkpoint.doors.local import LocalDoor
from forkpoint.doors.parking import Parker
from forkpoint.doors.ports import Sender
from forkpoint.doors.reach import is_loopback, token_for
from forkpoint.engine.config import DEFAULT_CLIENT_TIMEOUT, DEFAULT_MAX_BODY, EngineConfig
from forkpoint.engine.pace import Pace
from forkpoint.engine.session import Session
from forkpoint.engine.snapshot_policy import SnapshotPolicy
from forkpoint.models import RunStatus
from forkpoint.runtime.intercept import InterceptOptions, require_mitmproxy
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.recording.process import recorder_for
from forkpoint.runtime.recording.recorder import LoopRecorder
from forkpoint.runtime.sessions import Sessions
from forkpoint.runtime.snapshots import Snapshotter
from forkpoint.runtime.upstream import AiohttpSender, tls_context

if TYPE_CHECKING:
    from forkpoint.runtime.intercept_server import InterceptServer

T = TypeVar("T")
log = logging.getLogger(__name__)


class Proxy:
    def __init__(
        self,
        store: Store,
        config: EngineConfig = EngineConfig(),
        *,
        sender: Sender | None = None,
        pace: Pace = Pace(),
        host: str = "127.0.0.1",
        port: int = 0,
        read_timeout: float = 600.0,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
        max_body: int = DEFAULT_MAX_BODY,
        snapshot_policy: SnapshotPolicy = SnapshotPolicy(),
        intercept: InterceptOptions | None = None,
        adapter_hosts: Iterable[str] = (),
        token: str | None = None,
    ):
        self.store = store
        self.config = config
        self.recorder = recorder_for(store, config.match)
        journal = getattr(self.recorder, "journal", None)
        self.sessions = Sessions(
            store, config, self.recorder, owner=journal.owner if journal is not None else None
        )
        self.snapshots = Snapshotter(snapshot_policy, self.recorder.submit)
        self.parking = Parker(
            store, self.recorder, self.snapshots, config.parking, forget=self.sessions.forget
        )
        self._own_sender: AiohttpSender | None = None
        if sender is None:
            tls: ssl.SSLContext | bool = True
            if intercept is not None:
                tls = tls_context(
                    extra_ca=intercept.upstream_ca, verify=not intercept.insecure_upstream
                )
            sender = self._own_sender = AiohttpSender(read_timeout=read_timeout, tls=tls)
        self.sender = sender
        # The interceptor (mitmproxy, an optional extra) hands its requests to the gateway,
        # marked with this secret; no other request may name an origin to be sent to.
        secret = secrets.token_urlsafe(24) if intercept is not None else None
        # Beyond loopback (either door) every request needs a token: the one given, else one
        # made up here (`token_made`: the caller shows it), as `forkpoint.doors.auth` says.
        hosts = (host, intercept.host) if intercept is not None else (host,)
        self._exposed = [where for where in hosts if not is_loopback(where)]
        self.token, self.token_made = token_for(next(iter(self._exposed), host), token)
        self.gateway = Gateway(
            sessions=self.sessions,
            config=config,
            sender=self.sender,
            recorder=self.recorder,
            snapshots=self.snapshots,
            pieces=store,
            pace=pace,
            max_body=max_body,
            client_timeout=client_timeout,
            intercept_secret=secret,
            adapter_hosts=adapter_hosts,
            token=self.token,
            parking=self.parking,
        )
        self._intercept = intercept
        self._secret = secret
        self.interceptor: InterceptServer | None = None
        if intercept is not None:
            require_mitmproxy()
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, listening: socket.socket | None = None) -> str:
        """Serve on `listening` (a socket its caller bound sooner, so a client could be
        started before the proxy was), else on the host and port given; returns the URL."""
        await self.recorder.start()
        self._runner = web.AppRunner(
            self.gateway.app, access_log=None, handle_signals=False,
            # an agent's idle connection, or one whose request head never ends, is closed then
            keepalive_timeout=self.gateway.client_timeout, **SERVER_OPTIONS,
        )  # fmt: skip
        await self._runner.setup()
        site: web.BaseSite
        if listening is not None:
            site = web.SockSite(self._runner, listening)
        else:
            site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        for where in self._exposed:
            log.warning(
                "forkpoint: listening on %s, beyond loopback: every request needs the token",
                where,
            )
        if self._intercept is not None:
            from forkpoint.runtime.intercept_server import InterceptServer

            assert self._secret is not None
            self.interceptor = InterceptServer(
                self._intercept, gateway=(host, port), secret=self._secret, token=self.token
            )
            await self.interceptor.start()
        return self.url

    async def stop(
        self, status: RunStatus = RunStatus.FINISHED, *, error: str | None = None
    ) -> None:
        """Stop serving, close the runs with `status`, then commit everything (or hold it in
        the journal, for a store that takes no writes)."""
        if self.interceptor is not None:
            await self.interceptor.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.gateway.settled()  # answers read on after their agents left (OnHangup)
        await self.snapshots.close()
        await self.gateway.control.close()
        if self._own_sender is not None:
            await self._own_sender.close()
        self.sessions.finish(status, error=error)
        await self.recorder.stop()


class ProxyThread:
    """A `Proxy` on a background event loop: `with ProxyThread(store) as proxy: proxy.url`.

    `record`, `replay`, `fork` and `resume` open a session (see `Sessions`) from this thread.
    `loop`: a loop thread to run on, which stays up when the proxy stops (the pytest plugin's
    proxies share one: a thread, a loop and their workers made once, not once a test).
    """

    def __init__(
        self,
        store: Store,
        config: EngineConfig = EngineConfig(),
        *,
        loop: LoopThread | None = None,
        **options: Any,
    ):
        self._own_loop = loop is None
        self._closed = False
        self._thread = loop or LoopThread("forkpoint-proxy")
        self.proxy: Proxy = self._thread.call(self._make(store, config, options))

    @staticmethod
    async def _make(store: Store, config: EngineConfig, options: dict[str, Any]) -> Proxy:
        return Proxy(store, config, **options)  # built on the loop that will run it

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._thread.call(coroutine)

    def record(self, **options: Any) -> Session:
        return self.call(self.proxy.sessions.record(**options))

    def replay(self, source: str, **options: Any) -> Session:
        return self.call(self.proxy.sessions.replay(source, **options))

    def fork(self, parent: str, **options: Any) -> Session:
        return self.call(self.proxy.sessions.fork(parent, **options))

    def resume(self, run: str, **options: Any) -> Session:
        return self.call(self.proxy.sessions.resume(run, **options))

    def local_door(self) -> LocalDoor:
        """The in-process door to this proxy's gateway, for clients on other threads; a store
        in memory may be written from theirs."""
        recorder = self.proxy.recorder
        write_here = recorder.write_here if isinstance(recorder, LoopRecorder) else None
        return LocalDoor(self.proxy.gateway, self._thread.loop, write_here=write_here)

    def __enter__(self) -> Proxy:
        self.call(self.proxy.start())
        return self.proxy

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, status: RunStatus = RunStatus.FINISHED) -> None:
        if self._closed or self._thread.loop.is_closed():
            return
        self._closed = True
        try:
            self.call(self.proxy.stop(status))
        finally:
            if self._own_loop:
                self._thread.close()
