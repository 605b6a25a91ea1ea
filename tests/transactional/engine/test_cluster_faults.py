"""Whole topologies (tests/transactional/engine/test_redis_engine.py's word count into a ``TransactionalMap`` and
an ``OpaqueMap``, a real Spark context) on the sharded servers, through real faults:

- a Redis Cluster master SIGKILLed mid-run: its replica takes over; every key counted once.
  What guarantees it is ``WAIT``: a txid is recorded only after every master's replica
  acknowledged its part (``wait_replicas=1``), so a failover cannot lose a recorded txid,
  and a write the old master took but its replica did not was never acknowledged: that
  batch fails and is replayed (docs/redis.md, "Replicas");
- slots migrated (``redis-cli --cluster reshard``) while batches commit: nothing changes;
- the ZooKeeper ensemble's leader, then a follower, SIGKILLed mid-run: the driver keeps its
  session and lock through each election; nothing lost or doubled.
"""

from __future__ import annotations

import threading

import pytest

from state.map import OpaqueMap, TransactionalMap, open_map_backing

from test_redis_engine import WORDS, build_topology, config, exact, make_data, new_id

pytestmark = pytest.mark.integration


def cluster_counts(url: str, tid: str) -> tuple[dict, dict]:
    """(TransactionalMap, OpaqueMap) counts read back from the cluster."""
    t = TransactionalMap(open_map_backing(url, f"{tid}:tcounts", fence_scope=tid), "tcounts")
    o = OpaqueMap(open_map_backing(url, f"{tid}:ocounts", fence_scope=tid), "ocounts")
    return ({w: n for w, n in zip(WORDS, t.multi_get(WORDS), strict=True) if n is not None},
            {w: n for w, n in zip(WORDS, o.multi_get(WORDS), strict=True) if n is not None})


def test_a_master_sigkilled_mid_run_counts_every_key_once(spark_context, redis_cluster, redis_cluster_url):
    from transactional import run_topology

    data, tid = make_data(31, per_partition=40), new_id("master-kill")
    done: list = []

    def failover_then_revive(victim, port) -> None:
        redis_cluster.wait_failover(port)                # a replica took the slots over
        redis_cluster.revive(victim)                     # back as the new master's replica
        done.append(port)

    helper: list[threading.Thread] = []

    def on_commit(txid, result):
        if txid == 3:
            victim, port = redis_cluster.kill_master_now(0)
            helper.append(threading.Thread(target=failover_then_revive, args=(victim, port), daemon=True))
            helper[0].start()

    result = run_topology(build_topology(tid, data), config(redis_cluster_url, max_attempts=10),
                          spark_context=spark_context, on_commit=on_commit)
    helper[0].join(90)
    assert done and result.last_txid == 10
    assert cluster_counts(redis_cluster_url, tid) == (exact(data), exact(data))


def test_slots_migrated_mid_run_change_nothing(spark_context, redis_cluster, redis_cluster_url):
    from transactional import run_topology

    data, tid = make_data(32, per_partition=40), new_id("reshard")
    before = redis_cluster.slots()
    mover: list[threading.Thread] = []

    def on_commit(txid, result):
        if txid == 2:
            mover.append(threading.Thread(target=redis_cluster.reshard, args=(2000, 0, 1), daemon=True))
            mover[0].start()

    result = run_topology(build_topology(tid, data), config(redis_cluster_url, max_attempts=10),
                          spark_context=spark_context, on_commit=on_commit)
    mover[0].join(120)
    assert not mover[0].is_alive() and redis_cluster.slots() != before and result.last_txid == 10
    assert cluster_counts(redis_cluster_url, tid) == (exact(data), exact(data))


def test_zookeeper_leader_then_follower_sigkilled_mid_run(spark_context, redis_url, zk_ensemble, zk_ensemble_url):
    from transactional import run_topology

    from test_redis_engine import stored_counts

    data, tid = make_data(33, per_partition=40), new_id("zk-ensemble")
    killed: list[str] = []

    def on_commit(txid, result):
        if txid == 3:
            leader = zk_ensemble.leader()
            zk_ensemble.kill(leader)                     # an election among the other two
            killed.append(f"leader {leader}")
        elif txid == 6:
            zk_ensemble.restart(int(killed[0].split()[1]))
            zk_ensemble.wait_quorum()
            follower = zk_ensemble.followers()[0]
            zk_ensemble.kill(follower)
            killed.append(f"follower {follower}")

    result = run_topology(build_topology(tid, data), config(redis_url, coordination=zk_ensemble_url,
                                                            max_attempts=10),
                          spark_context=spark_context, on_commit=on_commit)
    assert len(killed) == 2 and result.last_txid == 10, (killed, result.failures)
    assert stored_counts(redis_url, tid) == (exact(data), exact(data))
