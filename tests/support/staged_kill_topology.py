"""A Trident word count into a counter map, for the staged-commit driver-SIGKILL tests
(``trident run`` loads it in a child with ``--set staged_counters=true``): the data and
``expected()`` of ``trident_kill_topology``; the topology id is ``TRIDENT_TEST_TOPOLOGY``."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Count, TridentTopology, state

from trident_kill_topology import DATA, TAKE, Split


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
     .each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .persistent_aggregate(state.counters("counts"), Count(), Fields("count")).parallelism_hint(2))
    return t.build()
