"""The coordinator's state on a 3-node ZooKeeper ensemble (``ManagedZooKeeperEnsemble``):
the leader SIGKILLed, then (once it is back) a follower; the lock holder keeps its lock
and session through each election, and every write is there exactly once."""

from __future__ import annotations

import uuid

import pytest

from state.base import open_transactional_state

pytestmark = pytest.mark.integration


def test_the_lock_holder_rides_out_a_leader_and_a_follower_sigkill(zk_ensemble, zk_ensemble_url):
    tid = f"t{uuid.uuid4().hex[:8]}"
    s = open_transactional_state(zk_ensemble_url, tid)
    s.acquire_lock("driver-1", wait=False, timeout=10)
    for txid in range(1, 4):
        s.set(f"meta/{txid}", {"txid": txid})
    leader = zk_ensemble.leader()
    zk_ensemble.kill(leader)                             # an election among the two left
    for txid in range(4, 7):
        s.set(f"meta/{txid}", {"txid": txid})
    s.check_lock()
    zk_ensemble.restart(leader)
    zk_ensemble.wait_quorum()
    follower = zk_ensemble.followers()[0]
    zk_ensemble.kill(follower)
    for txid in range(7, 10):
        s.set(f"meta/{txid}", {"txid": txid})
    s.check_lock()
    assert s.lock_holder() == "driver-1"
    other = open_transactional_state(zk_ensemble_url, tid)
    assert sorted(int(c) for c in other.children("meta")) == list(range(1, 10))
    assert [other.get(f"meta/{t}") for t in range(1, 10)] == [{"txid": t} for t in range(1, 10)]
    other.close()
    s.release_lock()
    s.close()
