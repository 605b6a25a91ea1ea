"""pytest fixtures for a real ``redis-server`` (Debian's ``redis-server`` package).

- ``redis_server``: one server for the whole session, AOF on (``appendfsync always``);
  do not stop or restart it in a test.
- ``redis_url``: ``redis://127.0.0.1:<port>/0`` of that server, flushed before the test,
  so every test starts from an empty database.
- ``redis_namespace``: a map namespace of this test's own (``t-<hex>:counts``).
- ``redis_factory``: starts private servers (``ManagedRedis`` kwargs) for tests that stop,
  kill or restart one, or need a password or TLS; destroyed after the test.

When a test using them fails, the servers' logs are printed. Always a real server.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from transactional.testing.redis import ManagedRedis, redis_server_binary

from fixtures_servers import print_logs, private_servers, test_failed


def _require_redis() -> None:
    if redis_server_binary() is None:
        pytest.fail("redis-server is not installed: apt-get install -y redis-server "
                    "(.ci/run installs it); these tests need a real server")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[ManagedRedis]:
    """A Redis server shared by the session (AOF on)."""
    _require_redis()
    server = ManagedRedis(appendonly=True)
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def redis_url(redis_server: ManagedRedis, request: pytest.FixtureRequest) -> Iterator[str]:
    """The shared server's db 0, empty at the start of the test."""
    client = redis_server.client()
    client.flushdb()
    client.connection_pool.disconnect()
    yield redis_server.url
    if test_failed(request):
        print_logs(redis_server, "shared redis")


@pytest.fixture
def redis_namespace() -> str:
    """A namespace (``<topology_id>:<state>``) unique to this test."""
    return f"t-{uuid.uuid4().hex[:10]}:counts"


@pytest.fixture
def redis_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ManagedRedis]]:
    """``redis_factory(**kwargs)`` starts a private ``ManagedRedis`` the test may stop, kill
    and restart; all are destroyed after the test."""
    _require_redis()
    yield from private_servers(request, ManagedRedis, "redis")
