"""Serve's wakes, in serve: a woken run is resumed in serve's own proxy and only its agent is
started, pointed at serve.

A wake was `forkpoint resume RUN … -- COMMAND` in a process of its own: a Python start, the
imports, the store opened, the run loaded and a proxy started, all before the agent, which
cost a wake more than half a second beyond the agent's own start. Here the run's session is
opened in serve's proxy by the same code `resume` opens it with (`commands.open_resume`: its
latest snapshots to restore, every answer it holds served from the store, then live in the same
run), the agent is started as `resume` starts one (`commands.start_agent`), from the run's
launch (its command, directory and environment, secrets from serve's), in a session of its own
with serve's output, and its run ends by its exit code as a resume's does (`commands.outcome`).

A launch made under options other than this serve's (another serve, other upstreams or rules)
wakes as before, in a `forkpoint resume` of its own with the launch's options (`otherwise`).
A woken agent is served by this serve and does not outlive it: stopping serve ends it (its run
`crashed`, resumable), and so does serve's death (the parent-death signal, `terminal.own_session`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from urllib.parse import quote

from forkpoint.api.commands import open_resume, outcome, start_agent
from forkpoint.api.env import agent_env
from forkpoint.api.options import Options
from forkpoint.api.parking import launch_options
from forkpoint.doors.parking import GRACE
from forkpoint.doors.reach import TOKEN_PREFIX
from forkpoint.doors.targets import RUN_PREFIX
from forkpoint.engine.session import Session
from forkpoint.errors import ForkpointError
from forkpoint.models import Launch, RunStatus
from forkpoint.runtime.proxy import Proxy
from forkpoint.runtime.wake_loop import WakeTarget

__all__ = ["WakeHere"]

log = logging.getLogger(__name__)

# Addresses a server binds to that a client cannot connect to as such: it connects to loopback.
_ANY = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}


class WakeHere:
    """The wake target of `serve`'s own launches (`Waker.LOCAL`): the run resumed in serve's
    proxy, its agent alone started."""

    def __init__(self, proxy: Proxy, options: Options, *, otherwise: WakeTarget):
        self.proxy = proxy
        self.options = options
        self.otherwise = otherwise
        self._own = launch_options(options)
        self._agents: dict[str, asyncio.subprocess.Process] = {}
        self._reaping: set[asyncio.Task[None]] = set()

    def here(self, launch: Launch) -> bool:
        """Whether this serve resumes `launch`'s run as its launch says: its options are
        this serve's (a launch it or a twin made)."""
        return launch.options == self._own

    async def start(self, launch: Launch, env: Mapping[str, str]) -> None:
        if not self.here(launch):
            return await self.otherwise.start(launch, env)
        run_id = launch.run_id
        # Known by its run id at once (an eager start runs to the load's first await): the
        # agent's first request waits for the session, never opens a run of its own.
        opening = asyncio.Task(
            open_resume(self.proxy, run_id, self.options, default=False),
            loop=asyncio.get_running_loop(), eager_start=True,
        )  # fmt: skip
        url = _reachable(self.proxy)
        woken = agent_env(f"{url}{RUN_PREFIX}{run_id}", run_id, offline=False,
                          base=env)  # fmt: skip
        woken["FORKPOINT_URL"] = url  # where its adapters register, for run FORKPOINT_RUN
        try:
            process = await start_agent(launch.command, woken, cwd=launch.cwd, foreground=False)
        except BaseException as error:
            await self._abandon(opening, str(error))
            raise
        self._agents[run_id] = process
        self.proxy.parking.agent(run_id, process.pid)
        task = asyncio.create_task(self._reap(run_id, process, opening))
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)

    async def _reap(
        self, run_id: str, process: asyncio.subprocess.Process, opening: asyncio.Task[Session]
    ) -> None:
        """Once the agent exits, its run ends by its exit code, as a resume's does (parked
        again: its park is its state), and nothing of it is held here."""
        try:
            session = await opening
        except ForkpointError as error:  # not resumable after all (ended meanwhile, store away)
            log.warning("forkpoint: run %s could not be woken: %s", run_id, error)
            _signal(process, signal.SIGTERM)
            await process.wait()
            self._agents.pop(run_id, None)
            self.proxy.parking.release(run_id)
            return
        code = await process.wait()
        self._agents.pop(run_id, None)
        ended = outcome(session, code, allow_unserved=self.options.allow_unserved)
        if ended.status is not RunStatus.PARKED:
            self.proxy.sessions.end(session, ended.status, error=ended.error)
            self.proxy.parking.release(run_id)
        log.info("forkpoint: woken run %s exited %d (%s)", run_id, code, ended.status)

    async def _abandon(self, opening: asyncio.Task[Session], why: str) -> None:
        """The agent did not start: its run, opened for it, is crashed (a later wake resumes
        it), and its session held no longer."""
        try:
            session = await opening
        except ForkpointError:
            return
        self.proxy.sessions.end(session, RunStatus.CRASHED, error=why)

    async def close(self) -> None:
        """Serve stops: end the agents it woke (SIGTERM, SIGKILL after the grace), each run
        ending by its exit code (crashed, resumable); then the other target's."""
        for process in self._agents.values():
            _signal(process, signal.SIGTERM)
        if self._reaping:
            _, late = await asyncio.wait(self._reaping, timeout=GRACE)
            for process in self._agents.values():
                _signal(process, signal.SIGKILL)
            if late:
                await asyncio.wait(late)
        await self.otherwise.close()


def _reachable(proxy: Proxy) -> str:
    """Serve's URL as its woken agent reaches it (loopback for an address bound to any),
    with the token every request must carry beyond loopback."""
    scheme, _, rest = proxy.url.partition("://")
    host, _, port = rest.rpartition(":")
    url = f"{scheme}://{_ANY.get(host, host)}:{port}"
    if proxy.token is not None:
        url += f"{TOKEN_PREFIX}{quote(proxy.token, safe='')}"
    return url


def _signal(process: asyncio.subprocess.Process, signum: int) -> None:
    """Signal the agent's process group (its session's: the agent and its children)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
