"""Trident's word count (benchmarks/wordcount.py's ``build_trident``) with its counts on one
redis-server and on a Redis Cluster of 3 masters with a replica each (``redis+cluster://``),
every count checked.

    flock /tmp/heavy.lock python benchmarks/sharded_wordcount.py [--sentences 100000] [--batch 20000]
        [--flavours transactional,counters] [--wait-replicas 1] [--staged off,on]

``--staged on`` runs the counters flavour with ``TopologyConfig(staged_counters=True)``
(docs/redis.md, "Staged commits"; other flavours are skipped for it).

Starts its own redis-server and ``ManagedRedisCluster``; ``local[2]``. Prints one JSON line
per (state, flavour): words/s, the commit phase's p50/p99, keys per batch, exactness.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transactional import TopologyConfig, run_topology  # noqa: E402
from transactional.engine.spark import get_or_create_context  # noqa: E402
from transactional.result import percentile  # noqa: E402
from transactional.testing import make_corpus  # noqa: E402
from transactional.testing.redis import ManagedRedis  # noqa: E402
from transactional.testing.redis_cluster import ManagedRedisCluster  # noqa: E402

from wordcount import build_trident  # noqa: E402 - the reference topology


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--flavours", default="transactional,counters")
    ap.add_argument("--wait-replicas", type=int, default=1)
    ap.add_argument("--staged", default="off", help="off, on, or off,on (counters only)")
    args = ap.parse_args()
    cluster, single = ManagedRedisCluster(masters=3, replicas=1), ManagedRedis(appendonly=False)
    cluster.start()
    single.start()
    try:
        corpus = make_corpus(args.sentences)
        truth = Counter(w for s in corpus for w in s.split())
        for shards, url, opts in ((1, single.url, {}), (3, cluster.url, {"wait_replicas": args.wait_replicas})):
            for flavour in args.flavours.split(","):
                for staged in args.staged.split(","):
                    if staged == "off" or flavour == "counters":
                        run(args, corpus, truth, shards, url, opts, flavour, staged == "on")
    finally:
        cluster.destroy()
        single.destroy()


def run(args, corpus, truth, shards, url, opts, flavour, staged=False) -> None:
    cfg = TopologyConfig(spark_master="local[2]", spark_ui=False, state=url, state_options=opts, progress=False,
                         max_spout_pending=3, message_timeout_secs=600, staged_counters=staged)
    sc = get_or_create_context(cfg)
    sc.parallelize(range(4), 2).count()
    topo = build_trident(f"bench-sharded-{flavour}-{int(time.time())}", corpus, args.batch, 2, 1, False, flavour)
    t0 = time.monotonic()
    r = run_topology(topo, cfg)
    wall = time.monotonic() - t0
    keys = list(truth)
    got = r.map_state("word-counts").multi_get(keys)
    words = sum(truth.values())
    print(json.dumps({
        "benchmark": "sharded_wordcount", "state": "redis" if shards == 1 else "redis-cluster",
        "shards": shards, "flavour": flavour, "staged": staged, "words": words, "keys_verified": len(keys),
        "exact": got == [truth[k] for k in keys], "batches": r.batches_committed,
        "batch_sentences": args.batch, "words_per_sec": round(words / wall),
        "commit_phase_p50_ms": round(percentile(r.commit_phase_secs, 50) * 1000, 1),
        "commit_phase_p99_ms": round(percentile(r.commit_phase_secs, 99) * 1000, 1),
        "wait_replicas": opts.get("wait_replicas")}), flush=True)


if __name__ == "__main__":
    main()
