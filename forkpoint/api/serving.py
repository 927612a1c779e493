"""`serve`: a long-lived proxy that records every run that comes through (or replays one).

Requests pick their run with a `/r/RUN/` path prefix or the `X-Forkpoint-Run` header; through
the interceptor, with proxy credentials (`HTTPS_PROXY=http://RUN:@host:port`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from forkpoint.api.options import Options, engine_config, match_config, store_location
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import open_store
from forkpoint.engine.config import OnDivergence
from forkpoint.models import RunStatus
from forkpoint.runtime.loop_thread import until_stopped
from forkpoint.runtime.proxy import Proxy
from forkpoint.runtime.recording.journaled import merge_orphans

__all__ = ["Serving", "aserve", "serve"]


@dataclass(frozen=True, slots=True)
class Serving:
    """Where a started proxy listens: its base URL and, with the interceptor, the variables
    that send a client's traffic through it (for run RUN)."""

    url: str
    intercept_url: str | None = None
    intercept_env: dict[str, str] | None = None
    token: str | None = None  # what every request must carry (forkpoint.doors.auth)
    token_made: bool = False  # made up by the proxy: the caller shows it


async def aserve(
    options: Options = Options(port=8765),
    *,
    replay: str | None = None,
    ready: Callable[[Serving], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (or until `stop` is set): record every run, or replay run
    `replay`; `ready` is told where, once listening."""
    store = open_store(store_location(options.cassette))
    try:
        # what a killed proxy left in its journal, before the run to replay is read
        await asyncio.to_thread(merge_orphans, store, match_config(options))
        live = replay is None or options.on_divergence is not OnDivergence.FAIL
        recorded = store.exchanges(store.find_run(replay).id, bodies=False) if replay else []
        proxy = Proxy(
            store, engine_config(options, live=live, recorded=recorded), host=options.host,
            port=options.port, pace=options.pace, read_timeout=options.read_timeout,
            max_body=options.max_body, snapshot_policy=options.snapshots,
            intercept=options.intercept, adapter_hosts=options.adapter_hosts,
            token=options.token, client_timeout=options.client_timeout,
        )  # fmt: skip
        if replay is not None:  # a replaying proxy serves that replay alone, whatever is named
            session = await proxy.sessions.replay(replay, on_divergence=options.on_divergence)
            proxy.sessions.serve_only(session, replay, *filter(None, [session.run.parent_id]))
        url = await proxy.start()
        if ready is not None:
            interceptor = proxy.interceptor
            ready(Serving(
                url,
                interceptor.url if interceptor else None,
                interceptor.env("RUN") if interceptor else None,
                proxy.token,
                proxy.token_made,
            ))  # fmt: skip
        await (stop.wait() if stop is not None else until_stopped())
        await proxy.stop(RunStatus.FINISHED)
    finally:
        store.close()


def serve(
    options: Options = Options(port=8765),
    *,
    replay: str | None = None,
    ready: Callable[[Serving], None] | None = None,
) -> None:
    run_sync(aserve(options, replay=replay, ready=ready))


serve.__doc__ = aserve.__doc__
