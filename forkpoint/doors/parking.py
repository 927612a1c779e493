"""Parking a run at the front door: its pending request kept in the store, its agent ended.

A request the engine awaits (`decide.Await`: a park rule's) or one whose upstream has not
answered after `--park-after` parks its run. In this order, so that nothing is lost if the
proxy dies at any point: the agent's state is pulled through its adapters, everything the run
recorded before is flushed into the store (the recorder's journal), the `Park` is stored (the
run is `parked`), and only then the agent's process group is ended (SIGTERM, then SIGKILL
after `GRACE`). A parked run holds nothing here beyond, for `--park-after`, the upstream
request still open: its answer is read to its end with nothing sent (the agent is gone),
recorded as any exchange, and the park marked answered `by="upstream"`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from aiohttp import web

from forkpoint.cassettes.store import ParkStore
from forkpoint.doors.ports import Recorder, Snapshots
from forkpoint.doors.replies import Reply
from forkpoint.engine.decide import Await, Forward, error_reply
from forkpoint.engine.lifecycle import Event, Tee
from forkpoint.engine.parking import Parking, waits_on_upstream
from forkpoint.engine.session import Session
from forkpoint.errors import ForkpointError
from forkpoint.models import Exchange, Headers, Launch, Park, RunStatus

log = logging.getLogger(__name__)

# How long an agent's process group has to end after SIGTERM before it is killed (s).
GRACE = 5.0


class Store(ParkStore, Protocol):
    def number(self, run_id: str, tickets: list[int]) -> dict[int, int]: ...


class Parker:
    """The proxy's parking: which agents it may end (by run), and the runs it parked."""

    def __init__(
        self,
        store: Store,
        recorder: Recorder,
        snapshots: Snapshots,
        parking: Parking,
        *,
        grace: float = GRACE,
        forget: Callable[[str], None] | None = None,
    ):
        self.store = store
        self.recorder = recorder
        self.snapshots = snapshots
        self.parking = parking
        self.grace = grace
        self._agents: dict[str, int] = {}  # run id -> its agent's process group
        self.launches: dict[str, Launch] = {}  # how each run's agent started, kept on parking
        # told of each run parked: its session is held no longer (the park is the store's)
        self._forget = forget
        self._kept: set[tuple[str, int]] = set()  # parked steps whose upstream is awaited

    def agent(self, run_id: str, pid: int) -> None:
        """The run's agent is process `pid`, leader of its own process group, which parking
        ends (never this process's own group)."""
        with contextlib.suppress(ProcessLookupError):
            group = os.getpgid(pid)
            if group != os.getpgrp():
                self._agents[run_id] = group

    def release(self, run_id: str) -> None:
        """The run's agent ended of itself: nothing of it is held here any more."""
        self._agents.pop(run_id, None)
        self.launches.pop(run_id, None)
        self.snapshots.forget(run_id)

    def parks_after(self, session: Session, action: Forward) -> bool:
        return self.parking.after is not None and session.live

    def keeps(self, record: Exchange) -> bool:
        """Whether the answer of this step is awaited for a parked run (its agent is gone, the
        upstream answer is read on and recorded)."""
        return (record.run_id, record.step) in self._kept

    async def hold(self, session: Session, action: Await, reply: Reply) -> None:
        """A park rule's request: park its run, end its agent and leave its connection."""
        try:
            await self.park(session, action.record, action.waits_on)
        except ForkpointError as error:
            record = action.record
            message = f"forkpoint: run {record.run_id} could not park: {error}"
            log.warning("%s", message)
            headers, body = error_reply(
                record.method, record.route, 503, message, error_type="forkpoint_park"
            )
            return await reply.whole(503, headers, body)
        if await self.end_agent(session.run.id):
            reply.drop()
            return
        await asyncio.Event().wait()  # an agent forkpoint did not start: held until it leaves

    async def watch(
        self, session: Session, action: Forward, events: AsyncIterator[Event], reply: Detached,
        tee: Tee,
    ) -> AsyncIterator[Event]:  # fmt: skip
        """The upstream's events for `action`; when no head came within `--park-after`, the
        run parks, its agent ends, and the answer goes on to be read and recorded with
        nothing sent, then the park is marked answered by its upstream."""
        assert self.parking.after is not None
        record = action.record
        first = asyncio.ensure_future(anext(events))
        parked = False
        try:
            done, _ = await asyncio.wait({first}, timeout=self.parking.after)
            if not done:
                waits_on = waits_on_upstream(record.upstream, self.parking.after)
                try:
                    await self.park(session, record, waits_on)
                except ForkpointError as error:
                    log.warning("forkpoint: run %s could not park: %s", record.run_id, error)
                else:
                    parked = True
                    reply.detach()
                    self._kept.add((record.run_id, record.step))
                    await self.end_agent(session.run.id)
            try:
                event = await first
            except StopAsyncIteration:
                return
            yield event
            async for event in events:
                yield event
            if parked:
                await self._answered_by_upstream(record)
        except (asyncio.CancelledError, GeneratorExit):
            if parked and tee.record.status is None:
                tee.forgo()  # no answer came: the park still waits, its step unrecorded
            raise
        finally:
            first.cancel()
            self._kept.discard((record.run_id, record.step))
            await events.aclose()  # type: ignore[attr-defined]

    async def park(self, session: Session, request: Exchange, waits_on: str) -> Park:
        """Park the run at `request`'s step: state pulled, the run's records flushed, the park
        stored (its step numbered by the store, for a run other proxies serve too)."""
        run_id = request.run_id
        await self.snapshots.pull(run_id, request.step)
        if not await asyncio.to_thread(self.recorder.flush, 30.0):
            raise ForkpointError("the store took no writes within 30 s", run_id=run_id)
        if request.step < 0:  # a ticket (`models.Ticket`): its step, as the store numbered it
            numbered = await asyncio.to_thread(self.store.number, run_id, [request.step])
            request.step = numbered[request.step]
        launch = self.launches.pop(run_id, None)  # held no longer: the store has it
        if launch is not None:
            await asyncio.to_thread(self.store.set_launch, launch)
        now = time.time()
        park = Park(request, waits_on, parked_at=now, deadline=self.parking.deadline(now))
        await asyncio.to_thread(self.store.park, park)
        session.run.status = RunStatus.PARKED
        if self._forget is not None:
            self._forget(run_id)
        log.info("forkpoint: run %s parked at step %d (%s)", run_id, request.step, waits_on)
        return park

    async def end_agent(self, run_id: str) -> bool:
        """End the run's agent's process group: SIGTERM, then SIGKILL after the grace; False
        when forkpoint did not start it (it is left as it is)."""
        group = self._agents.pop(run_id, None)
        self.snapshots.forget(run_id)
        if group is None:
            log.warning("forkpoint: run %s parked; its agent is not one forkpoint started: "
                        "it was not ended", run_id)  # fmt: skip
            return False
        if not _signal(group, signal.SIGTERM):
            return True
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if not _alive(group):
                return True
        _signal(group, signal.SIGKILL)
        return True

    async def _answered_by_upstream(self, record: Exchange) -> None:
        """The upstream answered a parked step: once its exchange is in the store, the park
        is answered, and whoever wakes runs is told."""
        try:
            await asyncio.to_thread(self.recorder.flush, 30.0)
            await asyncio.to_thread(
                self.store.mark_answered, record.run_id, record.step, by="upstream"
            )
        except ForkpointError as error:
            log.warning("forkpoint: run %s step %d: %s", record.run_id, record.step, error)


class Detached:
    """A reply whose agent is gone once `detach`ed: nothing more is sent it, and the answer
    runs on to be recorded."""

    def __init__(self, reply: Reply):
        self._reply = reply
        self.detached = False

    @property
    def response(self) -> web.StreamResponse | None:
        return self._reply.response

    @response.setter
    def response(self, value: web.StreamResponse | None) -> None:
        self._reply.response = value

    def detach(self) -> None:
        self.detached = True

    async def head(self, status: int, headers: Headers) -> None:
        if not self.detached:
            await self._reply.head(status, headers)

    async def body(self, data: bytes) -> None:
        if not self.detached:
            await self._reply.body(data)

    async def end(self) -> None:
        if not self.detached:
            await self._reply.end()

    def drop(self) -> None:
        if not self.detached:
            self._reply.drop()

    async def whole(self, status: int, headers: Headers, body: bytes) -> None:
        await self._reply.whole(status, headers, body)


def _signal(group: int, signum: int) -> bool:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        log.warning("forkpoint: cannot signal process group %d", group)
        return False
    return True


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
