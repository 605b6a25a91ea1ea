"""pytest fixtures for a real PostgreSQL 15 server (Debian's ``postgresql`` package).

- ``pg_server``: one server for the whole session (``initdb`` once, ≈1 s).
- ``pg_dsn``: a database of this test's own on it (created empty), as a DSN.

When a test using them fails, the server's log is printed. Always a real server.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from transactional.testing.postgres import ManagedPostgres, postgres_bin_dir

from fixtures_servers import print_logs, test_failed


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ManagedPostgres]:
    """A PostgreSQL server shared by the session."""
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install -y postgresql (.ci/run installs it); "
                    "these tests need a real server")
    server = ManagedPostgres()
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def pg_dsn(pg_server: ManagedPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new, empty database on the shared server."""
    dsn = pg_server.create_database(f"t_{uuid.uuid4().hex[:10]}")
    yield dsn
    if test_failed(request):
        print_logs(pg_server, "postgres")
