"""The PostgreSQL store (the optional extra `postgres`: psycopg 3 and psycopg_pool)."""

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as missing:  # pragma: no cover - depends on the install
    raise ImportError(
        f"the PostgreSQL store needs {missing.name}: pip install 'forkpoint[postgres]'"
    ) from missing

from forkpoint.cassettes.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
