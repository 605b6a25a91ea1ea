"""A Trident word count over a Kafka topic, for ``trident verify``'s fixed range test:
``TRIDENT_VERIFY_KAFKA`` is the bootstrap server, ``TRIDENT_VERIFY_TOPIC`` the topic (two
partitions, one word per record); batches of at most 4 records per partition."""

import os

from spouts.kafka import KafkaTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state


class Word(BaseFunction):
    def execute(self, tuple, collector):
        collector.emit((tuple[0],))


def build_topology():
    t = TridentTopology("kafka-words")
    spout = KafkaTransactionalSpout(os.environ["TRIDENT_VERIFY_KAFKA"], os.environ["TRIDENT_VERIFY_TOPIC"],
                                    max_records_per_partition=4)
    (t.new_stream("words", spout).parallelism_hint(2)
     .each(Fields("value"), Word(), Fields("word"))
     .group_by(Fields("word"))
     .persistent_aggregate(state.transactional("word-counts"), Count(), Fields("count")))
    return t.build()
