"""The default cassette: one SQLite file (`connection`), its runs (`runs`), parks (`parks`)
and experiments (`experiments`) behind the `Store` protocol."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.sqlite.connection import Connection
from forkpoint.cassettes.sqlite.experiments import SqliteExperiments
from forkpoint.cassettes.sqlite.parks import SqliteParks
from forkpoint.cassettes.sqlite.schema import SCHEMA_VERSION

__all__ = ["DEFAULT_PATH", "SCHEMA_VERSION", "SqliteStore"]

DEFAULT_PATH = Path(".forkpoint/forkpoint.db")


class SqliteStore(SqliteParks, SqliteExperiments):
    """A `Store` on one SQLite file, safe to share between threads; other processes (the
    cassette writer, another proxy, `forkpoint show` while a run records) open the same file
    alongside. `read_only` opens it without ever writing to it (the reading commands)."""

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        read_only: bool = False,
        busy_timeout_ms: int = 5000,
    ):
        self.path = Path(path)
        self.location = str(self.path)  # where it is: another process opens it again from it
        self._db = Connection(
            self.path, create=create, read_only=read_only, busy_timeout_ms=busy_timeout_ms
        )
        self._packer = Packer(compact=True)  # the format of schema 12 (`sqlite.schema`)
        self._init_parks()

    @property
    def schema_version(self) -> int:
        """The file's schema version (an older one, read as it is, when opened read-only)."""
        return self._db.version

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Read-only SQL for reports and tests."""
        with self._db.reading() as conn:
            return conn.execute(sql, params).fetchall()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every write inside is one transaction: all of it is stored, or none (an import)."""
        try:
            with self._db.atomic():
                yield
        except BaseException:
            self._packer = Packer(compact=True)  # it took blobs written in the rollback as stored
            raise

    def close(self) -> None:
        self._db.close()
