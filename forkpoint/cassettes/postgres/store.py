"""The PostgreSQL store: a database many proxies share (`connection`), its runs (`runs`),
parks (`parks`) and experiments (`experiments`) behind the `Store` protocol."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.postgres.connection import RETRY_FOR, Database
from forkpoint.cassettes.postgres.experiments import PostgresExperiments
from forkpoint.cassettes.postgres.parks import PostgresParks


class PostgresStore(PostgresParks, PostgresExperiments):
    """A `Store` in the PostgreSQL database at `url`, safe to share between threads and with
    other processes and hosts. The schema is the first of the connection's search_path
    (libpq's `options=-csearch_path=NAME` picks another). `read_only` never writes."""

    def __init__(self, url: str, *, read_only: bool = False, retry_for: float = RETRY_FOR):
        self.location = url  # where it is: another process (a writer) opens it again from it
        self._db = Database(url, read_only=read_only, retry_for=retry_for)
        self.label = self._db.label
        self._packer = Packer()
        self._init_parks()

    @property
    def schema_version(self) -> int:
        return self._db.version

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Every write inside is one transaction: all of it is stored, or none (an import)."""
        try:
            with self._db.atomic():
                yield
        except BaseException:
            self._packer = Packer()  # it took blobs written in the rollback as stored
            raise

    def close(self) -> None:
        self._close_parks()
        self._db.close()
