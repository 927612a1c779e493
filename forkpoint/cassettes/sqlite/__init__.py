"""The SQLite cassette."""

from forkpoint.cassettes.sqlite.store import DEFAULT_PATH, SqliteStore

__all__ = ["DEFAULT_PATH", "SqliteStore"]
