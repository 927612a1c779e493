"""Opening a store from where it lives: a `postgresql://` URL is a PostgreSQL database, anything
else the path of an SQLite file."""

from __future__ import annotations

import os

from forkpoint.cassettes.sqlite.store import SqliteStore
from forkpoint.cassettes.store import Store

__all__ = ["is_postgres", "open_store"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres(location: str | os.PathLike[str]) -> bool:
    return os.fspath(location).startswith(POSTGRES_SCHEMES)


def open_store(
    location: str | os.PathLike[str], *, create: bool = True, read_only: bool = False
) -> Store:
    """The store at `location`. `create=False` refuses to make a new one; `read_only` opens
    it for reading and never writes to it (the reading commands). A PostgreSQL store is made
    on first use whatever `create` says: a database has no file to mistype."""
    if is_postgres(location):
        from forkpoint.cassettes.postgres import PostgresStore  # an optional extra

        return PostgresStore(os.fspath(location), read_only=read_only)
    return SqliteStore(os.fspath(location), create=create, read_only=read_only)
