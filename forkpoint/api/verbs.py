"""The Python API: what the CLI calls, usable from scripts and notebooks.

`record` and `replay` start a proxy on a free port, run a command with its environment pointed
at it, and close the run with the command's outcome.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.protocol import State
from forkpoint.adapters.workspace import WorkspaceAdapter
from forkpoint.cassettes.sqlite.store import DEFAULT_PATH, SqliteStore
from forkpoint.engine.changes import Change, load_patch
from forkpoint.engine.decide import DEFAULT_MAX_BODY, EngineConfig, OnDivergence, Routes, Session
from forkpoint.engine.matching import DEFAULT_VOLATILE, MatchConfig
from forkpoint.engine.mocks import parse_mock
from forkpoint.engine.pace import Pace
from forkpoint.errors import ConfigError
from forkpoint.models import Exchange, Mode, Run, RunStatus, Snapshot
from forkpoint.runtime.intercept import InterceptOptions
from forkpoint.runtime.loop_thread import until_stopped
from forkpoint.runtime.snapshots import SnapshotPolicy

if TYPE_CHECKING:  # the proxy pulls in aiohttp: commands that only read a cassette skip it
    from forkpoint.runtime.proxy import Proxy

DEFAULT_UPSTREAM = "https://api.openai.com"
DEFAULT_ROUTES = {"anthropic": "https://api.anthropic.com"}
# Placeholders so SDKs that insist on a key start up under replay, which needs none.
REPLAY_KEYS = {"OPENAI_API_KEY": "forkpoint-replay", "ANTHROPIC_API_KEY": "forkpoint-replay"}


@dataclass(frozen=True, slots=True)
class Result:
    run_id: str
    exit_code: int
    status: RunStatus
    steps: int


def cassette_path(path: str | os.PathLike[str] | None = None) -> Path:
    return Path(path or os.environ.get("FORKPOINT_CASSETTE") or DEFAULT_PATH)


def engine_config(
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    *,
    volatile_fields: Sequence[str] = (),
) -> EngineConfig:
    return EngineConfig(
        routes=Routes(default=upstream, prefixes={**DEFAULT_ROUTES, **(routes or {})}),
        match=MatchConfig(volatile_fields=(*DEFAULT_VOLATILE, *volatile_fields)),
    )


def agent_env(url: str, run_id: str, *, mode: Mode, base: Mapping[str, str] = os.environ) -> dict:
    """The environment that points a command's clients at the proxy, for one run."""
    env = dict(base)
    if mode is Mode.REPLAY:
        for key, value in REPLAY_KEYS.items():
            if not env.get(key):
                env[key] = value
    env.update(
        OPENAI_BASE_URL=f"{url}/v1",
        OPENAI_API_BASE=f"{url}/v1",  # LangChain reads this one before OPENAI_BASE_URL
        ANTHROPIC_BASE_URL=f"{url}/anthropic",
        FORKPOINT_URL=url,
        FORKPOINT_RUN=run_id,
    )
    return env


def record(
    cmd: Sequence[str],
    *,
    cassette: str | os.PathLike[str] | None = None,
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    port: int = 0,
    read_timeout: float = 600.0,
    max_body: int = DEFAULT_MAX_BODY,
    workspace: str | os.PathLike[str] | None = None,
    snapshot_policy: SnapshotPolicy = SnapshotPolicy(),
    intercept: InterceptOptions | None = None,
) -> Result:
    """Run `cmd` with its API traffic recorded as a new run; its state is snapshotted through
    the adapters it registers (and `workspace`, a directory), per `snapshot_policy`. With
    `intercept`, its HTTP(S) calls to any host are recorded too (through HTTPS_PROXY)."""
    config = engine_config(upstream, routes)
    return asyncio.run(
        _run_command(
            cmd,
            cassette,
            config,
            port=port,
            read_timeout=read_timeout,
            max_body=max_body,
            workspace=workspace,
            snapshot_policy=snapshot_policy,
            intercept=intercept,
            start=lambda proxy: proxy.sessions.start_record(name=name, labels=dict(labels or {})),
        )
    )


