"""Reference word count read from Kafka: the corpus of benchmarks/wordcount.py produced to
a 4-partition topic, counted exactly once into Redis by a KafkaTransactionalSpout topology.

    python benchmarks/kafka_wordcount.py [--sentences 1000000] [--batch 50000] [--master local[2]]
        [--bootstrap HOST:PORT] [--topic T] [--produce-only] [--redis redis://HOST:PORT/0] [--opaque]
        [--api bolt|trident|trident-columnar]

``--api trident-columnar``: Trident with the spout's partition reads as Arrow record
batches, ``map_batches`` split (Arrow kernels), ``group_by(word).persistent_aggregate(
counters, Count())``; ``--api trident``: the same with ``each(Split)``, one tuple per word;
``--api bolt`` (default): the bolt API's split-count below. ``--produce-only`` fills a new
topic and prints its name (then ``--topic`` reads it: several runs on one topic).

Starts its own Tansu broker unless ``--bootstrap`` is given, and its own ``redis-server``
unless ``--redis`` is given. Topology: Kafka spout (``--parallelism`` tasks over 4
partitions, ``--batch / 4`` records per partition and batch) -> split (counts its share of
the batch, local-or-shuffle) -> commit (committer, fields on word, a TransactionalMap in
Redis; OpaqueMap with ``--opaque``). Every count is checked against the corpus. Prints one
JSON line: words/s, commit latency p50/p99 and the configuration.

``--parallelism`` defaults to 2, what a user writes on 2 cores: while several batches are
in flight the engine runs each batch's emitter tasks in one Spark task
(``transactional.engine.task_groups``), so a second task no longer adds its fixed cost per
batch (docs/performance.md, "Throughput and latency by setting").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout  # noqa: E402
from state.map import OpaqueMap, TransactionalMap  # noqa: E402
from state.redis import RedisMapBacking  # noqa: E402
from transactional import Fields, TopologyConfig, TransactionalTopologyBuilder, run_topology  # noqa: E402
from transactional.engine.spark import get_or_create_context  # noqa: E402
from transactional.result import percentile  # noqa: E402
from transactional.testing.kafka import ManagedKafka, create_topic, produce  # noqa: E402

from wordcount import CommitCounts, SplitCount, make_corpus  # noqa: E402 - the reference workload

PARTITIONS = 4


class OpaqueCommitCounts(CommitCounts):
    def prepare(self, conf, context, collector, attempt):
        self.counts = {}
        self.map = context.map_state("word-counts", opaque=True)


def build(topology_id: str, bootstrap: str, topic: str, batch: int, parallelism: int, committers: int,
          opaque: bool) -> TransactionalTopologyBuilder:
    cls = OpaqueKafkaTransactionalSpout if opaque else KafkaTransactionalSpout
    spout = cls(bootstrap, topic, max_records_per_partition=max(1, batch // PARTITIONS),
                field_names=("sentence",))
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, parallelism)
    b.set_bolt("split", SplitCount(), parallelism).local_or_shuffle_grouping("spout")
    b.set_bolt("commit", OpaqueCommitCounts() if opaque else CommitCounts(), committers) \
        .fields_grouping("split", Fields("word"))
    return b


def build_trident(topology_id: str, bootstrap: str, topic: str, batch: int, parallelism: int, committers: int,
                  columnar: bool) -> object:
    from trident import Count, TridentTopology
    from trident import state as trident_state

    from wordcount import SplitWords, split_batch

    spout = KafkaTransactionalSpout(bootstrap, topic, max_records_per_partition=max(1, batch // PARTITIONS),
                                    field_names=("sentence",))
    t = TridentTopology(topology_id)
    s = t.new_stream("spout", spout).parallelism_hint(parallelism)
    s = s.map_batches(split_batch, Fields("word")) if columnar else s.each(Fields("sentence"), SplitWords(),
                                                                             Fields("word"))
    s.group_by(Fields("word")).persistent_aggregate(trident_state.counters("word-counts"), Count(),
                                                    Fields("count")).parallelism_hint(committers)
    return t.build()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sentences", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=50_000, help="sentences per batch (over all partitions)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-spout-pending", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--committers", type=int, default=1)
    ap.add_argument("--bootstrap", help="an existing broker (default: start Tansu)")
    ap.add_argument("--redis", help="redis://host:port/db (default: start redis-server)")
    ap.add_argument("--opaque", action="store_true", help="OpaqueKafkaTransactionalSpout + OpaqueMap")
    ap.add_argument("--api", choices=["bolt", "trident", "trident-columnar"], default="bolt")
    ap.add_argument("--topic", help="read this topic (filled by --produce-only) instead of producing one")
    ap.add_argument("--produce-only", action="store_true", help="produce the corpus to a new topic, print its name")
    args = ap.parse_args()

    servers = []
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = ManagedKafka().start()
            servers.append(broker)
            bootstrap = broker.bootstrap
        redis_url = args.redis
        if not redis_url:
            from transactional.testing.redis import ManagedRedis
            redis = ManagedRedis(appendonly=False).start()
            servers.append(redis)
            redis_url = redis.url

        corpus = make_corpus(args.sentences)
        words = sum(s.count(" ") + 1 for s in corpus)
        produce_secs = 0.0
        topic = args.topic
        if topic is None:
            topic = f"bench-sentences-{uuid.uuid4().hex[:8]}"
            create_topic(bootstrap, topic, PARTITIONS)
            t0 = time.monotonic()
            produce(bootstrap, topic, {p: corpus[p::PARTITIONS] for p in range(PARTITIONS)})
            produce_secs = time.monotonic() - t0
        if args.produce_only:
            print(topic)
            return

        cfg = TopologyConfig(spark_master=args.master, spark_ui=False, max_spout_pending=args.max_spout_pending,
                             state=redis_url, progress=False, message_timeout_secs=600)
        sc = get_or_create_context(cfg)
        sc.parallelize(range(4), 2).count()  # start the Python workers before timing
        tid = f"bench-kafka-wordcount-{uuid.uuid4().hex[:8]}"
        if args.api == "bolt":
            topo = build(tid, bootstrap, topic, args.batch, args.parallelism, args.committers, args.opaque)
        else:
            topo = build_trident(tid, bootstrap, topic, args.batch, args.parallelism, args.committers,
                                 args.api == "trident-columnar")
        t0 = time.monotonic()
        r = run_topology(topo, cfg)
        wall = time.monotonic() - t0

        want = Counter(w for s in corpus for w in s.split())
        keys = list(want)
        if args.api == "bolt":
            kind = OpaqueMap if args.opaque else TransactionalMap
            got = kind(RedisMapBacking.from_url(redis_url, f"{tid}:word-counts")).multi_get(keys)
        else:
            got = r.map_state("word-counts").multi_get(keys)
        exact = all(g == want[k] for k, g in zip(keys, got, strict=True))
        line = {
            "benchmark": "kafka_wordcount", "api": args.api,
            "spout": "opaque" if args.opaque else "transactional",
            "state": "counters" if args.api != "bolt" else ("OpaqueMap" if args.opaque else "TransactionalMap"),
            "sentences": args.sentences, "words": words, "partitions": PARTITIONS,
            "batches": r.batches_committed, "batch_sentences": args.batch, "wall_secs": round(wall, 2),
            "words_per_sec": round(words / wall), "batch_latency_p50_ms": round(r.latency_ms(50), 1),
            "batch_latency_p99_ms": round(r.latency_ms(99), 1),
            "commit_phase_p50_ms": round(percentile(r.commit_phase_secs, 50) * 1000, 1),
            "processing_job_p50_ms": round(percentile(r.processing_secs, 50) * 1000, 1),
            "produce_secs": round(produce_secs, 2), "exact": exact, "failed_attempts": len(r.failures),
            "max_spout_pending": args.max_spout_pending, "master": args.master,
            "parallelism": args.parallelism, "committers": args.committers,
            "broker": "tansu (started)" if not args.bootstrap else bootstrap,
            "redis": "redis (started)" if not args.redis else TopologyConfig(state=redis_url).redacted()["state"],
        }
        print(json.dumps(line), flush=True)
        if not exact:
            sys.exit("counts in Redis differ from the corpus")
    finally:
        for s in reversed(servers):
            s.destroy()


if __name__ == "__main__":
    main()
