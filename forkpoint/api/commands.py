"""The verbs that run a command under forkpoint: record, replay, fork and resume.

Each starts a proxy on a free port, checks what it can check at once (the run exists, the fork
step is in range), starts the command with its clients pointed at the proxy while the run it
continues loads, and closes the run with the command's outcome. `arecord`, `areplay`, `afork`
and `aresume` are the same verbs for asyncio code; the plain forms work anywhere, inside a
running event loop included (a notebook).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

from forkpoint.adapters.workspace import WorkspaceAdapter
from forkpoint.api.env import agent_env
from forkpoint.api.options import Options, engine_config, store_location
from forkpoint.api.results import RunResult
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store
from forkpoint.doors.reach import TOKEN_PREFIX, token_for
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, OnDivergence
from forkpoint.engine.session import Session, check_fork_step
from forkpoint.errors import ConfigError
from forkpoint.models import RunStatus, new_run_id

if TYPE_CHECKING:
    from forkpoint.runtime.proxy import Proxy

__all__ = ["afork", "arecord", "areplay", "aresume", "fork", "record", "replay", "resume"]

Opener = Callable[["Proxy"], Awaitable[Session]]


async def arecord(cmd: Sequence[str], options: Options = Options()) -> RunResult:
    """Run `cmd` with its API traffic recorded as a new run; its state is snapshotted through
    the adapters it registers (and `options.workspace`)."""
    run_id = new_run_id()

    def start(store: Store) -> tuple[EngineConfig, Opener]:
        config = engine_config(options, live=True)
        return config, lambda proxy: proxy.sessions.record(
            run_id=run_id, name=options.name, labels=dict(options.labels)
        )

    return await _run(cmd, options, run_id, start, offline=False)


async def areplay(run: str, cmd: Sequence[str], options: Options = Options()) -> RunResult:
    """Run `cmd` against recorded `run`, offline: every response comes from the cassette.

    With `options.on_divergence` live the replay forks itself at the first request the
    recording lacks and goes on live; otherwise nothing reaches the network.
    """
    run_id = new_run_id()
    live = options.on_divergence is not OnDivergence.FAIL

    def start(store: Store) -> tuple[EngineConfig, Opener]:
        source = store.find_run(run)
        recorded = store.exchanges(source.id, bodies=False) if live else []
        config = engine_config(options, live=live, recorded=recorded)
        return config, lambda proxy: proxy.sessions.replay(
            source.id, run_id=run_id, name=options.name, on_divergence=options.on_divergence
        )

    return await _run(cmd, options, run_id, start, offline=not live)


async def afork(
    run: str,
    cmd: Sequence[str],
    *,
    at: int,
    change: Change = Change(),
    options: Options = Options(),
) -> RunResult:
    """Run `cmd` as a child of `run`: steps < `at` served from the cassette, then live with
    `change` applied, recorded as a new run whose parent is `run`."""
    run_id = new_run_id()

    def start(store: Store) -> tuple[EngineConfig, Opener]:
        parent = store.find_run(run)
        recorded = store.exchanges(parent.id, bodies=False)
        check_fork_step(parent.id, at, len(recorded))
        config = engine_config(options, live=True, recorded=recorded)
        return config, lambda proxy: proxy.sessions.fork(
            parent.id, at=at, change=change, on_divergence=options.on_divergence,
            restore=options.restore, run_id=run_id, name=options.name,
            labels=dict(options.labels) or None,
        )  # fmt: skip

    return await _run(cmd, options, run_id, start, offline=False)


async def aresume(run: str, cmd: Sequence[str], options: Options = Options()) -> RunResult:
    """Restart `cmd` for a crashed or stopped run: its latest snapshot restored, the steps its
    agent had fully received served from the cassette (no upstream call, no token), then live
    in the same run."""
    found: list[str] = []

    def start(store: Store) -> tuple[EngineConfig, Opener]:
        resumed = store.find_run(run)
        if resumed.status is RunStatus.FINISHED:
            raise ConfigError(
                f"run {resumed.id} finished: there is nothing to resume "
                "(fork it to run it again with a change)",
                run_id=resumed.id,
            )
        found.append(resumed.id)
        recorded = store.exchanges(resumed.id, bodies=False)
        config = engine_config(options, live=True, recorded=recorded)
        return config, lambda proxy: proxy.sessions.resume(
            resumed.id, on_divergence=options.on_divergence
        )

    return await _run(cmd, options, lambda: found[0], start, offline=False)


def record(cmd: Sequence[str], options: Options = Options()) -> RunResult:
    return run_sync(arecord(cmd, options))


def replay(run: str, cmd: Sequence[str], options: Options = Options()) -> RunResult:
    return run_sync(areplay(run, cmd, options))


def fork(
    run: str,
    cmd: Sequence[str],
    *,
    at: int,
    change: Change = Change(),
    options: Options = Options(),
) -> RunResult:
    return run_sync(afork(run, cmd, at=at, change=change, options=options))


def resume(run: str, cmd: Sequence[str], options: Options = Options()) -> RunResult:
    return run_sync(aresume(run, cmd, options))


for _sync, _async in ((record, arecord), (replay, areplay), (fork, afork), (resume, aresume)):
    _sync.__doc__ = _async.__doc__


async def _run(
    cmd: Sequence[str],
    options: Options,
    run_id: str | Callable[[], str],
    start: Callable[[Store], tuple[EngineConfig, Opener]],
    *,
    offline: bool,
) -> RunResult:
    """Check and prepare (`start`, on a worker thread), then serve the command's run until
    the command exits.

    The command starts as soon as the checks pass, on a socket already listening, while this
    process imports and starts the proxy and loads the run: an agent's own start (an
    interpreter importing its SDK) takes about as long, so the two overlap. Its first request
    waits in the socket's backlog. With `--intercept` (the command needs the interceptor's
    address and CA) or a workspace to put back first, it starts once the proxy is up.
    """
    if not cmd:
        raise ConfigError(
            "no command to run: put it after --, e.g. forkpoint record -- python agent.py"
        )
    store = open_store(store_location(options.cassette))
    try:
        config, open_session = await asyncio.to_thread(start, store)
        the_run = run_id if isinstance(run_id, str) else run_id()
        # Started before the proxy when nothing it needs comes from the proxy: the
        # interceptor's address and CA, files put back, a token made up for a wider bind.
        token, made = token_for(options.host, options.token)
        early = options.intercept is None and options.workspace is None and not made
        listening = _listen(options.host, options.port)
        process = None
        if early:
            url = _url(listening, token)
            process = await _spawn(cmd, url, the_run, options, offline=offline)
        try:
            from forkpoint.runtime.proxy import Proxy  # aiohttp and the runtime: the slow part

            proxy = Proxy(
                store, config, pace=options.pace, host=options.host, port=options.port,
                read_timeout=options.read_timeout, client_timeout=options.client_timeout,
                max_body=options.max_body,
                snapshot_policy=options.snapshots, intercept=options.intercept,
                adapter_hosts=options.adapter_hosts, token=options.token,
            )  # fmt: skip
            await proxy.start(listening)
        except BaseException:
            if process is not None:
                await _stop(process)
            listening.close()
            raise
        # The run loads while the command starts: its requests wait for it, not the reverse.
        opening = asyncio.ensure_future(open_session(proxy))
        if process is None:
            try:
                if options.workspace is not None:  # the files back before the command reads them
                    await proxy.snapshots.attach(
                        await opening, WorkspaceAdapter(options.workspace), moves_agent=False
                    )
                extra: dict[str, str] = {}
                if proxy.interceptor is not None:
                    extra = proxy.interceptor.env(the_run, options.env or os.environ)
                url = _url(listening, proxy.token)
                process = await _spawn(cmd, url, the_run, options, offline=offline, extra=extra)
            except BaseException as error:  # a refused snapshot, a command that cannot start
                await _abandon(opening)
                await proxy.stop(RunStatus.CRASHED, error=str(error))
                raise
        try:
            session = await opening
        except BaseException:
            await _stop(process)
            await proxy.stop(RunStatus.CRASHED, error="the run could not be loaded")
            raise
        exit_code = await _wait(process)
        status = RunStatus.FINISHED if exit_code == 0 else RunStatus.CRASHED
        failure = None if exit_code == 0 else f"command exited with {exit_code}"
        await proxy.stop(status, error=failure)
        steps = await asyncio.to_thread(store.step_count, the_run)
        return RunResult(the_run, exit_code, session.run.status, steps)
    finally:
        store.close()


def _listen(host: str, port: int) -> socket.socket:
    """The proxy's socket, listening before the proxy serves: a client that connects sooner
    waits in the backlog."""
    try:
        return socket.create_server((host, port), reuse_port=False, backlog=128)
    except OSError as error:
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}") from error


def _url(listening: socket.socket, token: str | None) -> str:
    """The proxy's base URL for the command's clients, with the token they must carry."""
    host, port = listening.getsockname()[:2]
    url = f"http://{host}:{port}"
    return url if token is None else f"{url}{TOKEN_PREFIX}{quote(token, safe='')}"


async def _spawn(
    cmd: Sequence[str],
    url: str,
    run_id: str,
    options: Options,
    *,
    offline: bool,
    extra: Mapping[str, str] | None = None,
) -> asyncio.subprocess.Process:
    env = agent_env(url, run_id, offline=offline, base=options.env or os.environ)
    env.update(extra or {})
    try:
        return await asyncio.create_subprocess_exec(*cmd, env=env)
    except OSError as error:
        raise ConfigError(f"cannot start {cmd[0]!r}: {error}") from error


async def _stop(process: asyncio.subprocess.Process) -> None:
    """The command started but its run will not be served: end it."""
    if process.returncode is None:
        process.terminate()
    await process.wait()


async def _wait(process: asyncio.subprocess.Process) -> int:
    """The command's exit code; cancelled (Ctrl-C), it is asked to stop first."""
    try:
        return await process.wait()
    except asyncio.CancelledError:
        process.send_signal(signal.SIGTERM)
        return await process.wait()


async def _abandon(opening: asyncio.Future[Session]) -> None:
    """The run is not going to be served: stop waiting for it, whatever it was to give."""
    opening.cancel()
    await asyncio.gather(opening, return_exceptions=True)
