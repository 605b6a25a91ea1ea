"""A Trident word count into a map with a TTL, for the driver-SIGKILL test of
tests/state/test_state_ttl.py (``trident run`` loads it in a child). ``TRIDENT_TEST_TOPOLOGY``:
the topology id; ``TRIDENT_TEST_TTL``: the map's ``ttl_secs``. One word a batch."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology, state

WORDS = [("a",), ("a",), ("b",), ("b",), ("b",)]


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    (t.new_stream("words", MemoryTransactionalSpout(WORDS, Fields("word"), 1))
     .group_by(Fields("word"))
     .persistent_aggregate(state.transactional("counts", ttl_secs=float(os.environ["TRIDENT_TEST_TTL"])),
                           Count(), Fields("count")))
    return t.build()
