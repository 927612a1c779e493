"""The worker loop: procrastinate's worker over the queues of this worker's agents.

The library claims a job (a row, locked), keeps this worker's heartbeat, retries a job whose
handler raised (`TRIES` tries in all), aborts a cancelled one and finishes the jobs under way
when asked to stop. forkpoint adds three small things around it:

- recovery of jobs a lost worker left running (killed -9, cut off): every half `lease`, the
  library's stalled jobs (their worker's heartbeat older than `lease`) are queued again with
  the library's retry, or past their last try handed to their handler's `give_up`, so each
  is retried or reported failed, never stuck;
- one log line per agent whose jobs wait here for a worker that has it, this one not;
- a database that goes away: the library's worker stops when its connection does, and is
  started again on a new one, while the jobs under way write to the store through its own
  retries.

SIGTERM or SIGINT stops taking jobs, lets those under way finish for up to `grace` seconds,
then aborts them (their agents are stopped; the library queues them again) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import procrastinate
from procrastinate.job_context import JobContext
from procrastinate.jobs import Job as QueuedJob
from procrastinate.jobs import Status

from forkpoint.api.experiments import Prober
from forkpoint.cassettes.open import open_store
from forkpoint.cassettes.store import Store
from forkpoint.jobs import app_for, install, waiting_agents
from forkpoint.jobs.kinds import PREFIX, agent_of, queue_of, task_of
from forkpoint.workers.agents import Agent
from forkpoint.workers.handlers import HANDLERS, Aborted, Handler, Work
from forkpoint.workers.outage import LOST_DATABASE, Outage

__all__ = ["TRIES", "Worker"]

log = logging.getLogger("forkpoint.worker")
TRIES = 3  # a job is tried at most this often: a failure or a lost worker each count one
FOREIGN_EVERY = 30.0  # seconds between two looks for jobs waiting for agents this one lacks


class Worker:
    """Takes jobs for `agents` from the queue in the database at `url` (the store's), at most
    `concurrency` at once, until stopped."""

    def __init__(
        self, url: str, agents: Mapping[str, Agent], *, concurrency: int = 1,
        lease: float = 30.0, grace: float = 60.0, tries: int = TRIES,
    ) -> None:  # fmt: skip
        self.url = url
        self.agents = dict(agents)
        self.concurrency = concurrency
        self.lease = lease
        self.grace = grace
        self.tries = tries
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._probers: dict[tuple[str, str], Prober] = {}
        self._running: set[int] = set()  # ids of the jobs under way here: never "lost"
        self.outage = Outage(log)  # said in forkpoint's words, the library's too (LibraryLines)
        self._stopping = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        """Stop taking jobs; end once those under way are done (at most `grace` seconds).
        Safe from any thread."""
        loop = self._loop
        if loop is not None and threading.current_thread() is not self._thread:
            loop.call_soon_threadsafe(self.stop)
            return
        if not self._stopping.is_set():
            log.info("forkpoint worker: stopping after the jobs under way (at most %.0f s)",
                     self.grace)  # fmt: skip
        self._stopping.set()

    async def run(self) -> None:
        """Take jobs until `stop` (SIGTERM, SIGINT); through a database that goes away."""
        self._loop, self._thread = asyncio.get_running_loop(), threading.current_thread()
        if threading.current_thread() is threading.main_thread():  # else: the caller's `stop`
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
        await asyncio.to_thread(install, self.url)
        store = await asyncio.to_thread(open_store, self.url)
        try:
            wait = 1.0
            while not self._stopping.is_set():
                try:
                    await self._serve(store)
                    wait = 1.0
                except LOST_DATABASE as error:
                    self.outage.lost(error)
                    wait = min(wait * 2, 10.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), wait)
        finally:
            await asyncio.to_thread(store.close)
            log.info("forkpoint worker: stopped")

    async def _serve(self, store: Store) -> None:
        """One life of the library's worker: until a stop, or until its connection is lost."""
        app = app_for(self.url)
        for kind, handler in HANDLERS.items():
            app.task(
                name=task_of(kind), pass_context=True,
                retry=procrastinate.RetryStrategy(max_attempts=self.tries - 1, wait=1),
            )(self._task(handler, store))  # fmt: skip
        async with app.open_async():
            self.outage.back()
            log.info("forkpoint worker %s: taking jobs for %s", self.name, ", ".join(self.agents))
            side = [
                asyncio.create_task(self._every(self.lease / 2, lambda: self._recover(app, store))),
                asyncio.create_task(self._every(FOREIGN_EVERY, self._foreigner(app))),
            ]
            working = asyncio.create_task(app.run_worker_async(
                queues=[queue_of(agent) for agent in self.agents], name=self.name,
                concurrency=self.concurrency, install_signal_handlers=False,
                delete_jobs="successful", update_heartbeat_interval=self.lease / 3,
                stalled_worker_timeout=self.lease, shutdown_graceful_timeout=self.grace,
                fetch_job_polling_interval=5.0, abort_job_polling_interval=1.0,
            ))  # fmt: skip
            stopping = asyncio.create_task(self._stopping.wait())
            try:
                await asyncio.wait({working, stopping}, return_when=asyncio.FIRST_COMPLETED)
                working.cancel()  # the library's graceful stop: the jobs under way finish first
                with contextlib.suppress(asyncio.CancelledError):
                    await working
            finally:
                for task in (*side, stopping):
                    task.cancel()
                await asyncio.gather(*side, stopping, return_exceptions=True)
        if not self._stopping.is_set():
            raise procrastinate.exceptions.ConnectorException("its connection was lost")

    def _task(self, handler: Handler, store: Store) -> Callable[..., Awaitable[None]]:
        async def task(context: JobContext, **args: Any) -> None:
            await self._do(handler, context, store, args)

        return task

    async def _do(
        self, handler: Handler, context: JobContext, store: Store, args: dict[str, Any]
    ) -> None:
        job = context.job
        agent = self.agents[agent_of(job.queue) or ""]  # only its agents' queues are taken
        log.info("forkpoint worker: %s %s with agent %s (try %d of %d)",
                 job.task_name.removeprefix(PREFIX), _about(args), agent.name,
                 job.attempts + 1, self.tries)  # fmt: skip
        work = Work(args, agent, store, job.attempts > 0, context.should_abort, self._probers)
        self._running.add(job.id or 0)
        try:
            await handler.run(work)
        except Aborted as aborted:
            log.info("forkpoint worker: %s", aborted)
            raise procrastinate.exceptions.JobAborted() from None
        except asyncio.CancelledError:
            log.info("forkpoint worker: %s %s was stopped, its agent ended, nothing stored "
                     "(cancelled, or this worker is stopping)",
                     job.task_name.removeprefix(PREFIX), _about(args))  # fmt: skip
            raise
        except Exception as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            log.warning("forkpoint worker: %s %s failed (try %d of %d): %s",
                        job.task_name.removeprefix(PREFIX), _about(args), job.attempts + 1,
                        self.tries, reason)  # fmt: skip
            if job.attempts + 1 >= self.tries:
                await asyncio.to_thread(
                    handler.give_up, store, args, f"failed on each of {self.tries} tries: {reason}"
                )
            raise
        finally:
            self._running.discard(job.id or 0)

    async def _recover(self, app: procrastinate.App, store: Store) -> None:
        """Queue again, or give up on, the jobs whose worker stopped beating."""
        for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=self.lease):
            handler = HANDLERS.get(job.task_name.removeprefix(PREFIX))
            if handler is None or not job.task_name.startswith(PREFIX) or job.id in self._running:
                continue  # not forkpoint's, or under way here (a late heartbeat: not lost)
            with contextlib.suppress(procrastinate.exceptions.ConnectorException):
                await self._recover_one(app, store, job, handler)  # else: recovered elsewhere

    async def _recover_one(
        self, app: procrastinate.App, store: Store, job: QueuedJob, handler: Handler
    ) -> None:
        about = f"{job.task_name.removeprefix(PREFIX)} {_about(job.task_kwargs)}"
        tries = job.attempts + 1
        if tries < self.tries:
            await app.job_manager.retry_job(job)
            log.warning("forkpoint worker: %s was left running by a lost worker; queued again "
                        "(try %d of %d)", about, tries + 1, self.tries)  # fmt: skip
            return
        await app.job_manager.finish_job(job, status=Status.FAILED, delete_job=False)
        reason = f"its worker was lost on each of {tries} tries (killed, or cut off)"
        await asyncio.to_thread(handler.give_up, store, job.task_kwargs, reason)
        log.warning("forkpoint worker: %s failed: %s", about, reason)

    def _foreigner(self, app: procrastinate.App) -> Callable[[], Awaitable[None]]:
        """One line per agent whose jobs wait for a worker that has it (this one does not)."""
        told: set[str] = set()

        async def look() -> None:
            for agent, count in (await waiting_agents(app)).items():
                if agent not in self.agents and agent not in told:
                    told.add(agent)
                    log.warning("forkpoint worker: %d job(s) wait for agent %r, which this "
                                "worker does not have (it runs %s): left for another worker",
                                count, agent, ", ".join(self.agents))  # fmt: skip

        return look

    async def _every(self, seconds: float, work: Callable[[], Awaitable[None]]) -> None:
        """`work` now and every `seconds`; a failure (the database away) waits for the next."""
        while True:
            try:
                await work()
                self.outage.back()
            except LOST_DATABASE as error:
                self.outage.lost(error)
            await asyncio.sleep(seconds)


def _about(args: Mapping[str, Any]) -> str:
    if "experiment" in args:
        return f"{args.get('seq')} of {args['experiment']}"
    return ", ".join(f"{key}={value}" for key, value in args.items())
