"""Staged commits through ``run_topology`` (``TopologyConfig.staged_counters``,
``transactional.engine.staged_maps``): a Trident word count into ``trident.state.counters``
on a real redis-server and on the 3-master Redis Cluster, its driver SIGKILLed after the
processing tasks staged txid 2 and before anything was applied (``commit.before_write``),
after every node applied txid 4 and before it was recorded (``commit.before_record``), and
(on the cluster) after the first node applied txid 6; the last driver runs to the end and
every word is counted exactly once. The parts the driver killed at txid 2 staged are still
in Redis (never applied: they expire), which shows the counts went the staged way."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
import redis
from crash_plans import run_topology_file

from state.committed import CommittedReader
from transactional.config import TopologyConfig

from trident_kill_topology import expected

pytestmark = pytest.mark.integration

WORDS = sorted(expected())


def _staged_parts(url: str, pattern: str) -> list[str]:
    if url.startswith("redis+cluster://"):
        host, port = url.removeprefix("redis+cluster://").split(",")[0].split(":")
        c = redis.RedisCluster(host=host, port=int(port))
        try:
            return sorted(k.decode() for k in c.keys(pattern, target_nodes=redis.RedisCluster.ALL_NODES))
        finally:
            c.close()
    c = redis.Redis.from_url(url)
    try:
        return sorted(k.decode() for k in c.keys(pattern))
    finally:
        c.close()


def _run_with_kills(tmp_path: Path, zk_url: str, state_url: str, crashes: list[str]) -> str:
    tid = f"staged-{uuid.uuid4().hex[:8]}"

    def run(crash_at: str | None):
        return run_topology_file(tmp_path, "staged_kill_topology.py", zk_url, crash_at,
                                 {"TRIDENT_TEST_TOPOLOGY": tid},
                                 ["--state", state_url, "--set", "staged_counters=true"])

    for spec in crashes:
        p = run(spec)
        assert p.returncode == -signal.SIGKILL, (spec, p.returncode, p.stderr[-2000:])
        assert f"crash point {spec.split(':')[0]}" in p.stderr
    p = run(None)
    assert p.returncode == 0, p.stderr[-3000:]
    return tid


def test_staged_counters_count_exactly_once_through_driver_kills(tmp_path: Path, zk_url: str,
                                                                 redis_url: str) -> None:
    tid = _run_with_kills(tmp_path, zk_url, redis_url, ["commit.before_write:txid=2", "commit.before_record:txid=4"])
    txid, values = CommittedReader(zk_url, redis_url, tid).read("counts", WORDS, "counter")
    assert txid == 15
    assert dict(zip(WORDS, values, strict=True)) == expected()
    assert len(_staged_parts(redis_url, f"{tid}:counts:~staged:2:1:*")) == 2     # both tasks of attempt 1
    assert _staged_parts(redis_url, f"{tid}:counts:~staged:4:*") == []          # applied, then deleted


def test_staged_counters_on_a_redis_cluster_count_exactly_once_through_driver_kills(
        tmp_path: Path, zk_url: str, redis_cluster_url: str) -> None:
    tid = _run_with_kills(tmp_path, zk_url, redis_cluster_url,
                          ["commit.before_write:txid=2", "commit.before_record:txid=4", "staged.after_node:txid=6,node=0"])
    txid, values = CommittedReader(zk_url, redis_cluster_url, tid).read("counts", WORDS, "counter")
    assert txid == 15
    assert dict(zip(WORDS, values, strict=True)) == expected()
    assert _staged_parts(redis_cluster_url, f"{tid}:counts:~staged:2:1:*") != []


def test_staged_counters_are_refused_where_they_cannot_apply() -> None:
    with pytest.raises(ValueError, match=r"staged_counters=True stages counts where executors and the driver "
                                         r"both reach them: state must be redis:// or redis\+cluster://, not "
                                         r"memory://"):
        TopologyConfig(staged_counters=True)


def test_staged_counters_without_a_counter_map_are_refused_naming_the_topology(zk_url: str, redis_url: str) -> None:
    from spouts import MemoryTransactionalSpout
    from state.errors import ConfigError
    from transactional import Fields, run_topology
    from trident import Count, TridentTopology, state

    from trident_kill_topology import DATA, Split

    t = TridentTopology("staged-none")
    (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), 4))
     .each(Fields("sentence"), Split(), Fields("word")).group_by(Fields("word"))
     .persistent_aggregate(state.transactional("counts"), Count(), Fields("count")))
    cfg = TopologyConfig(executor="in-process", coordination=zk_url, state=redis_url, staged_counters=True)
    with pytest.raises(ConfigError, match=r"topology 'staged-none': staged_counters=True, but no stage of it adds "
                                          r"to a counter map"):
        run_topology(t.build(), cfg, max_batches=1)
    assert redis.Redis.from_url(redis_url).keys("staged-none:counts:*") == []
