"""Kafka partitions counted into PostgreSQL, exactly once, by a transactional committer.

    trident run examples/exactly_once_postgres.py          # starts a local broker and PostgreSQL
    PG_DSN=postgresql://app@127.0.0.1/app KAFKA_BOOTSTRAP=127.0.0.1:9092 \\
        trident run examples/exactly_once_postgres.py --coordination zk://127.0.0.1:2181/trident

The committer reaches the table through its context, ``context.state(factory)``: each
task's counts of a batch go into ``word_counts`` in one SQL transaction that also stores
the txid and the driver's epoch (trident.postgres), so a replayed txid -- after a crash,
with a transactional or an opaque spout -- changes nothing twice, and a stale driver is
refused. Read the result as a user would: ``SELECT word, count FROM word_counts``.

spout (Kafka, 2 tasks) -> split (2) -> count (committer, 2, fields on word) -> PostgreSQL
"""

import atexit
import os
from collections import Counter

from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TransactionalTopologyBuilder, Values
from transactional.testing import make_corpus
from trident.postgres import PostgresStateFactory

SETTINGS = {
    "dsn": os.environ.get("PG_DSN", ""),
    "bootstrap": os.environ.get("KAFKA_BOOTSTRAP", ""),
    "topic": os.environ.get("KAFKA_TOPIC", "pg-sentences"),   # its own: the other examples fill "sentences"
    "produce": int(os.environ.get("KAFKA_PRODUCE", "20000")),
    "opaque": os.environ.get("KAFKA_OPAQUE", "") == "1",
}
PRODUCED: Counter = Counter()


class SplitCount(BaseBatchBolt):
    """Counts the words of its share of the batch."""

    def prepare(self, conf, context, collector, id):
        self.collector, self.id, self.counts = collector, id, Counter()

    def execute(self, tuple):                          # ("tx", "sentence")
        self.counts.update(tuple["sentence"].split())

    def finish_batch(self):
        for w, n in self.counts.items():
            self.collector.emit(Values(self.id, w, n))  # ("id", "word", "n")

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "word", "n"))


class CountsIntoPostgres(BaseTransactionalBolt, Committer):
    """Adds the batch's counts to the table ``word_counts`` (word text primary key, count bigint)."""

    def __init__(self, table):
        self.table = table            # a PostgresStateFactory: pickled to executors, connects there

    def prepare(self, conf, context, collector, attempt):
        self.rows = context.state(self.table)      # begin_commit(txid) now, commit(txid) after finish_batch
        self.batch = Counter()

    def execute(self, tuple):                      # ("id", "word", "n")
        self.batch[tuple["word"]] += tuple["n"]

    def finish_batch(self):
        self.rows.add_rows(self.batch.items())     # ("word", "count") rows, added to the stored counts


def setup():
    """A local broker and PostgreSQL when none are given; the topic and its sentences."""
    from transactional.testing.kafka import ManagedKafka, create_topic, produce

    s = SETTINGS
    if not s["bootstrap"]:
        broker = ManagedKafka().start()
        atexit.register(broker.destroy)
        s["bootstrap"] = broker.bootstrap
    if not s["dsn"]:
        from transactional.testing import ManagedPostgres

        pg = ManagedPostgres().start()
        atexit.register(pg.destroy)
        s["dsn"] = pg.create_database("app")
        print(f"started PostgreSQL at {s['dsn']}")
    created = create_topic(s["bootstrap"], s["topic"], 4, exist_ok=True)
    if s["produce"]:
        corpus = make_corpus(s["produce"], vocab=1000)
        produce(s["bootstrap"], s["topic"], {p: corpus[p::4] for p in range(4)})
        if created:    # a topic that held records before: the table holds their counts too
            PRODUCED.update(w for line in corpus for w in line.split())


def table():
    return PostgresStateFactory(SETTINGS["dsn"] or "postgresql://127.0.0.1/app", "word_counts",
                                {"word": "text", "count": "bigint"}, key_columns=["word"], add_columns=["count"],
                                create_table=True)


def build_topology(topology_id="exactly-once-postgres"):
    from spouts import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout

    s = SETTINGS
    cls = OpaqueKafkaTransactionalSpout if s["opaque"] else KafkaTransactionalSpout
    spout = cls(s["bootstrap"] or "127.0.0.1:9092", s["topic"], max_records_per_partition=2_500,
                field_names=("sentence",))
    b = TransactionalTopologyBuilder(topology_id, "spout", spout, 2)
    b.set_bolt("split", SplitCount(), 2).local_or_shuffle_grouping("spout")
    b.set_bolt("count", CountsIntoPostgres(table()), 2).fields_grouping("split", Fields("word"))
    return b


def report(result):
    import psycopg

    with psycopg.connect(SETTINGS["dsn"]) as c:
        got = dict(c.execute("SELECT word, count FROM word_counts").fetchall())
    top = sorted(got.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print("top words:", ", ".join(f"{w} {n}" for w, n in top))
    if PRODUCED:
        print("exact:", got == dict(PRODUCED))


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, setup=setup)