def resume(
    run: str,
    cmd: Sequence[str],
    *,
    cassette: str | os.PathLike[str] | None = None,
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    port: int = 0,
    workspace: str | os.PathLike[str] | None = None,
    snapshot_policy: SnapshotPolicy = SnapshotPolicy(),
    intercept: InterceptOptions | None = None,
) -> Result:
    """Restart `cmd` for a crashed or stopped run: its latest snapshot restored, its recorded
    steps served from the cassette (no upstream call, no token), then live in the same run."""
    config = engine_config(upstream, routes)
    return asyncio.run(
        _run_command(
            cmd,
            cassette,
            config,
            port=port,
            workspace=workspace,
            snapshot_policy=snapshot_policy,
            intercept=intercept,
            start=lambda proxy: proxy.sessions.start_resume(run),
        )
    )


def replay(
    run: str,
    cmd: Sequence[str],
    *,
    cassette: str | os.PathLike[str] | None = None,
    pace: Pace = Pace(),
    name: str | None = None,
    port: int = 0,
    on_divergence: OnDivergence = OnDivergence.FAIL,
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    intercept: InterceptOptions | None = None,
) -> Result:
    """Run `cmd` against a recorded run, offline: every response comes from the cassette.

    With `on_divergence=live` the replay forks itself at the first request the recording
    lacks and goes on live (to `upstream` and `routes`); otherwise nothing reaches the network.
    """
    live = on_divergence is OnDivergence.LIVE
    config = engine_config(upstream if live else None, routes if live else None)
    return asyncio.run(
        _run_command(
            cmd,
            cassette,
            config,
            port=port,
            pace=pace,
            intercept=intercept,
            start=lambda proxy: proxy.sessions.start_replay(
                run, name=name, on_divergence=on_divergence
            ),
        )
    )


def fork(
    run: str,
    cmd: Sequence[str],
    *,
    at: int,
    change: Change = Change(),
    cassette: str | os.PathLike[str] | None = None,
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    on_divergence: OnDivergence = OnDivergence.FAIL,
    restore: bool = True,
    pace: Pace = Pace(),
    port: int = 0,
    workspace: str | os.PathLike[str] | None = None,
    snapshot_policy: SnapshotPolicy = SnapshotPolicy(),
    intercept: InterceptOptions | None = None,
) -> Result:
    """Run `cmd` as a child of `run`: steps < `at` served from the cassette, then live with
    `change` applied, recorded as a new run whose parent is `run`."""
    config = engine_config(upstream, routes)
    return asyncio.run(
        _run_command(
            cmd,
            cassette,
            config,
            port=port,
            pace=pace,
            workspace=workspace,
            snapshot_policy=snapshot_policy,
            intercept=intercept,
            start=lambda proxy: proxy.sessions.start_fork(
                run,
                at=at,
                change=change,
                on_divergence=on_divergence,
                restore=restore,
                name=name,
                labels=dict(labels) if labels else None,
            ),
        )
    )


def make_change(
    *,
    model: str | None = None,
    upstream: str | None = None,
    system_prompt: str | None = None,
    patch: str | None = None,
    mocks: Sequence[str] = (),
    base_dir: Path = Path(),
) -> Change:
    """A Change from the CLI's text options; `@FILE` reads a prompt or patch from a file."""
    return Change(
        model=model,
        upstream=upstream,
        system_prompt=None if system_prompt is None else _text_or_file(system_prompt, base_dir),
        patch=() if patch is None else load_patch(_text_or_file(patch, base_dir)),
        mocks=tuple(parse_mock(text, base_dir=base_dir) for text in mocks),
    )


def _text_or_file(value: str, base_dir: Path) -> str:
    if not value.startswith("@"):
        return value
    path = base_dir / value[1:]
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from error


