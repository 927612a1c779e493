"""The verbs that run a command under forkpoint: record, replay, fork and resume.

Each starts a proxy on a free port, checks what it can check at once (the run exists, the fork
step is in range), starts the command with its clients pointed at the proxy while the run it
continues loads, and closes the run with the command's outcome. `arecord`, `areplay`, `afork`
and `aresume` are the same verbs for asyncio code; the plain forms work anywhere, inside a
running event loop included (a notebook).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from forkpoint.adapters.workspace import WorkspaceAdapter
from forkpoint.api.env import agent_env
from forkpoint.api.options import Options, engine_config, store_location
from forkpoint.api.parking import launch_of
from forkpoint.api.results import RunResult, unserved_error
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store
from forkpoint.doors.reach import TOKEN_PREFIX, token_for
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, OnDivergence
from forkpoint.engine.session import Replayed, Session, check_fork_step
from forkpoint.errors import ConfigError
from forkpoint.models import Launch, RunStatus, new_run_id
from forkpoint.runtime import terminal

if TYPE_CHECKING:
    from forkpoint.runtime.proxy import Proxy

__all__ = ["afork", "arecord", "areplay", "aresume", "fork", "record", "replay", "resume"]

Opener = Callable[["Proxy"], Coroutine[Any, Any, Session]]


async def arecord(cmd: Sequence[str], options: Options = Options()) -> RunResult:
    """Run `cmd` with its API traffic recorded as a new run; its state is snapshotted through
    the adapters it registers (and `options.workspace`)."""
    run_id = new_run_id()

    def start(store: Store) -> tuple[EngineConfig, Opener]:
        config = engine_config(options, live=True, env=_env(options))
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
        config = engine_config(options, live=live, recorded=recorded, env=_env(options))
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
        config = engine_config(options, live=True, recorded=recorded, env=_env(options))
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
        config = engine_config(options, live=True, recorded=recorded, env=_env(options))
        return config, lambda proxy: open_resume(proxy, resumed.id, options)

    return await _run(cmd, options, lambda: found[0], start, offline=False)


def open_resume(
    proxy: Proxy, run_id: str, options: Options, *, default: bool = True
) -> Coroutine[Any, Any, Session]:
    """What a resume is, in whichever proxy serves it (its own, or `serve`'s for a wake):
    run `run_id`'s session opened, known by its id while it loads (its latest snapshots to
    restore, every answer it holds served from the store, then live in the same run; a
    finished run is refused). `default`: requests naming no run get it."""
    return proxy.sessions.resume(
        run_id, on_divergence=options.on_divergence, run_id=run_id, default=default
    )


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
        # Read before the command starts: once the proxy listens, nothing may be awaited
        # before its session opens, or an early request would open a run of its own.
        launch = await _launch(store, the_run, cmd, options) if config.parking.on else None
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
        if launch is not None:  # kept with the run when it parks, so a wake can start it again
            proxy.parking.launches[the_run] = launch
        if process is not None:
            proxy.parking.agent(the_run, process.pid)
        # The run loads while the command starts: its requests wait for it, not the reverse.
        # Started eagerly: the session is known by its run id before any request is read.
        opening = asyncio.Task(
            open_session(proxy), loop=asyncio.get_running_loop(), eager_start=True
        )
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
                proxy.parking.agent(the_run, process.pid)
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
        ended = outcome(session, exit_code, allow_unserved=options.allow_unserved)
        if ended.status is RunStatus.PARKED:  # its agent was ended by parking, not crashed
            await proxy.stop(RunStatus.PARKED)  # a --park-after upstream's answer read first
            parked = await asyncio.to_thread(store.parked, the_run)
            steps = await asyncio.to_thread(store.step_count, the_run)
            return RunResult(the_run, exit_code, RunStatus.PARKED, steps, parked=parked)
        await proxy.stop(ended.status, error=ended.error)
        steps = await asyncio.to_thread(store.step_count, the_run)
        return RunResult(
            the_run, exit_code, session.run.status, steps, recorded=ended.replayed.owed,
            unserved=ended.replayed.unserved, unapplied=ended.unapplied,
        )  # fmt: skip
    finally:
        store.close()


class Outcome(NamedTuple):
    """How a run ends with its command: `parked` (its agent ended by parking), `finished` or
    `crashed` by the exit code, with why; what of its recording it was served."""

    status: RunStatus
    error: str | None
    replayed: Replayed
    unapplied: tuple[str, ...]


def outcome(session: Session, exit_code: int, *, allow_unserved: bool) -> Outcome:
    """How the session's run ends now that its command exited with `exit_code`: every verb's
    rule, and a wake's in `serve`. A replay that left recorded exchanges unserved fails."""
    replayed = session.replayed()
    if session.run.status is RunStatus.PARKED:
        return Outcome(RunStatus.PARKED, None, replayed, ())
    status = RunStatus.FINISHED if exit_code == 0 else RunStatus.CRASHED
    failure = None if exit_code == 0 else f"command exited with {exit_code}"
    unapplied = _unapplied(session)
    if failure is None and replayed.unserved and not allow_unserved:
        failure = unserved_error(replayed.owed, replayed.unserved)
    return Outcome(status, failure, replayed, unapplied)


