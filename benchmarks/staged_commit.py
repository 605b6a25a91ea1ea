"""Commit phase by reference (``state.staged``) against the driver-collected commit, by keys
per batch, tasks and shards; and words/s by executors and shards for the scale model
(docs/performance.md, "Scale model").

    flock /tmp/heavy.lock python benchmarks/staged_commit.py --part commit [--batches 6]
    flock /tmp/heavy.lock python benchmarks/staged_commit.py --part throughput [--words 400000]

Starts its own redis-server, a ZooKeeper and a ``ManagedRedisCluster`` (3 masters, a replica
each; 2 and 1 shards by moving every slot of a master to master 0, ``redis-cli --cluster
reshard``). ``local[N]``. One JSON line per case; every count checked (``exact``).

``--part commit`` (one txid in flight, so the commit is measured alone):
- ``staged``: the processing job's tasks stage their counts; the commit applies them on
  every node at once and records the txid (``StagedCommitRun``);
- ``driver``: the processing job returns the partial counts; the driver merges them and
  writes them with ``CounterMap`` (one script per node), then records the txid;
- ``job_floor_ms``: a trivial Spark job of as many tasks: the least a second Spark job per
  commit (commits on executors today) would add.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import Counter
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from state.base import open_transactional_state  # noqa: E402
from state.committed import CommittedReader  # noqa: E402
from state.map import CounterMap, open_map_backing  # noqa: E402
from transactional.config import TopologyConfig  # noqa: E402
from transactional.engine.spark import get_or_create_context  # noqa: E402
from transactional.engine.staged_commit import StagedCommitRun, count_words  # noqa: E402
from transactional.engine.store import CoordinatorStore  # noqa: E402
from transactional.result import percentile  # noqa: E402
from transactional.testing.redis import ManagedRedis  # noqa: E402
from transactional.testing.redis_cluster import ManagedRedisCluster  # noqa: E402
from transactional.testing.zookeeper import ManagedZooKeeper  # noqa: E402


def make_batches(keys: int, batches: int, words_per_key: int = 2, per_line: int = 10) -> list[list[str]]:
    """``batches`` batches, each holding every one of ``keys`` words ``words_per_key`` times."""
    words = [f"k{i % keys}" for i in range(keys * words_per_key)]
    lines = [" ".join(words[i:i + per_line]) for i in range(0, len(words), per_line)]
    return [lines] * batches


def check(coord: str, url: str, tid: str, bs: list[list[str]], opts: dict[str, Any]) -> bool:
    truth = Counter(w for b in bs for line in b for w in line.split())
    keys = list(truth)
    txid, got = CommittedReader(coord, url, tid, state_options=opts).read("counts", keys, "counter")
    return txid == len(bs) and got == [truth[k] for k in keys]


def driver_run(sc: Any, coord: str, url: str, tid: str, bs: list[list[str]], tasks: int,
               opts: dict[str, Any]) -> list[float]:
    """The driver-collected commit, one txid at a time; returns each commit's seconds."""
    state = open_transactional_state(coord, tid)
    state.acquire_lock("bench", wait=True, timeout=30)
    store = CoordinatorStore(state)
    epoch = store.take_epoch()
    m = CounterMap(open_map_backing(url, f"{tid}:counts", fence_scope=tid, **opts), "counts")
    out = []
    for txid, b in enumerate(bs, 1):
        parts = sc.parallelize(b, tasks).mapPartitions(lambda rows: [count_words(rows)]).collect()
        t0 = time.monotonic()
        merged: Counter[str] = Counter()
        for ks, ds in parts:
            merged.update(dict(zip(ks, ds, strict=True)))
        m.begin_commit(txid, 1, epoch=epoch)
        m.multi_combine(list(merged), list(merged.values()), "sum")
        m.commit(txid)
        store.record_commit(txid, None, None)
        out.append(time.monotonic() - t0)
    state.release_lock()
    state.close()
    return out


def job_floor(sc: Any, tasks: int, n: int = 7) -> float:
    secs = []
    for _ in range(n):
        t0 = time.monotonic()
        sc.parallelize(range(tasks), tasks).mapPartitions(lambda it: [0]).collect()
        secs.append(time.monotonic() - t0)
    return percentile(secs, 50)


def ms(xs: list[float], p: int) -> float:
    return round(percentile(xs, p) * 1000, 1)


