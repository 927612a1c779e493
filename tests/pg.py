"""A PostgreSQL server for the tests: each test gets a schema of its own, dropped after it.

The server is $FORKPOINT_TEST_POSTGRES_URL (default: the project machines' local server).
Where it cannot be reached the tests that need it are skipped, saying why, unless
FORKPOINT_TEST_POSTGRES=required (CI, and the machines that run one): then they fail.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

SERVER = os.environ.get("FORKPOINT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRED = os.environ.get("FORKPOINT_TEST_POSTGRES") == "required"


# Tests run on several xdist workers share one server, and a few restart it: each test holds
# this file's lock shared (tests/conftest.py), a restart holds it alone, so no other test is
# cut off by it.
_SERVER_LOCK = Path(tempfile.gettempdir()) / "forkpoint-tests-postgres.lock"
_lock_fd: int | None = None


def _lock() -> int:
    global _lock_fd
    if _lock_fd is None:
        _lock_fd = os.open(_SERVER_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    return _lock_fd


@contextmanager
def sharing_the_server() -> Iterator[None]:
    """Held by every test: a restart waits for the tests running on other workers."""
    fcntl.flock(_lock(), fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(_lock(), fcntl.LOCK_UN)


@contextmanager
def server_alone() -> Iterator[None]:
    """For a test that restarts the server: no other test runs meanwhile (then shared again)."""
    fcntl.flock(_lock(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(_lock(), fcntl.LOCK_SH)


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