def _unapplied(session: Session) -> tuple[str, ...]:
    """What of a fork's change touched no request; the run's change says so too."""
    unapplied = tuple(sorted(session.change.rewritten() - session.applied))
    if unapplied and session.run.change is not None:
        session.run.change["unapplied"] = list(unapplied)
    return unapplied


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
    """Start the command in a process group of its own (parking ends the whole group, never
    forkpoint), given the terminal's foreground when forkpoint has it, so Ctrl-C reaches it."""
    env = agent_env(url, run_id, offline=offline, base=_env(options))
    env.update(extra or {})
    cwd = None if options.cwd is None else os.fspath(options.cwd)
    return await start_agent(cmd, env, cwd=cwd)


async def start_agent(
    cmd: Sequence[str], env: Mapping[str, str], *, cwd: str | None, foreground: bool = True
) -> asyncio.subprocess.Process:
    """Start an agent in a process group of its own (parking ends the whole group, never
    forkpoint), ended when forkpoint dies. `foreground`: given the terminal's foreground when
    forkpoint has it, so Ctrl-C reaches it; else in a session of its own, as `serve` starts a
    woken agent (serve keeps its terminal)."""
    # preexec_fn, not process_group=0: uvloop takes only the former
    own = terminal.own_group if foreground else terminal.own_session
    try:
        process = await asyncio.create_subprocess_exec(
            *cmd, env=dict(env), cwd=cwd, preexec_fn=own
        )
    except OSError as error:
        raise ConfigError(f"cannot start {cmd[0]!r}: {error}") from error
    if foreground:
        terminal.hand(process.pid)
    return process


async def _launch(store: Store, run_id: str, cmd: Sequence[str], options: Options) -> Launch:
    """How the command started, for the run to keep; a woken run keeps the waker it had."""
    before = await asyncio.to_thread(store.launch, run_id)
    waker = None if before is None or options.on_wake else before.waker
    if before is not None and not options.on_wake and before.on_wake:
        options = dataclasses.replace(options, on_wake=before.on_wake)
    return launch_of(run_id, cmd, options, env=_env(options), waker=waker)


def _env(options: Options) -> Mapping[str, str]:
    """The command's environment, as the user gave it: its clients' variables name upstreams."""
    return options.env or os.environ


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
    finally:
        terminal.take_back()


async def _abandon(opening: asyncio.Future[Session]) -> None:
    """The run is not going to be served: stop waiting for it, whatever it was to give."""
    opening.cancel()
    await asyncio.gather(opening, return_exceptions=True)
