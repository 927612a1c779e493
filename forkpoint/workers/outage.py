"""The queue library's log lines in forkpoint's words, and a lost database said once.

procrastinate and psycopg's pool log an outage their own way: a pool line per failed connect,
a traceback for a listener or a poller that met a closed connection. A worker says instead
one line when the job queue's database goes away and one when it is back; the library's
outcome of a job forkpoint already reported is dropped; any other warning keeps its message
and loses its traceback.
"""

from __future__ import annotations

import logging
import time

import procrastinate
import psycopg

__all__ = ["LOST_DATABASE", "LibraryLines", "Outage", "is_lost_database"]

LOST_DATABASE = (procrastinate.exceptions.ConnectorException, psycopg.OperationalError, OSError)
# The library's outcome of a job that failed: forkpoint's handler has said it, with its reason.
_SAID_BY_FORKPOINT = {"job_error", "job_error_retry", "job_aborted", "job_aborted_retry"}


class Outage:
    """Whether the job queue's database is away: said when it goes, and when it comes back."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.since: float | None = None

    def lost(self, error: BaseException | str) -> None:
        if self.since is not None:
            return
        self.since = time.monotonic()
        self.log.warning("forkpoint worker: the job queue's database is unreachable (%s); "
                         "trying again", _reason(error))  # fmt: skip

    def back(self) -> None:
        if self.since is None:
            return
        self.log.warning("forkpoint worker: the job queue's database is back after %.1f s",
                         time.monotonic() - self.since)  # fmt: skip
        self.since = None


class LibraryLines(logging.Filter):
    """A handler's filter for the library's loggers (`procrastinate`, `psycopg.pool`)."""

    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool | logging.LogRecord:
        error = record.exc_info[1] if record.exc_info else None
        if record.name == "procrastinate.utils" and is_lost_database(error):
            return False  # a stopping worker's look back at a side task it stopped for
        if is_lost_database(error) or record.getMessage().startswith("error connecting in "):
            self.outage.lost(error or record.getMessage().partition(": ")[2])
            return False
        if getattr(record, "action", None) in _SAID_BY_FORKPOINT:
            return False
        said = logging.makeLogRecord(record.__dict__)
        said.msg, said.args, said.exc_info, said.exc_text = (
            f"forkpoint worker: the job queue: {record.getMessage()}"
            + (f" ({_reason(error)})" if error is not None else ""),
            None, None, None,
        )  # fmt: skip
        return said


def is_lost_database(error: BaseException | None) -> bool:
    """Whether `error`, or one it was raised from, says the database went away."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, LOST_DATABASE):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def _reason(error: BaseException | str) -> str:
    """The first line of the deepest message: psycopg's own, not the library's wrapper."""
    if isinstance(error, str):
        return error.strip().splitlines()[0] if error.strip() else "no reason given"
    lines: list[str] = []
    while error is not None and len(lines) < 10:
        text = str(error).strip()
        if text:
            lines.append(text.splitlines()[0])
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return lines[-1] if lines else "no reason given"
