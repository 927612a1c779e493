"""`serve`: a long-lived proxy that records every run that comes through (or replays one).

Requests pick their run with a `/r/RUN/` path prefix or the `X-Forkpoint-Run` header; through
the interceptor, with proxy credentials (`HTTPS_PROXY=http://RUN:@host:port`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from forkpoint.api.options import Options, engine_config, match_config, store_location
from forkpoint.api.parking import default_waker, launch_of, local_program
from forkpoint.api.sync import run_sync
from forkpoint.api.waking import WakeHere
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store
from forkpoint.doors.ports import Pages
from forkpoint.engine.config import OnDivergence
from forkpoint.models import RunStatus, Waker
from forkpoint.runtime.answer_pages import AnswerPages, Launched
from forkpoint.runtime.loop_thread import until_stopped
from forkpoint.runtime.proxy import Proxy
from forkpoint.runtime.recording.journaled import merge_orphans
from forkpoint.runtime.wake_loop import Hook, LocalProcess, WakeLoop, WakeTarget

__all__ = ["Serving", "aserve", "serve"]

RUNS_PATH = "/_forkpoint/runs"  # POST RUNS_PATH/RUN/answer, RUNS_PATH/RUN/launch


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
    pages: Mapping[str, Pages] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (or until `stop` is set): record every run, or replay run
    `replay`; `ready` is told where, once listening. `pages` are served beside the proxy,
    each under its path (the web view, `/_forkpoint/ui`)."""
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
        for path, served in (pages or {}).items():
            proxy.gateway.mount(path, served)
        if replay is not None:  # a replaying proxy serves that replay alone, whatever is named
            session = await proxy.sessions.replay(replay, on_divergence=options.on_divergence)
            proxy.sessions.serve_only(session, replay, *filter(None, [session.run.parent_id]))
        parks = replay is None and (options.park or options.park_after or options.on_wake)
        waking = _waking(store, options, proxy) if parks else None
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
        stopping = stop or asyncio.Event()
        wakes = asyncio.create_task(waking.run(stopping)) if waking is not None else None
        try:
            await (stop.wait() if stop is not None else until_stopped())
        finally:
            stopping.set()
            if waking is not None and wakes is not None:
                await wakes
                await waking.close()
        await proxy.stop(RunStatus.FINISHED)
    finally:
        store.close()


def _waking(store: Store, options: Options, proxy: Proxy) -> WakeLoop:
    """Park and wake on `serve`: the answer and launch endpoints (`/_forkpoint/runs/…`) and
    the loop that wakes answered runs (a local process, or `--on-wake`'s hook)."""
    location = store_location(options.cassette)
    waker = default_waker(options, Waker.LOCAL)
    match = match_config(options)

    def launched(run_id: str, given: Launched) -> None:
        here = dataclasses.replace(options, cwd=given.cwd)
        proxy.parking.launches[run_id] = launch_of(
            run_id, given.command, here, env=given.env, waker=waker, drop_clients=True
        )
        if given.pid is not None:
            proxy.parking.agent(run_id, given.pid)

    # serve's own launches wake in serve (`WakeHere`); another serve's, in a resume of their own
    here = WakeHere(proxy, options, otherwise=LocalProcess(local_program()))
    targets: dict[Waker, WakeTarget] = {Waker.LOCAL: here, Waker.HOOK: Hook(tuple(options.on_wake))}
    if options.wake_agent:  # a wake job for the workers, claimed by the one that takes it
        from forkpoint.jobs.wakes import QueuedWake

        targets[Waker.WORKERS] = QueuedWake(location)
    loop = WakeLoop(store, location=location, targets=targets, match=match,
                    lease=options.wake_lease)  # fmt: skip
    pages = AnswerPages(store, match=match, max_body=options.max_body, on_launch=launched,
                        on_answer=loop.soon, on_answering=loop.expect)  # fmt: skip
    proxy.gateway.mount(RUNS_PATH, pages)
    return loop


def serve(
    options: Options = Options(port=8765),
    *,
    replay: str | None = None,
    ready: Callable[[Serving], None] | None = None,
    pages: Mapping[str, Pages] | None = None,
) -> None:
    run_sync(aserve(options, replay=replay, ready=ready, pages=pages))


serve.__doc__ = aserve.__doc__
