"""A running proxy: store, recorder, sessions, sender and gateway, started and stopped together.

`Proxy` lives on an asyncio loop (the CLI's); `ProxyThread` runs one on a background thread for
synchronous callers such as tests and the pytest plugin.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from forkpoint.cassettes.store import Store
from forkpoint.doors.gateway import Gateway
from forkpoint.engine.decide import DEFAULT_MAX_BODY, EngineConfig
from forkpoint.engine.pace import Pace
from forkpoint.models import RunStatus
from forkpoint.runtime.intercept import InterceptOptions, require_mitmproxy
from forkpoint.runtime.loop_thread import LoopThread
from forkpoint.runtime.recording.process import recorder_for
from forkpoint.runtime.sessions import Sessions
from forkpoint.runtime.snapshots import SnapshotPolicy, Snapshotter
from forkpoint.runtime.upstream import AiohttpSender, Sender

if TYPE_CHECKING:
    from forkpoint.runtime.intercept_server import InterceptServer

T = TypeVar("T")


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
        max_body: int = DEFAULT_MAX_BODY,
        snapshot_policy: SnapshotPolicy = SnapshotPolicy(),
        intercept: InterceptOptions | None = None,
    ):
        self.store = store
        self.config = config
        self.sessions = Sessions(store, config)
        self.recorder = recorder_for(store, config.match)
        self.snapshotter = Snapshotter(snapshot_policy, self.recorder.submit)
        self._own_sender = sender is None
        self.sender: Sender = sender or AiohttpSender(read_timeout=read_timeout)
        self.gateway = Gateway(
            sessions=self.sessions,
            config=config,
            sender=self.sender,
            recorder=self.recorder,
            snapshotter=self.snapshotter,
            pace=pace,
            max_body=max_body,
        )
        # The second front door, an HTTPS_PROXY (mitmproxy, an optional extra), when asked for.
        self.interceptor: InterceptServer | None = None
        if intercept is not None:
            require_mitmproxy()
            from forkpoint.runtime.intercept_server import InterceptServer

            self.interceptor = InterceptServer(self, intercept)
        self._host, self._port = host, port
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        await self.recorder.start()
        self._runner = web.AppRunner(self.gateway.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        if self.interceptor is not None:
            await self.interceptor.start()
        return self.url

    async def stop(
        self, status: RunStatus = RunStatus.FINISHED, *, error: str | None = None
    ) -> None:
        """Stop serving, commit every exchange, then close the runs with `status`."""
        if self.interceptor is not None:
            await self.interceptor.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.snapshotter.close()
        await self.gateway.control.close()
        if self._own_sender and isinstance(self.sender, AiohttpSender):
            await self.sender.close()
        await self.recorder.stop()
        self.sessions.finish(status, error=error)


class ProxyThread:
    """A `Proxy` on a background event loop: `with ProxyThread(store) as proxy: proxy.url`."""

    def __init__(self, store: Store, config: EngineConfig = EngineConfig(), **options: Any):
        self._thread = LoopThread("forkpoint-proxy")
        self.proxy: Proxy = self._thread.call(self._make(store, config, options))

    @staticmethod
    async def _make(store: Store, config: EngineConfig, options: dict[str, Any]) -> Proxy:
        return Proxy(store, config, **options)  # built on the loop that will run it

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._thread.call(coroutine)

    def __enter__(self) -> Proxy:
        self.call(self.proxy.start())
        return self.proxy

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, status: RunStatus = RunStatus.FINISHED) -> None:
        if self._thread.loop.is_closed():
            return
        try:
            self.call(self.proxy.stop(status))
        finally:
            self._thread.close()
