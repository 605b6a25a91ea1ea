"""Map states, ``KeyValueState`` and the reader through the cut on a real Redis Cluster
(``ManagedRedisCluster``: 3 masters, 3 replicas, shared by the session): keys spread
over every master, each node's part of a txid atomic and fenced per slot, and what a
reader sees while one node has taken a txid and another has not (docs/redis.md)."""

from __future__ import annotations

import uuid

import pytest
from redis.crc import key_slot

from state.base import open_transactional_state
from state.committed import CommittedReader
from state.errors import ConfigError, LeadershipLostError
from state.keyvalue import open_key_value_state
from state.map import CounterMap, Fence, MapWrite, OpaqueMap, TransactionalMap, open_map_backing

pytestmark = pytest.mark.integration

KEYS = [f"w{i}" for i in range(300)]


def _tid() -> str:
    return f"t{uuid.uuid4().hex[:8]}"


def _keys_per_master(cluster) -> list[int]:
    out = []
    for port in cluster.master_ports():
        c = cluster._client(cluster.node(port))
        out.append(c.dbsize())
        c.connection_pool.disconnect()
    return out


def _node_of(ranges: list[tuple[int, int, int]], masters: list[int], key: str) -> int:
    """The index (in ``masters``) of the master serving ``key`` by the slot ``ranges``."""
    slot = key_slot(key.encode())
    return next(masters.index(p) for a, b, p in ranges if a <= slot <= b)


def test_maps_spread_over_every_master_and_a_replay_or_an_old_epoch_changes_nothing(redis_cluster, redis_cluster_url):
    tid = _tid()
    backing = open_map_backing(redis_cluster_url, f"{tid}:counts", fence_scope=tid)
    backing.multi_put([], [], Fence(2, None))            # the driver's epoch raised on every slot
    t, o = TransactionalMap(backing, "counts"), OpaqueMap(open_map_backing(
        redis_cluster_url, f"{tid}:ocounts", fence_scope=tid), "ocounts")
    c = CounterMap(open_map_backing(redis_cluster_url, f"{tid}:ccounts", fence_scope=tid), "ccounts")
    for txid in (1, 1, 2):                               # txid 1 twice: a replay
        for m in (t, o, c):
            m.begin_commit(txid, epoch=2)
            if isinstance(m, CounterMap):
                m.add(KEYS, [txid] * len(KEYS))
            else:
                m.multi_combine(KEYS, [txid] * len(KEYS), "sum")
            m.commit(txid)
    assert [t.multi_get(KEYS), o.multi_get(KEYS), c.multi_get(KEYS)] == [[3] * 300] * 3
    per_master = _keys_per_master(redis_cluster)
    assert min(per_master) > 200, per_master         # 900 data keys + per-slot records, on every master

    t.begin_commit(3, epoch=1)                           # an older driver
    t.multi_combine(KEYS, [100] * len(KEYS), "sum")
    with pytest.raises(LeadershipLostError, match="newer epoch"):
        t.commit(3)
    assert TransactionalMap(backing, "counts").multi_get(KEYS) == [3] * 300


def test_a_reader_through_the_cut_sees_only_recorded_txids_while_a_node_lags(redis_cluster, redis_cluster_url,
                                                                             zk_url):
    tid = _tid()
    coord = open_transactional_state(zk_url, tid)
    maps = {kind: open_map_backing(redis_cluster_url, f"{tid}:{kind}", fence_scope=tid)
            for kind in ("transactional", "opaque", "counter")}
    classes = {"transactional": TransactionalMap, "opaque": OpaqueMap, "counter": CounterMap}
    for kind, b in maps.items():                         # txid 1 taken by every node and recorded
        m = classes[kind](b, kind)
        m.begin_commit(1, epoch=1)
        m.add(KEYS, [1] * 300) if kind == "counter" else m.multi_combine(KEYS, [1] * 300, "sum")
        m.commit(1)
    coord.set("committed", {"txid": 1})
    ranges, masters = redis_cluster.slots(), redis_cluster.master_ports()
    on_a = [k for k in KEYS if _node_of(ranges, masters, f"{tid}:transactional:{k}") == 0]
    for kind, b in maps.items():                         # txid 2: only node 0 takes its part
        mine = [k for k in KEYS if _node_of(ranges, masters, f"{tid}:{kind}:{k}") == 0]
        fence = Fence(1, 2, 1)
        if kind == "counter":
            b.write([MapWrite(kind, b, "add", mine, b.encode_deltas(mine, [10] * len(mine)), fence)])
        else:
            val = ({"txid": 2, "val": 11, "prev": 1} if kind == "transactional"
                   else {"txid": 2, "attempt": 1, "curr": 11, "prev": 1})
            b.write([MapWrite(kind, b, "put", mine, b.encode_values([val] * len(mine)), fence)])
    assert 50 < len(on_a) < 250
    plain = TransactionalMap(maps["transactional"], "transactional").multi_get(KEYS)
    assert sorted(set(plain)) == [1, 11]                 # a plain read mixes txid 2 (node 0) and txid 1
    assert [k for k, v in zip(KEYS, plain, strict=True) if v == 11] == on_a
    reader = CommittedReader(zk_url, redis_cluster_url, tid)
    for kind in maps:
        assert reader.read(kind, KEYS, kind) == (1, [1] * 300), kind
    coord.set("committed", {"txid": 2})                  # what the record says now... (the test wrote it)
    assert reader.read("transactional", on_a, "transactional") == (2, [11] * len(on_a))
    coord.close()


