"""A PostgreSQL server for the tests: each test gets a schema of its own, dropped after it.

The server is $FORKPOINT_TEST_POSTGRES_URL (default: the project machines' local server).
Where it cannot be reached the tests that need it are skipped, saying why, unless
FORKPOINT_TEST_POSTGRES=required (CI, and the machines that run one): then they fail.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

SERVER = os.environ.get("FORKPOINT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRED = os.environ.get("FORKPOINT_TEST_POSTGRES") == "required"


def unavailable(why: str) -> None:
    """Skip the test on a laptop without the server; fail it where the server is required."""
    message = f"no PostgreSQL server for the tests ({why}); set FORKPOINT_TEST_POSTGRES_URL"
    if REQUIRED:
        pytest.fail(f"{message} (FORKPOINT_TEST_POSTGRES=required)", pytrace=False)
    pytest.skip(message)


def in_schema(url: str, schema: str) -> str:
    """`url` with libpq's options putting `schema` first on the search_path."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of an empty schema of its own on the test server."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed: pip install -e '.[postgres]'")
    try:
        admin = psycopg.connect(SERVER, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        unavailable(str(error).strip().splitlines()[0])
    schema = f"test_{uuid.uuid4().hex[:16]}"
    with admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield in_schema(SERVER, schema)
    finally:
        _drop(schema)


def _drop(schema: str) -> None:
    """On a new connection: a test may have restarted the server."""
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        try:
            with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
