"""Exactly-once output into the user's systems (docs/states.md): one JSON line each.

    flock /tmp/heavy.lock python benchmarks/states_bench.py [--sentences 20000] [--batch 5000]
        [--executor in-process|spark] [--only kafka,postgres,parquet]

The corpus of benchmarks/wordcount.py (``make_corpus``, 10 Zipf words per sentence, 50,000-word
vocabulary) produced to a 4-partition topic of a private Tansu broker; a private
PostgreSQL 15 (``ManagedPostgres``) and a temp directory. Each run is a Trident topology
from a ``KafkaTransactionalSpout`` (2 tasks, ``--batch / 4`` records per partition and batch):

- ``kafka``: split -> group_by(word).aggregate(Count) -> ``TridentKafkaStateFactory`` onto
  a second 4-partition topic (records ``word -> count of the batch``); records/s = sentences
  read / wall, and the output records written;
- ``postgres``: the same counts -> ``PostgresStateFactory`` upsert adding ``count`` into
  ``word_counts``; rows/s = rows upserted / wall; every count checked against the corpus;
- ``parquet``: every sentence -> ``ParquetStateFactory``; rows/s = rows written / wall;
  every row read back with ``read_committed``.

Wall time is ``run_topology``'s (driver start to the last commit). bytewax's Kafka sink
peer: benchmarks/peers/bytewax_kafka_sink.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from spouts.kafka import KafkaTransactionalSpout  # noqa: E402
from transactional import Fields, TopologyConfig, run_topology  # noqa: E402
from transactional.testing import ManagedPostgres, make_corpus  # noqa: E402
from transactional.testing.kafka import ManagedKafka, create_topic, produce  # noqa: E402
from trident import Count, TridentTopology  # noqa: E402
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater, read_partition  # noqa: E402
from trident.parquet import ParquetStateFactory, ParquetUpdater, read_committed  # noqa: E402
from trident.postgres import PostgresStateFactory, PostgresUpdater  # noqa: E402

PARTITIONS = 4


def sentences(t: TridentTopology, bootstrap: str, topic: str, batch: int):
    spout = KafkaTransactionalSpout(bootstrap, topic, max_records_per_partition=max(1, batch // PARTITIONS),
                                    field_names=("sentence",))
    return t.new_stream("spout", spout).parallelism_hint(2)                          # ("sentence",)


def counts_of(s):
    return (s.flat_map(lambda tup: [(w,) for w in tup["sentence"].split()], Fields("word"))
            .group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2))


ROWS = [0]   # rows handed to the PostgreSQL state (its updater runs in the driver's commit phase)


class CountingUpdater(PostgresUpdater):
    def update_state(self, state, tuples, collector):
        ROWS[0] += len(tuples)
        super().update_state(state, tuples, collector)


def run(t: TridentTopology, args) -> float:
    t0 = time.perf_counter()
    run_topology(t.build(), TopologyConfig(executor=args.executor, spark_master="local[2]", progress=False,
                                           max_spout_pending=3))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument("--executor", default="in-process", choices=["in-process", "spark"])
    ap.add_argument("--only", default="kafka,postgres,parquet")
    args = ap.parse_args()
    corpus = make_corpus(args.sentences)
    words = Counter(w for s in corpus for w in s.split())
    kafka, pg = ManagedKafka().start(), ManagedPostgres().start()
    try:
        src = f"sentences-{uuid.uuid4().hex[:6]}"
        create_topic(kafka.bootstrap, src, PARTITIONS)
        produce(kafka.bootstrap, src, {p: corpus[p::PARTITIONS] for p in range(PARTITIONS)})
        common = {"sentences": args.sentences, "words": sum(words.values()), "batch": args.batch,
                  "executor": args.executor}
        only = args.only.split(",")
        if "kafka" in only:
            sink = f"counts-{uuid.uuid4().hex[:6]}"
            create_topic(kafka.bootstrap, sink, PARTITIONS)
            t = TridentTopology(f"bench-k2k-{uuid.uuid4().hex[:6]}")
            counts_of(sentences(t, kafka.bootstrap, src, args.batch)).partition_persist(TridentKafkaStateFactory(kafka.bootstrap, sink, key_field="word",
                                                              value_field="count"),
                                     Fields("word", "count"), TridentKafkaUpdater())
            wall = run(t, args)
            out = [r for p in range(PARTITIONS) for r in read_partition(kafka.bootstrap, sink, p)]
            total = Counter()
            for k, v in out:
                total[k.decode()] += int(v)
            print(json.dumps({"bench": "kafka->trident->kafka", **common, "wall_secs": round(wall, 3),
                              "records_per_sec": round(args.sentences / wall), "output_records": len(out),
                              "exact": total == words}), flush=True)
        if "postgres" in only:
            dsn = pg.create_database("bench")
            t = TridentTopology(f"bench-pg-{uuid.uuid4().hex[:6]}")
            counts = counts_of(sentences(t, kafka.bootstrap, src, args.batch))
            f = PostgresStateFactory(dsn, "word_counts", {"word": "text", "count": "bigint"}, key_columns=["word"],
                                     add_columns=["count"], create_table=True)
            counts.partition_persist(f, Fields("word", "count"), CountingUpdater())
            wall = run(t, args)
            import psycopg

            with psycopg.connect(dsn) as c:
                got = dict(c.execute("SELECT word, count FROM word_counts").fetchall())
            print(json.dumps({"bench": "kafka->postgres upsert", **common, "wall_secs": round(wall, 3),
                              "rows_per_sec": round(ROWS[0] / wall), "rows_upserted": ROWS[0],
                              "distinct_words": len(got), "exact": got == dict(words)}), flush=True)
        if "parquet" in only:
            out_dir = tempfile.mkdtemp(prefix="trident-parquet-bench-")
            t = TridentTopology(f"bench-pq-{uuid.uuid4().hex[:6]}")
            sentences(t, kafka.bootstrap, src, args.batch).partition_persist(
                ParquetStateFactory(out_dir, ["sentence"]), Fields("sentence"), ParquetUpdater())
            wall = run(t, args)
            rows = read_committed(out_dir).num_rows
            print(json.dumps({"bench": "kafka->parquet", **common, "wall_secs": round(wall, 3),
                              "rows_per_sec": round(rows / wall), "rows": rows, "exact": rows == args.sentences}),
                  flush=True)
    finally:
        kafka.destroy()
        pg.destroy()


if __name__ == "__main__":
    main()