def test_key_value_state_commits_recovers_and_is_fenced_on_the_cluster(redis_cluster_url):
    tid = _tid()
    s = open_key_value_state(redis_cluster_url, f"{tid}:counter:0", fence_scope=tid, epoch=1)
    s.raise_fence()
    s.put("cat", 1), s.put("dog", 2)
    s.prepare_commit(1), s.commit(1)
    s.put("cat", 5)
    s.prepare_commit(2)                                  # the crash: prepared, not committed
    r = open_key_value_state(redis_cluster_url, f"{tid}:counter:0", fence_scope=tid, epoch=2)
    r.raise_fence()
    assert (r.prepared_txid(), r.committed_txid(), r.get("cat")) == (2, 1, 5)     # reads see the prepared
    r.commit(2)
    assert (r.get("cat"), r.get("dog"), r.committed_txid()) == (5, 2, 2)
    old = open_key_value_state(redis_cluster_url, f"{tid}:counter:0", fence_scope=tid, epoch=1)
    old.put("dog", 9)
    with pytest.raises(LeadershipLostError):
        old.prepare_commit(3)                            # the old driver is fenced off
    assert open_key_value_state(redis_cluster_url, f"{tid}:counter:0").get("dog") == 2


def test_cluster_urls_are_checked_before_anything_is_opened() -> None:
    with pytest.raises(ConfigError, match="not host:port"):
        open_map_backing("redis+cluster://127.0.0.1", "t:counts")
    with pytest.raises(ConfigError, match="only db 0"):
        open_map_backing("redis+cluster://127.0.0.1:7000/3", "t:counts")
    with pytest.raises(ConfigError, match="brace"):
        open_map_backing("redis+cluster://127.0.0.1:7000", "t{x}:counts")


def _master0_keys(cluster, tid: str, name: str) -> list[str]:
    ranges, masters = cluster.slots(), cluster.master_ports()
    return [k for k in KEYS if _node_of(ranges, masters, f"{tid}:{name}:{k}") == 0]


@pytest.mark.parametrize("wait_replicas", [1, 0])
def test_a_failover_loses_no_recorded_txid_when_commits_wait_for_the_replica(redis_cluster, redis_cluster_url,
                                                                              wait_replicas):
    """The replica of master 0 is cut off (SIGSTOP, its link dropped by the master), a txid
    is written, master 0 is SIGKILLed and the replica takes over without that write. Waiting
    for the replica (the default), the write was never acknowledged: the batch failed, and
    its replay after the failover (and a replica back) counts it once. Without waiting
    (``wait_replicas=0``) the write was acknowledged and is lost: a commit recorded on that
    acknowledgement would have lost it."""
    from state.errors import StateUnavailableError

    tid = _tid()
    b = open_map_backing(redis_cluster_url, f"{tid}:counts", fence_scope=tid, wait_replicas=wait_replicas,
                         wait_timeout=0.3, retry_timeout=1.0)
    keys = _master0_keys(redis_cluster, tid, "counts")
    m = TransactionalMap(b, "counts")
    m.begin_commit(1, epoch=1)
    m.multi_combine(keys, [1] * len(keys), "sum")
    m.commit(1)
    redis_cluster.wait_replicated()
    replica = redis_cluster.replica_of(0)
    redis_cluster.pause(replica)
    master = redis_cluster._client(redis_cluster.node(redis_cluster.master_ports()[0]))
    master.execute_command("CLIENT", "KILL", "TYPE", "replica")
    master.connection_pool.disconnect()
    try:
        m.begin_commit(2, epoch=1)
        m.multi_combine(keys, [1] * len(keys), "sum")
        if wait_replicas:
            with pytest.raises(StateUnavailableError, match=r"only 0 of 1 replicas took the write within 0.3 s"):
                m.commit(2)
        else:
            m.commit(2)                                  # acknowledged by the master alone
        victim, port = redis_cluster.kill_master_now(0)
    finally:
        redis_cluster.resume(replica)
    redis_cluster.wait_failover(port)
    m2 = TransactionalMap(open_map_backing(redis_cluster_url, f"{tid}:counts", fence_scope=tid,
                                           wait_replicas=wait_replicas), "counts")
    assert m2.multi_get(keys) == [1] * len(keys)         # txid 2's write is gone with the old master
    if wait_replicas:
        redis_cluster.revive(victim)                     # a replica again for the new master
        m2.begin_commit(2, epoch=1)                      # the replay of the failed batch
        m2.multi_combine(keys, [1] * len(keys), "sum")
        m2.commit(2)
        assert m2.multi_get(keys) == [2] * len(keys)
