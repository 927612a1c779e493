"""Park and wake in the API: what a run keeps of how its agent started (`Launch`), answering a
parked run (`answer`), and waking it (`wake`): a resume of the run, started from its launch.

A launch never holds a secret: the agent's environment is kept without the variables whose
name says credential (`engine.secret_names`) or whose value looks like one (`engine.shapes`),
and without forkpoint's own; `needs` names the secret ones, which a wake takes from the
environment of whoever wakes it (a missing one is a clear error before anything starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence

from forkpoint.api.env import CLIENTS
from forkpoint.api.options import Options, match_config, store_location
from forkpoint.api.results import RunResult
from forkpoint.api.sync import run_sync
from forkpoint.cassettes.open import open_store
from forkpoint.engine.launches import kept_env, wake_env
from forkpoint.errors import ConfigError, NotParked
from forkpoint.models import Headers, Launch, Park, ParkState, Waker
from forkpoint.runtime.answers import deliver
from forkpoint.runtime.wake_loop import Hook

__all__ = ["aanswer", "answer", "awake", "launch_of", "wake"]

# The exit code of a command whose run parked (EX_TEMPFAIL: try again later, once answered).
EXIT_PARKED = 75


def launch_options(options: Options) -> dict[str, object]:
    """The options a wake resumes with: where requests go, how they park and match."""
    return {
        "upstream": options.upstream,
        "routes": dict(options.routes),
        "park": list(options.park),
        "park_after": options.park_after,
        "park_timeout": options.park_timeout,
        "redact": list(options.redact),
        "ignore": list(options.ignore),
        "optional": list(options.optional),
        "normalize": [n for n in options.normalize if isinstance(n, str)],
        "agent": options.wake_agent,  # Waker.WORKERS: the agent a worker wakes it with
    }


def launch_of(
    run_id: str, command: Sequence[str], options: Options, *, env: Mapping[str, str],
    waker: Waker | None = None, drop_clients: bool = False,
) -> Launch:  # fmt: skip
    """How `command` started for run `run_id`, as the run keeps it (no secret);
    `drop_clients`: its clients' base-URL variables point at a proxy (`serve`)."""
    clients = [name for client in CLIENTS for name in client.variables] if drop_clients else []
    kept, needs = kept_env(env, drop_clients=clients)
    on_wake = tuple(options.on_wake)
    return Launch(
        run_id=run_id,
        command=tuple(command),
        cwd=os.fspath(options.cwd or os.getcwd()),
        env=kept,
        needs=needs,
        options=launch_options(options),
        waker=waker or default_waker(options, Waker.FOREGROUND),
        on_wake=on_wake,
    )


def default_waker(options: Options, otherwise: Waker) -> Waker:
    """Who wakes a run these options park: a worker (`wake_agent`), a hook, else `otherwise`."""
    if options.wake_agent:
        return Waker.WORKERS
    return Waker.HOOK if options.on_wake else otherwise


def resume_options(launch: Launch, *, cassette: str, env: Mapping[str, str]) -> Options:
    """The Options of `forkpoint resume` for a wake (as `resume_flags` says on a command line)."""
    options = launch.options

    def listed(key: str) -> tuple[str, ...]:
        value = options.get(key)
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    routes = options.get("routes")
    after, timeout = options.get("park_after"), options.get("park_timeout")
    return Options(
        cassette=cassette,
        upstream=str(options["upstream"]) if options.get("upstream") else None,
        routes={str(k): str(v) for k, v in routes.items()} if isinstance(routes, dict) else {},
        park=listed("park"), redact=listed("redact"), ignore=listed("ignore"),
        optional=listed("optional"), normalize=listed("normalize"),
        park_after=after if isinstance(after, str | int | float) else None,
        park_timeout=timeout if isinstance(timeout, str | int | float) else None,
        on_wake=launch.on_wake, env=env, cwd=launch.cwd,
        wake_agent=str(options["agent"]) if options.get("agent") else None,
    )  # fmt: skip


async def aanswer(
    run: str, body: bytes | str = b"", *, status: int | str = 200,
    headers: Mapping[str, str] | Headers = (), by: str | None = None,
    options: Options = Options(),
) -> Park:  # fmt: skip
    """Answer parked run `run`: `body` (with `status` and `headers`) becomes its pending
    step's exchange, exactly once. Returns the park, answered; a wake starts the agent."""
    data = body.encode() if isinstance(body, str) else body
    pairs = tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers)
    store = open_store(store_location(options.cassette), create=False)
    try:
        return await asyncio.to_thread(
            deliver, store, run, data, status=status, headers=pairs, by=by or _who(),
            match=match_config(options), max_body=options.max_body,
        )  # fmt: skip
    finally:
        store.close()


