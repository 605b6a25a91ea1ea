"""A Trident word count for the driver-SIGKILL tests (``trident run`` loads it in a child).

``TRIDENT_TEST_FLAVOUR``: ``transactional`` (transactional spout, transactional map) or
``opaque`` (opaque spout delivering short on first attempts, opaque map).
"""

import os
import random

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state

WORDS = ["cat", "dog", "cow", "moon", "apple", "the", "a", "man"]


def make_data(partitions: int = 2, per_partition: int = 60, seed: int = 11) -> dict[int, list[tuple[str]]]:
    """partition -> sentences of three words."""
    rng = random.Random(seed)
    return {p: [(" ".join(rng.choice(WORDS) for _ in range(3)),) for _ in range(per_partition)]
            for p in range(partitions)}


DATA = make_data()
TAKE = 4


def expected() -> dict[str, int]:
    """The exact count of every word in DATA."""
    out: dict[str, int] = {}
    for rows in DATA.values():
        for (s,) in rows:
            for w in s.split():
                out[w] = out.get(w, 0) + 1
    return out


def short_first_attempt(tx, partition, start, end):
    """An opaque source that delivers one row less on each first attempt."""
    return end - 1 if tx.attempt_id == 1 and end - start > 1 else end


class Split(BaseFunction):
    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def build_topology():
    flavour = os.environ.get("TRIDENT_TEST_FLAVOUR", "transactional")
    if flavour == "opaque":
        spout = OpaqueMemoryTransactionalSpout(DATA, Fields("sentence"), TAKE, deliver=short_first_attempt)
        factory = state.opaque("counts")
    else:
        spout = MemoryTransactionalSpout(DATA, Fields("sentence"), TAKE)
        factory = state.transactional("counts")
    t = TridentTopology(f"trident-kill-{flavour}")
    (t.new_stream("sentences", spout).parallelism_hint(2)
     .each(Fields("sentence"), Split(), Fields("word"))
     .group_by(Fields("word"))
     .persistent_aggregate(factory, Count(), Fields("count")).parallelism_hint(2))
    return t.build()
