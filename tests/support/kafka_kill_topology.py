"""Sentences to a Kafka topic through TridentKafkaStateFactory, for the driver-SIGKILL
tests. ``TRIDENT_TEST_KAFKA``: bootstrap; ``TRIDENT_TEST_OUT``: the topic;
``TRIDENT_TEST_TOPOLOGY``: the topology id."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import TridentTopology
from trident.kafka import TridentKafkaStateFactory, TridentKafkaUpdater

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["DATA", "build_topology"]


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    factory = TridentKafkaStateFactory(os.environ["TRIDENT_TEST_KAFKA"], os.environ["TRIDENT_TEST_OUT"],
                                       key_field="word", value_field="sentence")
    (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
     .each(Fields("sentence"), Split(), Fields("word"))
     .partition_persist(factory, Fields("word", "sentence"), TridentKafkaUpdater()).parallelism_hint(2))
    return t.build()