def answer(
    run: str, body: bytes | str = b"", *, status: int | str = 200,
    headers: Mapping[str, str] | Headers = (), by: str | None = None,
    options: Options = Options(),
) -> Park:  # fmt: skip
    return run_sync(aanswer(run, body, status=status, headers=headers, by=by, options=options))


answer.__doc__ = aanswer.__doc__


async def awake(
    run: str, *, options: Options = Options(), environ: Mapping[str, str] | None = None,
    by: str | None = None,
) -> RunResult:  # fmt: skip
    """Wake answered run `run` here, in the foreground: claim its wake (exactly one waker
    wins), then resume it from its launch (its directory, its environment with the secrets it
    needs taken from `environ`, its latest snapshot, every recorded step served from the
    cassette), live from its answered step on."""
    from forkpoint.api.commands import aresume

    location = store_location(options.cassette)
    store = open_store(location)
    try:
        found = store.find_run(run)
        park, launch = store.parked(found.id), store.launch(found.id)
        if park is None or park.state is ParkState.PARKED:
            waiting = "waits on its answer" if park else f"is {found.status}"
            raise NotParked(f"run {found.id} {waiting}: there is nothing to wake", run_id=found.id)
        if launch is None:
            raise ConfigError(
                f"run {found.id} keeps no launch: resume it by hand "
                f"(forkpoint resume {found.id} -- CMD)", run_id=found.id,
            )  # fmt: skip
        env = wake_env(launch, os.environ if environ is None else environ)
        if not store.claim_wake(found.id, park.step, by=by or _who()):
            raise NotParked(
                f"run {found.id} is being woken already (by another waker)", run_id=found.id
            )
        store.woke(found.id, park.step)
    finally:
        store.close()
    resumed = resume_options(launch, cassette=location, env=env)
    resumed = dataclasses.replace(resumed, port=options.port, host=options.host)
    return await aresume(found.id, launch.command, resumed)


def wake(
    run: str, *, options: Options = Options(), environ: Mapping[str, str] | None = None,
    by: str | None = None,
) -> RunResult:  # fmt: skip
    return run_sync(awake(run, options=options, environ=environ, by=by))


wake.__doc__ = awake.__doc__


def check_wake(
    run: str, *, options: Options = Options(), environ: Mapping[str, str] | None = None
) -> None:
    """Before answering a run that wakes in the foreground: a ConfigError naming the secrets
    its wake needs that this environment lacks, so nothing is answered that cannot wake."""
    store = open_store(store_location(options.cassette), create=False)
    try:
        launch = store.launch(store.find_run(run).id)
    finally:
        store.close()
    if launch is not None and launch.waker in (Waker.FOREGROUND, Waker.HOOK):
        wake_env(launch, os.environ if environ is None else environ)


def awake_here(run: str, *, options: Options = Options()) -> RunResult | Waker | None:
    """`forkpoint answer`'s wake, for a run parked under `record -- CMD`: woken here in the
    foreground, or handed to its `--on-wake` hook (Waker.HOOK); None for a run `serve`
    wakes (or one that keeps no launch)."""
    location = store_location(options.cassette)
    store = open_store(location, create=False)
    try:
        found = store.find_run(run)
        launch, park = store.launch(found.id), store.parked(found.id)
        if launch is not None and launch.waker is Waker.HOOK and park is not None:
            env = wake_env(launch, os.environ, store=location)
            if not store.claim_wake(found.id, park.step, by=_who()):
                return None
            run_sync(Hook().start(launch, {**os.environ, **env}))
            store.woke(found.id, park.step)
            return Waker.HOOK
    finally:
        store.close()
    if launch is not None and launch.waker is Waker.WORKERS and park is not None:
        from forkpoint.jobs.wakes import enqueue_wake  # the workers extra

        enqueue_wake(location, launch)
        return Waker.WORKERS
    if launch is None or launch.waker is not Waker.FOREGROUND:
        return None
    return wake(run, options=options)


def local_program() -> list[str]:
    """How this machine runs forkpoint: this interpreter, so a wake runs the same code."""
    return [sys.executable, "-m", "forkpoint"]


def shown(line: Sequence[str]) -> str:
    return shlex.join(line)


def _who() -> str:
    """Who answers, for people (`runs --status parked`, a refused second answer)."""
    user = os.environ.get("USER") or os.environ.get("USERNAME") or "someone"
    with contextlib.suppress(OSError):
        return f"cli {user}@{os.uname().nodename}"
    return f"cli {user}"


def _now() -> float:
    return time.time()
