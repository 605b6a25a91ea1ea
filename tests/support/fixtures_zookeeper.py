"""pytest fixtures for a real ZooKeeper 3.8 server (Debian's ``zookeeper`` package).

- ``zk_server``: one server for the whole session (tick 250 ms, so a test may ask for a
  session timeout as short as 0.5 s and see its expiry within a tick).
- ``zk_url``: a fresh root per test on that server (``zk://127.0.0.1:<port>/t-<hex>``):
  tests never see each other's znodes, as with a chroot.
- ``zk_factory``: starts extra servers for tests that stop, kill or restart one
  (never the shared server); destroyed after the test.

When a test using them fails, the servers' logs are printed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from transactional.testing.zookeeper import ManagedZooKeeper

from fixtures_servers import print_logs, private_servers, test_failed

TICK_MS = 250


@pytest.fixture(scope="session")
def zk_server() -> Iterator[ManagedZooKeeper]:
    """A ZooKeeper server shared by the session; do not stop or restart it in a test."""
    server = ManagedZooKeeper(tick_time_ms=TICK_MS)
    server.start()
    yield server
    server.destroy()


@pytest.fixture
def zk_url(zk_server: ManagedZooKeeper, request: pytest.FixtureRequest) -> Iterator[str]:
    """A coordination URL with a root of its own for this test."""
    url = zk_server.url(f"t-{uuid.uuid4().hex[:12]}")
    yield url
    if test_failed(request):
        print_logs(zk_server, "shared zookeeper")


@pytest.fixture
def zk_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., ManagedZooKeeper]]:
    """``zk_factory(**kwargs)`` starts a private ZooKeeper (``ManagedZooKeeper`` kwargs)
    that the test may stop, kill and restart; all are destroyed after the test."""
    def make(**kwargs) -> ManagedZooKeeper:
        kwargs.setdefault("tick_time_ms", TICK_MS)
        return ManagedZooKeeper(**kwargs)

    yield from private_servers(request, make, "zookeeper")