async def _run_command(  # type: ignore[no-untyped-def]
    cmd, cassette, config, *, start, workspace: str | os.PathLike[str] | None = None, **options
) -> Result:
    if not cmd:
        raise ConfigError(
            "no command to run: put it after --, e.g. forkpoint record -- python agent.py"
        )
    store = SqliteStore(cassette_path(cassette))
    from forkpoint.runtime.proxy import Proxy

    proxy = Proxy(store, config, **options)
    try:
        session = start(proxy)
        if workspace is not None:
            _attach_workspace(proxy, session, WorkspaceAdapter(workspace))
        url = await proxy.start()
        env = agent_env(url, session.run.id, mode=session.run.mode)
        if proxy.interceptor is not None:
            env.update(proxy.interceptor.env(session.run.id, env))
        try:
            process = await asyncio.create_subprocess_exec(*cmd, env=env)
        except OSError as error:
            await proxy.stop(RunStatus.CRASHED, error=f"cannot start {cmd[0]}: {error}")
            raise ConfigError(f"cannot start {cmd[0]!r}: {error}") from error
        try:
            exit_code = await process.wait()
        except asyncio.CancelledError:
            process.send_signal(signal.SIGTERM)
            exit_code = await process.wait()
        status = RunStatus.FINISHED if exit_code == 0 else RunStatus.CRASHED
        failure = None if exit_code == 0 else f"command exited with {exit_code}"
        await proxy.stop(status, error=failure)
        return Result(
            session.run.id, exit_code, session.run.status, store.step_count(session.run.id)
        )
    finally:
        store.close()


def _attach_workspace(proxy: Proxy, session: Session, adapter: WorkspaceAdapter) -> None:
    """Put the workspace back as the snapshot left it (fork, resume), then snapshot it too."""
    snapshot = session.restore_points.get(adapter.name)
    if snapshot is not None:
        adapter.restore_now(State(snapshot.content_type, snapshot.data))
    proxy.snapshotter.register(session.run.id, adapter)


def serve(
    *,
    cassette: str | os.PathLike[str] | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    upstream: str | None = DEFAULT_UPSTREAM,
    routes: Mapping[str, str] | None = None,
    replay_run: str | None = None,
    pace: Pace = Pace(),
    intercept: InterceptOptions | None = None,
) -> None:
    """Serve until interrupted: record every run that comes through, or replay one; with
    `intercept`, as an HTTPS proxy too."""
    config = engine_config(upstream, routes)
    asyncio.run(_serve(cassette, host, port, config, replay_run, pace, intercept))


async def _serve(cassette, host, port, config, replay_run, pace, intercept) -> None:  # type: ignore[no-untyped-def]
    store = SqliteStore(cassette_path(cassette))
    from forkpoint.runtime.proxy import Proxy

    proxy = Proxy(store, config, host=host, port=port, pace=pace, intercept=intercept)
    try:
        if replay_run:
            proxy.sessions.start_replay(replay_run)
        url = await proxy.start()
        print(f"forkpoint serving on {url}  (OPENAI_BASE_URL={url}/v1)", flush=True)
        if proxy.interceptor is not None:
            env = proxy.interceptor.env("RUN")
            print(
                f"forkpoint intercepting on {proxy.interceptor.url}  (HTTPS_PROXY="
                f"{env['HTTPS_PROXY']}, SSL_CERT_FILE={env['SSL_CERT_FILE']})",
                flush=True,
            )
        await until_stopped()
        await proxy.stop(RunStatus.FINISHED)
    finally:
        store.close()


def runs(*, cassette: str | os.PathLike[str] | None = None) -> list[tuple[Run, list[Exchange]]]:
    """Every run with its exchanges (without bodies), oldest first."""
    store = SqliteStore(cassette_path(cassette), create=False)
    try:
        return [(run, store.exchanges(run.id, bodies=False)) for run in store.list_runs()]
    finally:
        store.close()


def show(run: str, *, cassette: str | os.PathLike[str] | None = None) -> tuple[Run, list[Exchange]]:
    store = SqliteStore(cassette_path(cassette), create=False)
    try:
        found = store.find_run(run)
        return found, store.exchanges(found.id, bodies=False)
    finally:
        store.close()


def snapshots(
    run: str, *, cassette: str | os.PathLike[str] | None = None
) -> tuple[Run, list[Snapshot]]:
    """A run's snapshots (without their state), failed pulls included."""
    store = SqliteStore(cassette_path(cassette), create=False)
    try:
        found = store.find_run(run)
        return found, store.snapshots(found.id)
    finally:
        store.close()
