"""Peer benchmark: bytewax 0.21 reading the same topic and writing word counts to Kafka
with its ``KafkaSink`` (at-least-once: a restart replays what followed the last snapshot,
and the sink writes it again). The reference for benchmarks/states_bench.py's
``kafka->trident->kafka``.

    pip install -e '.[peers]'                  # bytewax>=0.21,<0.22
    flock /tmp/heavy.lock python benchmarks/peers/bytewax_kafka_sink.py [--sentences 20000]

The corpus (``make_corpus``) on a 4-partition topic of a private Tansu broker; the
dataflow (1 worker, ``run_main``): ``KafkaSource(tail=False)`` -> split into words ->
``count_final`` per word -> ``KafkaSink`` onto a 4-partition topic (key word, value count).
Wall time from ``run_main`` to its return (the sink flushed); records/s = sentences / wall.
The output is read back and its counts compared with the corpus (``exact``). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from transactional.testing import make_corpus  # noqa: E402
from transactional.testing.kafka import ManagedKafka, create_topic, produce  # noqa: E402
from trident.kafka import read_partition  # noqa: E402

PARTITIONS = 4


def main() -> None:
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.testing import run_main

    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=20_000)
    args = ap.parse_args()
    corpus = make_corpus(args.sentences)
    words = Counter(w for s in corpus for w in s.split())
    kafka = ManagedKafka().start()
    try:
        src, sink = f"sentences-{uuid.uuid4().hex[:6]}", f"counts-{uuid.uuid4().hex[:6]}"
        create_topic(kafka.bootstrap, src, PARTITIONS)
        create_topic(kafka.bootstrap, sink, PARTITIONS)
        produce(kafka.bootstrap, src, {p: corpus[p::PARTITIONS] for p in range(PARTITIONS)})
        flow = Dataflow("kafka-sink-peer")
        msgs = op.input("in", flow, KafkaSource([kafka.bootstrap], [src], tail=False))
        ws = op.flat_map("split", msgs, lambda m: m.value.decode().split())
        counts = op.count_final("count", ws, lambda w: w)                      # (word, count)
        out = op.map("msg", counts, lambda kv: KafkaSinkMessage(kv[0].encode(), str(kv[1]).encode()))
        op.output("out", out, KafkaSink([kafka.bootstrap], sink))
        t0 = time.perf_counter()
        run_main(flow)
        wall = time.perf_counter() - t0
        got: Counter = Counter()
        n = 0
        for p in range(PARTITIONS):
            for k, v in read_partition(kafka.bootstrap, sink, p):
                got[k.decode()] += int(v)
                n += 1
        print(json.dumps({"bench": "bytewax 0.21 kafka->kafka (KafkaSink, at-least-once)", "sentences": args.sentences,
                          "wall_secs": round(wall, 3), "records_per_sec": round(args.sentences / wall),
                          "output_records": n, "exact": got == words}), flush=True)
    finally:
        kafka.destroy()


if __name__ == "__main__":
    main()
