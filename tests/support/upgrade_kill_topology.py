"""Version 1 or 2 (``TRIDENT_TEST_VERSION``) of a Trident word count into a Redis map, for
the upgrade kill test (tests/transactional/ops/test_upgrade_kill.py): version 2 adds a state (``more``)
and counts only words longer than one letter into it. ``TRIDENT_TEST_TOPOLOGY``: the id."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseFilter, Count, TridentTopology, state

from trident_kill_topology import DATA, TAKE, Split

__all__ = ["DATA", "build_topology"]


class Long(BaseFilter):
    def is_keep(self, tuple):
        return len(tuple[0]) > 1


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    words = (t.new_stream("sentences", MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)).parallelism_hint(2)
             .each(Fields("sentence"), Split(), Fields("word")))
    words.group_by(Fields("word")).persistent_aggregate(state.transactional("counts"), Count(), Fields("count"))
    if os.environ.get("TRIDENT_TEST_VERSION") == "2":
        (words.each(Fields("word"), Long()).group_by(Fields("word"))
         .persistent_aggregate(state.opaque("more"), Count(), Fields("count")))
    return t.build()