def commit_cases(args: argparse.Namespace, sc: Any, coord: str, url: str, shards: int | str,
                 opts: dict[str, Any]) -> None:
    cases = [(k, 2) for k in (1000, 10_000, 30_000)] + [(10_000, 1), (10_000, 4)]
    for keys, tasks in cases:
        bs = make_batches(keys, args.batches)
        for path in ("staged", "driver"):
            tid = f"bsc{uuid.uuid4().hex[:8]}"
            if path == "staged":
                res = StagedCommitRun(sc, coord, url, tid, "counts", parallelism=tasks, max_in_flight=1,
                                      state_options=opts).run(bs)
                secs, proc = res.commit_secs, res.processing_secs
            else:
                secs, proc = driver_run(sc, coord, url, tid, bs, tasks, opts), []
            print(json.dumps({"benchmark": "staged_commit", "part": "commit", "path": path, "shards": shards,
                              "keys_per_batch": keys, "tasks": tasks, "batches": len(bs),
                              "commit_p50_ms": ms(secs[1:], 50), "commit_p99_ms": ms(secs[1:], 99),
                              "processing_p50_ms": ms(proc[1:], 50) if proc else None,
                              "job_floor_ms": round(job_floor(sc, tasks) * 1000, 1),
                              "exact": check(coord, url, tid, bs, opts)}), flush=True)


def throughput_cases(args: argparse.Namespace, sc: Any, executors: int, coord: str, url: str, shards: int | str,
                     opts: dict[str, Any]) -> None:
    """One run with a txid at a time (each cost alone: the model's inputs), then one with
    ``max_in_flight=3`` (the words/s the model predicts)."""
    keys = args.keys
    bs = make_batches(keys, args.batches, max(1, args.words // keys))
    words = sum(len(line.split()) for b in bs for line in b)
    out: dict[str, Any] = {"benchmark": "staged_commit", "part": "throughput", "executors": executors,
                           "shards": shards, "keys_per_batch": keys, "words_per_batch": words // len(bs),
                           "batches": len(bs)}
    for inflight, tag in ((1, "alone"), (3, "pipelined")):
        tid = f"bst{uuid.uuid4().hex[:8]}"
        res = StagedCommitRun(sc, coord, url, tid, "counts", parallelism=executors, max_in_flight=inflight,
                              state_options=opts).run(bs)
        out[f"{tag}_words_per_sec"] = round(words / res.seconds)
        out[f"{tag}_commit_p50_ms"] = ms(res.commit_secs[1:], 50)
        out[f"{tag}_processing_p50_ms"] = ms(res.processing_secs[1:], 50)
        out[f"{tag}_exact"] = check(coord, url, tid, bs, opts)
    out["job_floor_ms"] = round(job_floor(sc, executors) * 1000, 1)
    print(json.dumps(out), flush=True)


def shard_configs(cluster: ManagedRedisCluster, single: ManagedRedis) -> Any:
    """Yield (shards, url, options): one redis-server, then the cluster at 3, 2 and 1 shards."""
    yield "1-server", single.url, {}
    opts = {"wait_replicas": 1}
    yield 3, cluster.url, opts
    for shards in (2, 1):
        for port in cluster.master_ports():            # no keys to move: the reshard only moves slots
            c = cluster._client(cluster.node(port))
            c.flushall()
            c.connection_pool.disconnect()
        ranges, ports = cluster.slots(), cluster.master_ports()
        src = len(ports) - 1
        n = sum(b - a + 1 for a, b, p in ranges if p == ports[src])
        cluster.reshard(n, src, 0)
        yield shards, cluster.url, opts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("commit", "throughput"), default="commit")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--keys", type=int, default=30_000, help="distinct keys a batch (throughput)")
    ap.add_argument("--words", type=int, default=400_000, help="words a batch (throughput)")
    ap.add_argument("--executors", type=int, default=2, help="local[N] (throughput; commit: 2)")
    args = ap.parse_args()
    zk, single = ManagedZooKeeper(), ManagedRedis(appendonly=False)
    cluster = ManagedRedisCluster(masters=3, replicas=1)
    for s in (zk, single, cluster):
        s.start()
    try:
        coord = zk.url(f"bench-{uuid.uuid4().hex[:6]}")
        n = 2 if args.part == "commit" else args.executors
        sc = get_or_create_context(TopologyConfig(spark_master=f"local[{n}]", spark_ui=False))
        sc.parallelize(range(n), n).count()
        for shards, url, opts in shard_configs(cluster, single):
            if args.part == "commit":
                commit_cases(args, sc, coord, url, shards, opts)
            else:
                throughput_cases(args, sc, n, coord, url, shards, opts)
        sc.stop()
    finally:
        cluster.destroy()
        single.destroy()
        zk.destroy()


if __name__ == "__main__":
    main()
