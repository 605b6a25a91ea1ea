"""Reference workload for core Storm topologies (at least once): the seed's word count.

    python benchmarks/core_wordcount.py [--sentences 200000] [--batch 5000] [--master local[2]]
           [--mode reliable|unreliable|stateful|all] [--state memory://|local-redis|redis://...]
           [--executor spark|in-process] [--ackers 1] [--ttl-secs 3600]

``reliable``: MemorySpout (msg ids) -> SplitSentence (rich, each word anchored) -> WordCount
(rich, fields grouping, acks each word); every sentence's tree is tracked by the acker,
and the spout hears ack once per sentence. ``unreliable``: the same with ``ackers=0``
(nothing tracked: the cost of tracking is the difference). ``stateful``: WordCount is the
seed's WordCountBolt on KeyValueState (default ``--state local-redis``: a private
redis-server), checkpointed every ``--checkpoint-ms``; its counts are checked against the
truth (``exact``); ``--ttl-secs`` gives its KeyValueState a time to live (the cost of TTL on
the checkpoint: compare the commit latency with and without). Prints one JSON line per mode: sentences and words per second, the
spout tuple latency (emit to ack) and the micro-batch commit latency, p50/p99.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

from spouts import MEMORY_SPOUT_LOGS, MemorySpout
from transactional import BaseRichBolt, BaseStatefulBolt, Fields, TopologyBuilder, TopologyConfig, run_topology
from transactional.engine.spark import get_or_create_context
from transactional.result import percentile
from transactional.testing import make_corpus


class SplitSentence(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.emit, self.ack = collector.emit, collector.ack

    def execute(self, tuple):
        for word in tuple[0].split():
            self.emit((word,), tuple)
        self.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class WordCount(BaseRichBolt):
    def prepare(self, conf, context, collector):
        self.ack, self.counts = collector.ack, Counter()

    def execute(self, tuple):
        self.counts[tuple[0]] += 1
        self.ack(tuple)


class WordCountBolt(BaseStatefulBolt):
    def prepare(self, conf, context, collector):
        self.ack = collector.ack

    def init_state(self, state):
        self.counts = state

    def execute(self, tuple):
        w = tuple[0]
        self.counts.put(w, self.counts.get(w, 0) + 1)
        self.ack(tuple)


def build(tid, corpus, mode, parallelism, ttl_secs=None):
    b = TopologyBuilder(tid)
    b.set_spout("sentences", MemorySpout(corpus, Fields("sentence"), name=tid, per_call=1000), 1)
    b.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    count = WordCountBolt() if mode == "stateful" else WordCount()
    declared = b.set_bolt("count", count, parallelism).fields_grouping("split", Fields("word"))
    if mode == "stateful" and ttl_secs is not None:
        declared.add_configuration("topology.state.ttl.secs", ttl_secs)
    return b


def tuple_latencies(tid):
    first, lat = {}, []
    for e, m, _, t in MEMORY_SPOUT_LOGS[tid]:
        if e == "emit":
            first.setdefault(m, t)
        elif e == "ack":
            lat.append(t - first[m])
    return lat


def run_one(args, corpus, mode, state):
    cfg = TopologyConfig(spark_master=args.master, spark_ui=False, executor=args.executor, state=state,
                         progress=False, message_timeout_secs=120, micro_batch_size=args.batch,
                         ackers=0 if mode == "unreliable" else args.ackers,
                         checkpoint_interval_ms=args.checkpoint_ms)
    if args.executor == "spark":
        get_or_create_context(cfg).parallelize(range(4), 2).count()   # workers up before timing
    tid = f"bench-core-{mode}-{int(time.time())}"
    t0 = time.monotonic()
    r = run_topology(build(tid, corpus, mode, args.parallelism, args.ttl_secs), cfg)
    wall = time.monotonic() - t0
    words = sum(s.count(" ") + 1 for s in corpus)
    lat = tuple_latencies(tid)
    line = {"benchmark": "core_wordcount", "mode": mode, "sentences": len(corpus), "words": words,
            "wall_secs": round(wall, 2), "sentences_per_sec": round(len(corpus) / wall),
            "words_per_sec": round(words / wall), "acked": r.acked.get("sentences"), "failed": r.failed.get("sentences"),
            "tuple_latency_p50_ms": round(percentile(lat, 50) * 1000, 1) if lat else None,
            "tuple_latency_p99_ms": round(percentile(lat, 99) * 1000, 1) if lat else None,
            "commit_latency_p50_ms": round(r.latency_ms(50), 1), "commit_latency_p99_ms": round(r.latency_ms(99), 1),
            "micro_batches": r.batches_committed, "micro_batch_size": args.batch, "ackers": cfg.ackers,
            "parallelism": args.parallelism, "executor": args.executor, "master": args.master}
    if mode == "stateful":
        got = r.key_value_state("count")
        line.update({"state": cfg.redacted()["state"], "checkpoints": r.checkpoints,
                     "checkpoint_interval_ms": args.checkpoint_ms, "ttl_secs": args.ttl_secs,
                     "exact": got == dict(Counter(w for s in corpus for w in s.split()))})
    print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=5000, help="micro_batch_size: spout tuples per micro-batch")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--executor", default="spark", choices=["spark", "in-process"])
    ap.add_argument("--mode", default="all", choices=["reliable", "unreliable", "stateful", "all"])
    ap.add_argument("--ackers", type=int, default=1)
    ap.add_argument("--checkpoint-ms", type=int, default=1000)
    ap.add_argument("--state", default="local-redis", help="for --mode stateful: memory://, redis://... or local-redis")
    ap.add_argument("--ttl-secs", type=float, default=None, help="for --mode stateful: the state's time to live")
    args = ap.parse_args()
    corpus = make_corpus(args.sentences)
    server = None
    state = args.state
    modes = ["reliable", "unreliable", "stateful"] if args.mode == "all" else [args.mode]
    if "stateful" in modes and state == "local-redis":
        from transactional.testing import ManagedRedis

        server = ManagedRedis(appendonly=False)
        server.start()
        state = server.url
    try:
        for mode in modes:
            run_one(args, corpus, mode, state if mode == "stateful" else "memory://")
    finally:
        if server is not None:
            server.destroy()


if __name__ == "__main__":
    main()
