"""Trident from topic A to topic B, exactly once: each batch's word counts as records
``(word, count)`` on topic B (trident.kafka.TridentKafkaStateFactory).

    trident run examples/kafka_to_kafka.py           # starts a local broker
    KAFKA_BOOTSTRAP=127.0.0.1:9092 trident run examples/kafka_to_kafka.py --coordination zk://127.0.0.1:2181/t

Each task of the state writes Kafka partitions of its own with an idempotent producer,
and tags every record with the txid, its place in the txid and the driver's epoch; before
writing a txid it reads its partitions' last records, so a txid replayed after a crash
writes only the records its earlier attempt did not (exact with a transactional spout, on
any Kafka-protocol broker; docs/states.md).

spout (topic A, 2 tasks) -> split -> group_by(word).aggregate(Count) -> topic B (2 tasks)
"""

import atexit
import os

from transactional import Fields
from trident import Count, TridentTopology
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater

SETTINGS = {"bootstrap": os.environ.get("KAFKA_BOOTSTRAP", ""), "source": os.environ.get("KAFKA_SOURCE", "sentences"),
            "sink": os.environ.get("KAFKA_SINK", "word-counts"), "produce": int(os.environ.get("KAFKA_PRODUCE", "20000"))}


def setup():
    from transactional.testing import make_corpus
    from transactional.testing.kafka import ManagedKafka, create_topic, produce

    s = SETTINGS
    if not s["bootstrap"]:
        broker = ManagedKafka().start()
        atexit.register(broker.destroy)
        s["bootstrap"] = broker.bootstrap
    create_topic(s["bootstrap"], s["source"], 4, exist_ok=True)
    create_topic(s["bootstrap"], s["sink"], 4, exist_ok=True)
    if s["produce"]:
        corpus = make_corpus(s["produce"], vocab=1000)
        produce(s["bootstrap"], s["source"], {p: corpus[p::4] for p in range(4)})


def build_topology():
    from spouts import KafkaTransactionalSpout

    s = SETTINGS
    bootstrap = s["bootstrap"] or "127.0.0.1:9092"
    t = TridentTopology("kafka-to-kafka")
    (t.new_stream("sentences", KafkaTransactionalSpout(bootstrap, s["source"], max_records_per_partition=2_500,
                                                       field_names=("sentence",))).parallelism_hint(2)
     .flat_map(lambda tup: [(w,) for w in tup["sentence"].split()], Fields("word"))     # ("word",)
     .group_by(Fields("word"))
     .aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)              # ("word", "count")
     .partition_persist(TridentKafkaStateFactory(bootstrap, s["sink"], key_field="word", value_field="count"),
                        Fields("word", "count"), TridentKafkaUpdater()))
    return t.build()


def report(result):
    from trident.kafka import read_partition

    total = sum(int(v) for p in range(4) for _, v in read_partition(SETTINGS["bootstrap"], SETTINGS["sink"], p))
    print(f"records on {SETTINGS['sink']!r} count {total} words")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, setup=setup)
