"""Commits by reference (``state.staged``, ``transactional.engine.staged_commit``) on real
servers and a real Spark context: one Spark job per batch (the processing job stages each
task's counts; the commit applies them on every node and records the txid), exact counts,
and exactly once when the driver is SIGKILLed after every part is in but before the
record (one redis-server), or between the nodes of a Redis Cluster.

This file is also the driver the SIGKILL tests start: ``python tests/transactional/engine/test_staged_commit.py
COORDINATION STATE TOPOLOGY_ID`` (with ``TRIDENT_CRASH_AT``)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from state.committed import CommittedReader, committed_txid
from state.errors import LeadershipLostError
from state.map import Fence
from state.staged import StagedCounters

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
WORDS = [f"w{i}" for i in range(400)]


def batches(n: int = 6, lines: int = 60) -> list[list[str]]:
    """``n`` batches of ``lines`` lines, each line 5 words (a fixed, seedless pattern)."""
    return [[" ".join(WORDS[(b * 131 + i * 7 + j * 53) % len(WORDS)] for j in range(5)) for i in range(lines)]
            for b in range(n)]


def truth(bs: list[list[str]]) -> Counter[str]:
    return Counter(w for b in bs for line in b for w in line.split())


def read_counts(coord: str, state: str, tid: str, **opts) -> tuple[int, dict[str, int]]:
    txid, vals = CommittedReader(coord, state, tid, state_options=opts).read("counts", WORDS, "counter")
    return txid, {w: v for w, v in zip(WORDS, vals, strict=True) if v}


def run_driver(coord: str, state: str, tid: str, crash_at: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRIDENT_CRASH_AT": crash_at, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, __file__, coord, state, tid], env=env, capture_output=True, text=True,
                          timeout=180, check=False)


def test_each_batch_costs_one_spark_job_and_counts_exactly(spark_context, redis_url, zk_url):
    from transactional.engine.staged_commit import StagedCommitRun

    tid, bs = f"st{uuid.uuid4().hex[:8]}", batches()
    tracker = spark_context.statusTracker()
    run = StagedCommitRun(spark_context, zk_url, redis_url, tid, "counts", parallelism=2)
    res = run.run(bs)
    assert res.committed == [1, 2, 3, 4, 5, 6] and res.failures == []
    jobs = [j for t in range(1, 7) for j in tracker.getJobIdsForGroup(f"staged-{tid}-{t}-1")]
    assert len(jobs) == 6                                # the processing job only: no commit job
    assert read_counts(zk_url, redis_url, tid) == (6, dict(truth(bs)))
    again = StagedCommitRun(spark_context, zk_url, redis_url, tid, "counts").run(bs)
    assert again.committed == []                         # everything recorded: nothing to do
    assert read_counts(zk_url, redis_url, tid) == (6, dict(truth(bs)))


def test_staging_and_applying_refuse_an_old_epoch(redis_url):
    tid = f"st{uuid.uuid4().hex[:8]}"
    s = StagedCounters(redis_url, tid, "counts")
    s.backing.multi_put([], [], Fence(3, None))           # a driver of epoch 3 took over
    with pytest.raises(LeadershipLostError, match="newer epoch"):
        s.stage(1, 1, 0, 2, ["a"], [1])
    ref = s.stage(1, 1, 0, 3, ["a"], [1])
    with pytest.raises(LeadershipLostError, match="newer epoch"):
        s.apply(1, 2, [ref])
    s.apply(1, 3, [ref])
    assert s.backing.multi_get(["a"]) == [1]
    with pytest.raises(TypeError, match=r"key 'b' has delta 1.5; staged adds are integers"):
        s.stage(2, 1, 0, 3, ["b"], [1.5])


def test_driver_sigkilled_after_every_part_is_in_and_before_the_record_counts_once(spark_context, redis_url,
                                                                                    zk_url):
    tid, bs = f"st{uuid.uuid4().hex[:8]}", batches()
    coord = zk_url + "?session_timeout=1"
    p = run_driver(coord, redis_url, tid, "staged.before_record:txid=3")
    assert p.returncode == -9, p.stderr[-3000:]
    assert committed_txid(coord, tid) == 2
    from transactional.engine.staged_commit import StagedCommitRun

    res = StagedCommitRun(spark_context, coord, redis_url, tid, "counts").run(bs)
    assert res.committed == [3, 4, 5, 6] and res.epoch == 2
    assert read_counts(coord, redis_url, tid) == (6, dict(truth(bs)))


def test_driver_sigkilled_between_cluster_nodes_counts_once(spark_context, redis_cluster_url, zk_url):
    tid, bs = f"st{uuid.uuid4().hex[:8]}", batches()
    coord = zk_url + "?session_timeout=1"
    p = run_driver(coord, redis_cluster_url, tid, "staged.after_node:txid=3,node=0")
    assert p.returncode == -9, p.stderr[-3000:]
    assert committed_txid(coord, tid) == 2
    cut, counts = read_counts(coord, redis_cluster_url, tid)
    assert (cut, counts) == (2, dict(truth(bs[:2])))    # node 0 took txid 3; the cut hides it
    from transactional.engine.staged_commit import StagedCommitRun

    res = StagedCommitRun(spark_context, coord, redis_cluster_url, tid, "counts").run(bs)
    assert res.committed == [3, 4, 5, 6]
    assert read_counts(coord, redis_cluster_url, tid) == (6, dict(truth(bs)))


if __name__ == "__main__":
    from transactional.config import TopologyConfig
    from transactional.engine.spark import get_or_create_context
    from transactional.engine.staged_commit import StagedCommitRun

    sc = get_or_create_context(TopologyConfig(spark_master="local[2]", spark_ui=False))
    StagedCommitRun(sc, sys.argv[1], sys.argv[2], sys.argv[3], "counts").run(batches())
    sc.stop()
