"""The job queue: work for `forkpoint worker`s, kept in the store's PostgreSQL database.

A job names its work by reference, never by a command line: its kind (`probe`, one fork of an
experiment), the agent that runs it (a name each worker maps to a command of its own) and the
ids it is about. Claiming, locks, retries, heartbeats and cancellation are procrastinate's
(docs/architecture.md says why that library); its tables (`procrastinate_*`) live beside the
store's in the same schema (the URL's search_path), made on first use, never in forkpoint's own
migrations. `kinds` says what a job is, `queue` puts jobs on the queue and reads it back.
"""

from forkpoint.importing import require_extra

require_extra("workers", "the job queue (forkpoint worker, experiment --on-workers)")

from forkpoint.jobs.kinds import (  # noqa: E402 (after the check)
    PROBE,
    WAKE,
    Job,
    check_agent_name,
    probe,
    queue_of,
    wake,
)
from forkpoint.jobs.queue import (  # noqa: E402 (after the check)
    JobQueue,
    QueueCounts,
    app_for,
    install,
    waiting_agents,
)

__all__ = [
    "PROBE",
    "WAKE",
    "Job",
    "JobQueue",
    "QueueCounts",
    "app_for",
    "check_agent_name",
    "install",
    "probe",
    "queue_of",
    "waiting_agents",
    "wake",
]  # fmt: skip
