"""The PostgreSQL store (the optional extra `postgres`: psycopg 3 and psycopg_pool)."""

from forkpoint.importing import require_extra

require_extra("postgres", "the PostgreSQL store (postgresql://…)")

from forkpoint.cassettes.postgres.store import PostgresStore  # noqa: E402 (after the check)

__all__ = ["PostgresStore"]
