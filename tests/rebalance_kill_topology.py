"""A Trident word count into a Redis map and PostgreSQL (counts added, sentences appended)
for the rebalance SIGKILL test (tests/test_rebalance_kill.py); each sentence takes
``TRIDENT_TEST_SLEEP`` seconds, so a rebalance asked during a run lands in it.
``TRIDENT_TEST_PG``: the DSN; ``TRIDENT_TEST_TOPOLOGY``: the topology id."""

import os
import time

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state
from trident.postgres import PostgresStateFactory, PostgresUpdater

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["DATA", "build_topology", "STAGES"]

#: the stages the test rebalances
STAGES = ("persistent_aggregate(counts)", "aggregate(Count) #3", "partition_persist(postgres_word_counts)",
          "partition_persist(postgres_sentences)")


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
    words = s.each(Fields("sentence"), Split(), Fields("word"))
    words.group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("count")) \
        .parallelism_hint(2)
    (words.group_by(Fields("word")).aggregate(Fields("word"), Count(), Fields("count")).parallelism_hint(2)
     .partition_persist(PostgresStateFactory(dsn, "word_counts", {"word": "text", "count": "bigint"},
                                             key_columns=["word"], add_columns=["count"], create_table=True),
                        Fields("word", "count"), PostgresUpdater()))
    return t.build()
