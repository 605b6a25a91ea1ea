"""pytest fixtures for the sharded servers: a Redis Cluster (3 masters, 1 replica each)
and a 3-node ZooKeeper ensemble. Session-scoped and started only by tests that ask (they
are the heaviest fixtures: 6 redis-servers, 3 JVMs).

- ``redis_cluster``: the session's ``ManagedRedisCluster``. A test that kills a master
  ``revive``-s it before it ends (the node rejoins as a replica), so the next test finds
  3 masters with a replica each again.
- ``redis_cluster_url``: its ``redis+cluster://...`` URL, every key deleted before the test.
- ``zk_ensemble``: the session's ``ManagedZooKeeperEnsemble``; a test that kills a node
  restarts it before it ends.
- ``zk_ensemble_url``: a fresh root per test on the ensemble.

When a test using them fails, the nodes' logs are printed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from transactional.testing.redis_cluster import ManagedRedisCluster
from transactional.testing.zookeeper_ensemble import ManagedZooKeeperEnsemble

from fixtures_servers import test_failed


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ManagedRedisCluster]:
    """A Redis Cluster of 3 masters and 3 replicas for the session."""
    cluster = ManagedRedisCluster(masters=3, replicas=1)
    try:
        cluster.start()
    except BaseException:
        print(cluster.logs())
        cluster.destroy()
        raise
    yield cluster
    cluster.destroy()


@pytest.fixture
def redis_cluster_url(redis_cluster: ManagedRedisCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """The session cluster's URL, every master flushed at the start of the test and every
    killed node revived at its end."""
    redis_cluster.wait_ok()
    for port in redis_cluster.master_ports():
        c = redis_cluster._client(redis_cluster.node(port))
        c.flushall()
        c.connection_pool.disconnect()
    yield redis_cluster.url
    if test_failed(request):
        print(redis_cluster.logs())
    for n in redis_cluster.nodes:
        if not n.running:
            redis_cluster.revive(n)


@pytest.fixture(scope="session")
def zk_ensemble() -> Iterator[ManagedZooKeeperEnsemble]:
    """A 3-node ZooKeeper ensemble for the session."""
    ensemble = ManagedZooKeeperEnsemble(nodes=3)
    ensemble.start()
    yield ensemble
    ensemble.destroy()


@pytest.fixture
def zk_ensemble_url(zk_ensemble: ManagedZooKeeperEnsemble, request: pytest.FixtureRequest) -> Iterator[str]:
    """A coordination URL with a root of its own on the ensemble; killed nodes restarted after."""
    yield zk_ensemble.url(f"t-{uuid.uuid4().hex[:12]}")
    if test_failed(request):
        print(zk_ensemble.logs())
    for i, n in enumerate(zk_ensemble.nodes):
        if not n.running:
            zk_ensemble.restart(i)
    zk_ensemble.wait_quorum()
