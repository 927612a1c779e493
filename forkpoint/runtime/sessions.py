"""The sessions a proxy serves: one per run, found by run id, created on first use."""

from __future__ import annotations

import re

from ulid import ULID

from forkpoint.cassettes.store import Store
from forkpoint.engine.changes import Change
from forkpoint.engine.decide import EngineConfig, OnDivergence, Session
from forkpoint.errors import ConfigError, RunNotFound
from forkpoint.models import Exchange, Mode, Run, RunStatus, Snapshot

_RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def new_run_id() -> str:
    return str(ULID())


class Sessions:
    """Run id → session. A request without a run id goes to the default session."""

    def __init__(self, store: Store, config: EngineConfig):
        self._store = store
        self._config = config
        self._sessions: dict[str, Session] = {}
        self.default_id: str | None = None

    def start_record(
        self,
        *,
        run_id: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        default: bool = True,
    ) -> Session:
        run = Run(id=run_id or new_run_id(), name=name, labels=dict(labels or {}))
        return self._open(Session(run), [], default)

    def start_replay(
        self,
        source_ref: str,
        *,
        on_divergence: OnDivergence = OnDivergence.FAIL,
        run_id: str | None = None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        default: bool = True,
    ) -> Session:
        """A new run that replays `source_ref` (id, id prefix or name) from the cassette; with
        `on_divergence=live` it forks itself at the first request the recording lacks."""
        source = self._store.find_run(source_ref)
        run = Run(
            id=run_id or new_run_id(),
            name=name,
            labels=dict(labels or source.labels),
            mode=Mode.REPLAY,
            parent_id=source.id,
        )
        session = Session(run, fork_step=None, on_divergence=on_divergence)
        return self._open(session, self._store.exchanges(source.id), default)

    def start_fork(
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
        parent = self._store.find_run(parent_ref)
        source = self._store.exchanges(parent.id)
        if not 0 <= at <= len(source):
            raise ConfigError(
                f"cannot fork run {parent.id} at step {at}: it has {len(source)} steps "
                f"(fork at 0 … {len(source)})",
                run_id=parent.id,
                step=at,
            )
        run = Run(
            id=run_id or new_run_id(),
            name=name,
            labels=dict(labels or parent.labels),
            mode=Mode.FORK,
            parent_id=parent.id,
            fork_step=at,
            change=change.to_json(),
        )
        session = Session(run, fork_step=at, on_divergence=on_divergence, change=change)
        if restore:
            session.restore_points = _by_adapter(
                self._store.latest_snapshots(parent.id, at_most=at)
            )
        return self._open(session, source, default)

    def start_resume(self, run_ref: str, *, default: bool = True) -> Session:
        """Go on with a crashed or stopped run: its recorded steps are served from the
        cassette (not written again), then it continues live, appending to the same run."""
        run = self._store.find_run(run_ref)
        if run.status is RunStatus.FINISHED:
            raise ConfigError(
                f"run {run.id} finished: there is nothing to resume "
                "(fork it to run it again with a change)",
                run_id=run.id,
            )
        source = self._store.exchanges(run.id)
        run.status = RunStatus.RUNNING
        session = Session(run, fork_step=len(source), appending=True)
        session.restore_points = _by_adapter(self._store.latest_snapshots(run.id))
        session.load(source, self._config)
        self._store.finish_run(run.id, RunStatus.RUNNING)
        self._sessions[run.id] = session
        if default:
            self.default_id = run.id
        return session

    def _open(self, session: Session, source: list[Exchange], default: bool) -> Session:
        self._store.create_run(session.run)
        if session.run.mode is not Mode.RECORD:
            session.load(source, self._config)
        self._sessions[session.run.id] = session
        if default:
            self.default_id = session.run.id
        return session

    def get(self, run_id: str | None) -> Session:
        """The session for a run id; an unknown id starts recording a run by that id."""
        if run_id is None:
            if self.default_id is None:
                return self.start_record()
            return self._sessions[self.default_id]
        session = self._sessions.get(run_id)
        if session is not None:
            return session
        if not _RUN_ID.match(run_id):
            raise ConfigError(f"invalid run id {run_id!r}: use letters, digits, '_', '.', '-'")
        try:
            existing = self._store.get_run(run_id)
        except RunNotFound:
            return self.start_record(run_id=run_id, default=False)
        # A run recorded before this proxy started: go on appending to it.
        session = Session(existing, next_step=self._store.step_count(run_id))
        self._sessions[run_id] = session
        return session

    def all(self) -> list[Session]:
        return list(self._sessions.values())

    def finish(self, status: RunStatus = RunStatus.FINISHED, *, error: str | None = None) -> None:
        """Close every run still open; a diverged run keeps its status."""
        for session in self._sessions.values():
            final = RunStatus.DIVERGED if session.run.status is RunStatus.DIVERGED else status
            session.run.status = final
            self._store.finish_run(
                session.run.id, final, error=error, fork_step=session.run.fork_step
            )


def _by_adapter(snapshots: list[Snapshot]) -> dict[str, Snapshot]:
    return {snapshot.adapter: snapshot for snapshot in snapshots}
