"""Exactly once into the user's own systems, for ``trident verify``'s scratch copies: a
Trident word count whose counts go to a PostgreSQL table (``PostgresStateFactory``, upsert
adding counts), a Parquet directory (``ParquetStateFactory``) and a Kafka topic
(``TridentKafkaStateFactory``). ``TRIDENT_VERIFY_PG_DSN``, ``TRIDENT_VERIFY_PARQUET``,
``TRIDENT_VERIFY_KAFKA`` and ``TRIDENT_VERIFY_TOPIC`` name the user's real ones; verify must
leave every one of them as it was."""

import os

from _words import DATA

from transactional import Fields
from trident import Count, FixedBatchSpout, TridentTopology
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater
from trident.parquet import ParquetStateFactory, ParquetUpdater
from trident.postgres import PostgresStateFactory, PostgresUpdater


def build_topology():
    env = os.environ
    words = [(w,) for p in sorted(DATA) for w in DATA[p]]
    t = TridentTopology("user-sinks")
    counts = (t.new_stream("words", FixedBatchSpout(Fields("word"), 4, *words))
              .group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("n")))
    counts.partition_persist(PostgresStateFactory(env["TRIDENT_VERIFY_PG_DSN"], "word_counts",
                                                  {"word": "text", "n": "bigint"}, key_columns=["word"],
                                                  add_columns=["n"]),
                             Fields("word", "n"), PostgresUpdater())
    counts.partition_persist(ParquetStateFactory(env["TRIDENT_VERIFY_PARQUET"], ["word", "n"]),
                             Fields("word", "n"), ParquetUpdater())
    counts.partition_persist(TridentKafkaStateFactory(env["TRIDENT_VERIFY_KAFKA"], env["TRIDENT_VERIFY_TOPIC"],
                                                      key_field="word", value_field="n"),
                             Fields("word", "n"), TridentKafkaUpdater())
    return t.build()
