"""A Kafka topic counted into a Delta Lake table, exactly once, and read back by DuckDB.

    trident run examples/kafka_to_delta.py                      # a local broker, ./word_counts.delta
    DELTA_TABLE=s3://bucket/word_counts KAFKA_BOOTSTRAP=127.0.0.1:9092 \\
        trident run examples/kafka_to_delta.py --coordination zk://127.0.0.1:2181/trident

The topic settings are those of examples/kafka_word_count.py (``KAFKA_BOOTSTRAP`` unset: a
local Kafka-protocol broker is started for the run). Each batch's counts are added to the
table by key (``mode="add"``): each task's batch is one Delta commit carrying Delta's own
``txn`` marker (app id ``trident:<topology>:<table>:task<i>``, version = the txid), so a
replayed txid is recognised by the table and any Delta reader sees each txid once.

Read it as a user would (Spark SQL needs the delta-spark jar, which this example does not
download): ``duckdb.sql("SELECT * FROM arrow")`` over ``deltalake.DeltaTable(...).to_pyarrow_dataset()``.

Kafka spout (2 tasks) -> each(Split) -> group_by(word) -> aggregate(Count) (2)
  -> partition_persist(DeltaStateFactory(..., mode="add"))
"""

import os

from transactional import Fields
from trident import BaseFunction, Count, TridentTopology
from trident.delta import DeltaStateFactory, DeltaUpdater

from kafka_word_count import PRODUCED, SETTINGS, setup  # noqa: F401 - setup(): trident run calls it

TABLE = os.environ.get("DELTA_TABLE", os.path.abspath("word_counts.delta"))


class Split(BaseFunction):
    """One tuple per word of the sentence."""

    def execute(self, tuple, collector):
        for word in tuple[0].split():
            collector.emit((word,))


def build_topology():
    from spouts import KafkaTransactionalSpout

    s = SETTINGS
    spout = KafkaTransactionalSpout(s["bootstrap"] or "127.0.0.1:9092", s["topic"], max_records_per_partition=2_500,
                                    field_names=("sentence",))
    counts = DeltaStateFactory(TABLE, Fields("word", "count", types={"word": "string", "count": "int64"}),
                               mode="add", key_fields=["word"], create=True)
    t = TridentTopology("kafka-to-delta")
    (t.new_stream("sentences", spout).parallelism_hint(2)
     .each(Fields("sentence"), Split(), Fields("word"))            # ("word",)
     .group_by(Fields("word"))
     .aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)   # ("word", "count") of the batch
     .partition_persist(counts, Fields("word", "count"), DeltaUpdater()))
    return t


def report(result):
    import duckdb
    from deltalake import DeltaTable

    arrow = DeltaTable(TABLE).to_pyarrow_dataset()          # noqa: F841 - DuckDB reads it by name
    top = duckdb.sql("SELECT word, count FROM arrow ORDER BY count DESC, word LIMIT 5").fetchall()
    print("top words:", ", ".join(f"{w} {n}" for w, n in top))
    if PRODUCED:
        got = dict(duckdb.sql("SELECT word, count FROM arrow").fetchall())
        print("exact:", got == dict(PRODUCED))


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report, setup=setup)
