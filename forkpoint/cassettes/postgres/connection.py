"""The PostgreSQL store's connections: a pool, transactions that outlast a lost connection,
and errors that say what happened.

A store call runs in one transaction on a pooled connection. When the server cannot be
reached (restarted, the network gone) the call is retried with backoff, on a new connection,
for up to `retry_for` seconds, then fails with a CassetteError; a warning says when the store
went away and when it came back. The recorder's thread waits through an outage this way, and
what the proxy hands it meanwhile waits in its queue.

The pool's own attempts to connect say it too: an outage may be seen only by the pool (a
connection found broken as it came back, replaced in the background while calls wait for it),
and the pool's log lines about forkpoint's pool (`error connecting in 'forkpoint': …`) are
left out for forkpoint's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool

from forkpoint.cassettes.postgres.schema import check_or_create
from forkpoint.errors import CassetteError

log = logging.getLogger(__name__)

T = TypeVar("T")
# How long a call waits for a server that went away (seconds): past a restart.
RETRY_FOR = 30.0
POOL_SIZE = 4
POOL_NAME = "forkpoint"


class _Pooled(psycopg.Connection[Any]):
    """A connection of forkpoint's pool (see `_told`)."""


class _SaidOurWay(logging.Filter):
    """The pool's lines about forkpoint's pool or one of its connections (their first
    argument: `error connecting in 'forkpoint'`, `discarding closed connection`): `Database`
    says what they mean in its own words."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        ours = (
            isinstance(args, tuple)
            and args
            and (args[0] == POOL_NAME or isinstance(args[0], _Pooled))
        )
        return not ours


logging.getLogger("psycopg.pool").addFilter(_SaidOurWay())


def redact(url: str) -> str:
    """The URL without its password, to name the store in messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Database:
    """The database at `url` (a `postgresql://` URL; libpq reads its parameters)."""

    def __init__(self, url: str, *, read_only: bool, retry_for: float = RETRY_FOR) -> None:
        self.label = redact(url)
        self.read_only = read_only
        self.retry_for = retry_for
        self._closed = False
        self.version = 0  # until checked
        self._down_since: float | None = None
        self._state = threading.Lock()
        self._held = threading.local()  # `conn`: this thread's connection inside `atomic`
        self._pool = psycopg_pool.ConnectionPool(
            url, min_size=1, max_size=POOL_SIZE, open=False, timeout=5.0,
            kwargs={"connect_timeout": 5}, name=POOL_NAME, connection_class=_told(self),
        )  # fmt: skip
        try:
            self._pool.open(wait=True, timeout=max(1.0, min(retry_for, 10.0)))
        except psycopg_pool.PoolTimeout as error:
            self._pool.close()
            raise CassetteError(
                f"cannot reach the PostgreSQL store {self.label}: {error}"
            ) from None
        try:
            self.version = self.run(
                lambda conn: check_or_create(conn, self.label, read_only=read_only), write=True
            )
        except BaseException:
            self._pool.close()
            raise

    def run(
        self, work: Callable[[psycopg.Connection], T], *, write: bool = False,
        retry_for: float | None = None,
    ) -> T:  # fmt: skip
        """`work(conn)` in one transaction, retried on a new connection while the server
        cannot be reached, for up to `retry_for` seconds (the store's by default)."""
        if self._closed:
            raise CassetteError(f"the store {self.label} is closed")
        if write and self.read_only and self.version:
            raise CassetteError(f"{self.label} is open for reading only")
        held: psycopg.Connection | None = getattr(self._held, "conn", None)
        if held is not None:  # inside `atomic`: a savepoint of its transaction, no retry
            try:
                with held.transaction():
                    return work(held)
            except psycopg.Error as error:
                raise CassetteError(f"{self.label}: {error}".strip()) from None
        deadline = time.monotonic() + (self.retry_for if retry_for is None else retry_for)
        wait = 0.05
        while True:
            try:
                with self._pool.connection() as conn, conn.transaction():
                    result = work(conn)
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as error:
                if isinstance(error, psycopg.errors.QueryCanceled) or self._closed:
                    raise CassetteError(f"{self.label}: {error}") from None
                self._went_away(error)
                if time.monotonic() + wait > deadline:
                    raise CassetteError(
                        f"the PostgreSQL store {self.label} is unreachable ({error})".strip()
                    ) from None
                time.sleep(wait)
                wait = min(wait * 2, 1.0)
                continue
            except psycopg.DatabaseError as error:
                raise CassetteError(f"{self.label}: {error}".strip()) from None
            self._came_back()
            return result

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every call made inside, on this thread, is one transaction on one connection:
        committed at the end, or rolled back whole (an import that fails part-way leaves
        nothing). A server lost meanwhile fails it: there is nothing to retry from."""
        if self._closed:
            raise CassetteError(f"the store {self.label} is closed")
        try:
            with self._pool.connection() as conn, conn.transaction():
                self._held.conn = conn
                try:
                    yield
                finally:
                    self._held.conn = None
        except psycopg.Error as error:
            raise CassetteError(f"{self.label}: {error}".strip()) from None
        except psycopg_pool.PoolTimeout as error:
            raise CassetteError(
                f"the PostgreSQL store {self.label} is unreachable ({error})"
            ) from None

    def _went_away(self, error: Exception) -> None:
        self._unreachable(error)
        self._pool.check()  # drop the broken connections

    def _unreachable(self, error: Exception) -> None:
        """Say once that the store went away (a call failed, or the pool could not connect)."""
        with self._state:
            if self._down_since is None:
                self._down_since = time.monotonic()
                log.warning("forkpoint: the PostgreSQL store %s is unreachable (%s); "
                            "retrying, writes wait", self.label, str(error).strip())  # fmt: skip

    def _came_back(self) -> None:
        if self._down_since is None:
            return
        with self._state:
            if self._down_since is not None:
                log.warning("forkpoint: the PostgreSQL store %s is back after %.1f s",
                            self.label, time.monotonic() - self._down_since)  # fmt: skip
                self._down_since = None

    def close(self) -> None:
        self._closed = True
        self._pool.close()


def _told(database: Database) -> type[psycopg.Connection[Any]]:
    """The pool's connection class: a connection that could not be made tells `database`."""

    class Told(_Pooled):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Self:
            try:
                return super().connect(*args, **kwargs)
            except psycopg.OperationalError as error:
                if database.version and not database._closed:  # opening: its error says it
                    database._unreachable(error)
                raise

    return Told
