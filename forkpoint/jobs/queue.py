"""The queue in the store's database: procrastinate's `App` over the store's URL.

The URL is the store's own, search_path included, so the library's tables sit beside the
store's in the same schema (each test's schema of its own, a team's `forkpoint` schema), made
on first use under an advisory lock so two workers starting at once make them once. The
procrastinate schema a forkpoint made is marked (a comment on `procrastinate_jobs`) with the
newest migration it holds; a library of another schema is refused, naming the migrations to
apply, rather than run against tables it does not know.

forkpoint reads the library's table in two places, both reads: how many of an experiment's
jobs wait or run (`counts`), and which of them to cancel (`cancel`, through the library's own
cancel). Everything that claims, locks, retries or finishes a job is the library's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import procrastinate
import psycopg
from procrastinate.schema import SchemaManager

from forkpoint.errors import CassetteError, ConfigError
from forkpoint.jobs.kinds import PROBE, Job, agent_of, queue_of, task_of

__all__ = ["JobQueue", "QueueCounts"]

# pg_advisory_xact_lock key for making the queue's tables ("fkpq").
LOCK_KEY = 0x666B7071
MARK = "forkpoint: procrastinate schema "
# Past this many jobs at once the table's statistics are refreshed: a fresh table with a backlog
# of 10,000 and no statistics yet had procrastinate's claim take 117 ms a job instead of 2 ms,
# until autovacuum's first ANALYZE (benchmarks/workers.py, docs/workers.md).
ANALYZE_AFTER = 1000
_BATCH = 1000  # jobs a statement defers

_ACTIVE = """
SELECT id, status::text AS status FROM procrastinate_jobs
 WHERE task_name = %(task)s AND args->>'experiment' = %(experiment)s
   AND status IN ('todo', 'doing')
"""


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """An experiment's jobs the queue holds: waiting for a worker, and taken by one."""

    queued: int = 0
    running: int = 0


def newest_migration() -> str:
    """The newest migration this procrastinate's schema includes (its file's name)."""
    names = sorted(p.stem for p in Path(SchemaManager.get_migrations_path()).glob("*.sql"))
    return names[-1] if names else "none"


class JobQueue:
    """The job queue in the PostgreSQL database at `url` (a store's URL), for the commands
    that put jobs on it and read it back; a context manager. `app` is procrastinate's.
    `create=False` (a reader) makes no table: a queue never made holds no job."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        self.create = create
        self.app = app_for(url)
        self.made = False

    def __enter__(self) -> Self:
        self.made = install(self.url, create=self.create)
        self.app.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.app.close()

    def enqueue(self, jobs: Sequence[Job], *, lock: str | None = None) -> list[int]:
        """Put `jobs` on the queue, each on its agent's queue; their ids. `lock`: the
        library's queueing lock (a second job with it, while one waits, raises
        AlreadyEnqueued)."""
        ids: list[int] = []
        for kind, agent in dict.fromkeys((job.kind, job.agent) for job in jobs):
            same = [job.args for job in jobs if (job.kind, job.agent) == (kind, agent)]
            deferrer = self.app.configure_task(
                task_of(kind), queue=queue_of(agent), queueing_lock=lock
            )
            for start in range(0, len(same), _BATCH):
                ids += deferrer.batch_defer(*same[start : start + _BATCH])
        if len(jobs) >= ANALYZE_AFTER:
            self._sql().execute_query("ANALYZE procrastinate_jobs")
        return ids

    def counts(self, experiment: str) -> QueueCounts:
        """How many of `experiment`'s probes wait and how many run."""
        rows = self._active(experiment)
        running = sum(1 for row in rows if row["status"] == "doing")
        return QueueCounts(queued=len(rows) - running, running=running)

    def cancel(self, experiment: str) -> QueueCounts:
        """Cancel `experiment`'s waiting probes and ask the workers running the others to stop
        them (the library's cancel, with abort); how many there were of each."""
        queued = running = 0
        for row in self._active(experiment):
            if self.app.job_manager.cancel_job_by_id(row["id"], abort=True):
                queued += row["status"] == "todo"
                running += row["status"] == "doing"
        return QueueCounts(queued=queued, running=running)

    def _active(self, experiment: str) -> list[dict[str, Any]]:
        if not self.made:
            return []
        try:
            rows = self._sql().execute_query_all(
                _ACTIVE, task=task_of(PROBE), experiment=experiment
            )
        except procrastinate.exceptions.ConnectorException as error:
            raise CassetteError(f"the job queue is unreachable: {error}".strip()) from None
        return list(rows)

    def _sql(self) -> Any:
        return self.app.connector.get_sync_connector()


def app_for(url: str) -> procrastinate.App:
    """procrastinate's App over the database at `url`: its connections take the URL's
    search_path, so the library's tables are the ones beside the store's."""
    connector = procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=4, kwargs={"connect_timeout": 5}
    )
    return procrastinate.App(connector=connector)


async def waiting_agents(app: procrastinate.App) -> dict[str, int]:
    """Per agent, how many jobs wait for it (every forkpoint queue with some)."""
    queues = await app.job_manager.list_queues_async(status="todo")
    return {
        agent: int(queue["todo"])
        for queue in queues
        if (agent := agent_of(str(queue["name"]))) is not None and queue["todo"]
    }


def install(url: str, *, create: bool = True) -> bool:
    """Make the library's tables in the URL's schema if they are not there (unless not to
    `create`: then only look); refuse tables of another procrastinate schema than this one's.
    Whether they are there now."""
    want = newest_migration()
    try:
        conn = psycopg.connect(url, connect_timeout=5)
    except psycopg.OperationalError as error:
        raise ConfigError(f"cannot reach the job queue's database: {error}".strip()) from None
    with conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        row = conn.execute(
            "SELECT to_regclass('procrastinate_jobs') IS NOT NULL, "
            "obj_description(to_regclass('procrastinate_jobs'), 'pg_class')"
        ).fetchone()
        exists, mark = row if row else (False, None)
        if not exists:
            if not create:
                return False
            conn.execute(SchemaManager.get_schema())
            conn.execute(f"COMMENT ON TABLE procrastinate_jobs IS '{MARK}{want}'")
            return True
    if mark and mark.startswith(MARK) and mark.removeprefix(MARK) != want:
        have = mark.removeprefix(MARK)
        raise ConfigError(
            f"the job queue's tables are procrastinate's schema {have}, this forkpoint's "
            f"procrastinate needs {want}: apply its migrations after {have} "
            f"({SchemaManager.get_migrations_path()}), or use the procrastinate they were made by"
        )
    return True
