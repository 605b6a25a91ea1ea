"""A Trident word count into a Redis map and PostgreSQL (counts added, sentences appended),
and its sentences into Parquet, Kafka and a user's own state, for the rebalance SIGKILL
test (tests/transactional/engine/test_rebalance_kill.py); each sentence takes ``TRIDENT_TEST_SLEEP`` seconds, so
a rebalance asked during a run lands in it. ``TRIDENT_TEST_PG``: the DSN;
``TRIDENT_TEST_PARQUET``, ``TRIDENT_TEST_FILES``: directories; ``TRIDENT_TEST_KAFKA``,
``TRIDENT_TEST_OUT``: bootstrap and topic; ``TRIDENT_TEST_TOPOLOGY``: the topology id."""

import os
import time

from retask_topology import AddRows, FilesFactory

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater
from trident.parquet import ParquetStateFactory, ParquetUpdater
from trident.postgres import PostgresStateFactory, PostgresUpdater

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["DATA", "build_topology", "stages"]


def stages() -> list[str]:
    """The stages the test rebalances: every state's."""
    return [c.id for c in build_topology().components
            if c.id.startswith(("persistent_aggregate", "partition_persist", "aggregate(Count) #3"))]


class Slow(BaseFunction):
    def execute(self, tuple, collector):
        time.sleep(float(os.environ.get("TRIDENT_TEST_SLEEP", "0")))
        collector.emit(())


def build_topology():
    dsn = os.environ["TRIDENT_TEST_PG"]
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    s = t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2) \
        .each(Fields("sentence"), Slow(), Fields())
    s.partition_persist(PostgresStateFactory(dsn, "sentences", {"sentence": "text"}, mode="append",
                                             create_table=True), Fields("sentence"), PostgresUpdater())
    s.partition_persist(ParquetStateFactory(os.environ["TRIDENT_TEST_PARQUET"], ["sentence"]), Fields("sentence"),
                        ParquetUpdater())
    s.partition_persist(FilesFactory(os.environ["TRIDENT_TEST_FILES"]), Fields("sentence"), AddRows())
    s.partition_persist(TridentKafkaStateFactory(os.environ["TRIDENT_TEST_KAFKA"], os.environ["TRIDENT_TEST_OUT"],
                                                 value_field="sentence"), Fields("sentence"), TridentKafkaUpdater())
    words = s.each(Fields("sentence"), Split(), Fields("word"))
    words.group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("count")) \
        .parallelism_hint(2)
    (words.group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)
     .partition_persist(PostgresStateFactory(dsn, "word_counts", {"word": "text", "count": "bigint"},
                                             key_columns=["word"], add_columns=["count"], create_table=True),
                        Fields("word", "count"), PostgresUpdater()))
    return t.build()
