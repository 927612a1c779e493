"""The PostgreSQL store: a database many proxies share (`connection`), its runs (`runs`) and
experiments (`experiments`) behind the `Store` protocol."""

from __future__ import annotations

from forkpoint.cassettes.manifests import Packer
from forkpoint.cassettes.postgres.connection import RETRY_FOR, Database
from forkpoint.cassettes.postgres.experiments import PostgresExperiments
from forkpoint.cassettes.postgres.runs import PostgresRuns


class PostgresStore(PostgresRuns, PostgresExperiments):
    """A `Store` in the PostgreSQL database at `url`, safe to share between threads and with
    other processes and hosts. The schema is the first of the connection's search_path
    (libpq's `options=-csearch_path=NAME` picks another). `read_only` never writes."""

    def __init__(self, url: str, *, read_only: bool = False, retry_for: float = RETRY_FOR):
        self.location = url  # where it is: another process (a writer) opens it again from it
        self._db = Database(url, read_only=read_only, retry_for=retry_for)
        self.label = self._db.label
        self._packer = Packer()

    @property
    def schema_version(self) -> int:
        return self._db.version

    def close(self) -> None:
        self._db.close()
