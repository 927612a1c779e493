"""The sessions a proxy serves: one per run, opened from the cassette, found by run id.

Opening a session reads the store on a worker thread, and a new run is created through the
recorder, ahead of its exchanges: the event loop never waits on the store. A session that is
still opening is already known by its run id, so an agent started while its run loads waits
for it instead of recording a run of its own.

Steps: a session this proxy opened itself (the run of `record -- CMD`, a replay, a fork, a
resume, `serve`'s default run) is served by this proxy alone and numbers its own steps. A run
a request names that this proxy did not open may be served by other proxies on the same store
at once (a fleet behind a load balancer, two `serve`s on one file): it is created through the
recorder when it opens, and each request gets a ticket as it arrives (`models.Ticket`), which
the store turns into its step when the recorder writes it, in arrival order
(`Store.number`): no request waits on the store, which may be locked, full or away.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from copy import deepcopy
from dataclasses import replace

from forkpoint.cassettes.store import Store, location_of
from forkpoint.doors.ports import Recorder
from forkpoint.engine.changes import Change
from forkpoint.engine.config import EngineConfig, OnDivergence
from forkpoint.engine.session import Session, check_fork_step
from forkpoint.errors import ConfigError
from forkpoint.models import Ending, Mode, Run, RunStatus, Snapshot, Ticket, new_run_id, new_ticket

log = logging.getLogger(__name__)

_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class Sessions:
    """Run id → session. A request without a run id goes to the default session."""

    def __init__(
        self, store: Store, config: EngineConfig, recorder: Recorder, *, owner: str | None = None
    ):
        self._store = store
        self._owner = owner  # what the runs this proxy opens itself name (`Run.owner`)
        self._inline = location_of(store) is None  # in memory: loaded at once, no thread
        self._config = config
        self._recorder = recorder
        self._sessions: dict[str, asyncio.Future[Session]] = {}
        self.default_id: str | None = None
        self._shared: set[str] = set()  # runs whose steps the store allocates
        self._alone: tuple[Session, frozenset[str]] | None = None  # see serve_only

    async def record(
        self,
        *,
        run_id: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        default: bool = True,
    ) -> Session:
        run = Run(
            id=run_id or new_run_id(), name=name, labels=dict(labels or {}), owner=self._owner
        )
        return await self._open(run.id, default, lambda: self._new(Session.record(run)))

    async def replay(
        self,
        source_ref: str,
        *,
        on_divergence: OnDivergence = OnDivergence.FAIL,
        run_id: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        default: bool = True,
    ) -> Session:
        """A new run that replays `source_ref` (id, id prefix or name) from the cassette."""

        def load() -> Session:
            source = self._store.find_run(source_ref)
            run = Run(
                id=run_id or new_run_id(),
                name=name,
                labels=dict(labels or source.labels),
                mode=Mode.REPLAY,
                parent_id=source.id,
                owner=self._owner,
            )
            exchanges = self._store.exchanges(source.id)
            return self._new(
                Session.replay(run, exchanges, self._config, on_divergence=on_divergence)
            )

        return await self._open(run_id, default, load)

    async def fork(
        self,
        parent_ref: str,
        *,
        at: int,
        change: Change = Change(),
        on_divergence: OnDivergence = OnDivergence.FAIL,
        restore: bool = True,
        run_id: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        default: bool = True,
    ) -> Session:
        """A child run of `parent_ref`: its steps < `at` replayed, then live with `change`.

        With `restore`, an agent that registers an adapter gets back the snapshot nearest
        before `at` and goes on from there; without, it starts fresh and its prefix replays.
        """

        def load() -> Session:
            parent = self._store.find_run(parent_ref)
            source = self._store.exchanges(parent.id)
            check_fork_step(parent.id, at, len(source))
            run = Run(
                id=run_id or new_run_id(),
                name=name,
                labels=dict(labels or parent.labels),
                mode=Mode.FORK,
                parent_id=parent.id,
                fork_step=at,
                change=change.to_json(),
                owner=self._owner,
            )
            points = (
                _by_adapter(self._store.latest_snapshots(parent.id, at_most=at)) if restore else {}
            )
            session = Session.fork(
                run, source, self._config, at=at, change=change,
                on_divergence=on_divergence, restore_points=points,
            )  # fmt: skip
            return self._new(session)

        return await self._open(run_id, default, load)

    async def resume(
        self,
        run_ref: str,
        *,
        on_divergence: OnDivergence = OnDivergence.FAIL,
        default: bool = True,
        run_id: str | None = None,
    ) -> Session:
        """Go on with a crashed or stopped run: the steps its agent had fully received are
        served from the cassette (not written again), then it continues live, appending to the
        same run. `run_id`, the run's id when the caller has found it already, registers the
        session while it loads: an agent started at once waits for its run."""

        def load() -> Session:
            run = self._store.find_run(run_ref)
            if run.status is RunStatus.FINISHED:
                raise ConfigError(
                    f"run {run.id} finished: there is nothing to resume "
                    "(fork it to run it again with a change)",
                    run_id=run.id,
                )
            source = self._store.exchanges(run.id)
            points = _by_adapter(self._store.latest_snapshots(run.id))
            self._store.finish_run(run.id, RunStatus.RUNNING, owner=self._owner)
            run.status, run.owner = RunStatus.RUNNING, self._owner or run.owner
            return Session.resume(
                run, source, self._config, on_divergence=on_divergence, restore_points=points
            )

        return await self._open(run_id, default, load)

    async def get(self, run_id: str | None) -> Session:
        """The session for a run id; an unknown id records a run by that id (or goes on with
        the run of that id the cassette holds)."""
        if run_id is None:
            if self.default_id is None:
                return await self.record()
            return await self._sessions[self.default_id]
        opening = self._sessions.get(run_id)
        if opening is not None:
            return await opening
        if self._alone is not None:
            return self._only(run_id, *self._alone)
        if not _RUN_ID.match(run_id):
            raise ConfigError(f"invalid run id {run_id!r}: use letters, digits, '_', '.', '-'")
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        future.set_result(self._shared_run(run_id))
        self._sessions[run_id] = future
        return future.result()

    def ready(self, run_id: str | None) -> Session | None:
        """The session of a run id when it is open and numbers its own steps: nothing to wait
        for, from any thread (the in-process door's clients); None otherwise."""
        key = self.default_id if run_id is None else run_id
        if key is None or self._alone is not None or key in self._shared:
            return None
        opening = self._sessions.get(key)
        if opening is None or not opening.done() or opening.cancelled():
            return None
        return None if opening.exception() is not None else opening.result()

    def serve_only(self, session: Session, *names: str) -> None:
        """Serve `session` alone (`serve --replay`: offline for every run): a request naming
        `names` (the replayed run's id, the reference it was given by) gets it; one naming any
        other run is refused, never recorded nor sent live."""
        self._alone = (session, frozenset(names))

    @staticmethod
    def _only(run_id: str, session: Session, names: frozenset[str]) -> Session:
        if run_id in names:
            return session
        replayed = session.run.parent_id
        raise ConfigError(
            f"this proxy replays run {replayed} offline: it serves no other run "
            f"(the request named {run_id!r}); drop the run from the request, or name {replayed}",
            run_id=run_id,
        )

    def allocate(self, session: Session) -> int | None:
        """The ticket of a request that just arrived for a run other proxies may serve too,
        handed to the recorder in arrival order (the store numbers it as it writes it); None
        for a session that numbers its own steps."""
        run_id = session.run.id
        if run_id not in self._shared:
            return None
        ticket = new_ticket()
        self._recorder.submit(Ticket(run_id, ticket))
        return ticket

    def all(self) -> list[Session]:
        return [f.result() for f in self._sessions.values() if f.done() and not f.exception()]

    def finish(self, status: RunStatus = RunStatus.FINISHED, *, error: str | None = None) -> None:
        """Close every run still open, through the recorder (a store taking no writes keeps
        the ends in the journal: stopping never waits on it); a diverged run keeps its
        status."""
        for session in self.all():
            self._end(session, status, error)

    def end(self, session: Session, status: RunStatus, *, error: str | None = None) -> None:
        """Close one session's run as `finish` closes them all (its agent exited while the
        proxy serves on: a wake in `serve`), and forget it."""
        self._end(session, status, error)
        self.forget(session.run.id, session)

    def forget(self, run_id: str, session: Session | None = None) -> None:
        """Hold a run's session no longer (it parked, or its agent is gone): a long-lived proxy
        keeps nothing of the runs it served but what they still need. A later request naming
        the run opens it again. The default session, and one that replaced `session` (a
        wake's), are kept."""
        opening = self._sessions.get(run_id)
        if opening is None or run_id == self.default_id or not opening.done():
            return
        if session is not None and (opening.cancelled() or opening.exception() is not None
                                    or opening.result() is not session):  # fmt: skip
            return
        del self._sessions[run_id]
        self._shared.discard(run_id)

    def _end(self, session: Session, status: RunStatus, error: str | None) -> None:
        run = session.run
        if run.status is RunStatus.PARKED:  # its park is its state: a wake goes on with it
            return
        run.status = RunStatus.DIVERGED if run.status is RunStatus.DIVERGED else status
        self._recorder.submit(Ending(run.id, run.status, error, run.fork_step, run.change))

    def _shared_run(self, run_id: str) -> Session:
        """A run a request names, which other proxies may serve too: made in the store through
        the recorder, unless it is there already (recorded before, or made by another proxy at
        the same moment: the write is skipped); the store numbers its steps after its last.
        Nothing here waits on the store."""
        self._shared.add(run_id)
        return self._new(Session.record(Run(id=run_id)))

    def _new(self, session: Session) -> Session:
        """A session of a run the cassette does not hold yet: the run is written first, as it
        is now. The recorder gets a copy: the session's run changes as it goes (`finish` marks
        it ended), and a run written ended would make its `Ending` a no-op (no error, no end)."""
        run = session.run
        self._recorder.submit(replace(run, labels=dict(run.labels), change=deepcopy(run.change)))
        return session

    async def _open(
        self, run_id: str | None, default: bool, load: Callable[[], Session]
    ) -> Session:
        """Register the session under its run id while it loads (on a worker thread, unless
        the store is in memory), so that requests naming it wait for it."""
        if run_id is None:
            return self._register(await self._loaded(load), default)
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        self._sessions[run_id] = future
        self._shared.discard(run_id)  # served by this proxy alone from now on (a wake's resume)
        if default:
            self.default_id = run_id
        try:
            session = await self._loaded(load)
        except BaseException as error:
            del self._sessions[run_id]
            if self.default_id == run_id:
                self.default_id = None
            future.set_exception(error)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        future.set_result(session)
        return session

    async def _loaded(self, load: Callable[[], Session]) -> Session:
        return load() if self._inline else await asyncio.to_thread(load)

    def _register(self, session: Session, default: bool) -> Session:
        future: asyncio.Future[Session] = asyncio.get_running_loop().create_future()
        future.set_result(session)
        self._sessions[session.run.id] = future
        if default:
            self.default_id = session.run.id
        return session


def _by_adapter(snapshots: list[Snapshot]) -> dict[str, Snapshot]:
    return {snapshot.adapter: snapshot for snapshot in snapshots}
