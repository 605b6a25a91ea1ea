"""A Trident topology that runs many tiny txids, for the bounded-footprint test of
tests/transactional/engine/test_footprint.py (``trident run`` loads it in a child).
``TRIDENT_TEST_TOPOLOGY``: the topology id. One word a batch, ``TXIDS`` batches, into a
transactional map (with a TTL), an opaque map, a counter map and a count window."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import Count, Sum, TridentTopology, state
from trident.windowing import WindowsStoreFactory

TXIDS = 180
WORDS = 7
ROWS = [(f"w{i % WORDS}", i) for i in range(TXIDS)]


def expected() -> dict[str, int]:
    """Each word's count once every batch committed once."""
    out: dict[str, int] = {}
    for w, _ in ROWS:
        out[w] = out.get(w, 0) + 1
    return out


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    s = t.new_stream("words", MemoryTransactionalSpout(ROWS, Fields("word", "n"), 1))
    g = s.group_by(Fields("word"))
    g.persistent_aggregate(state.transactional("tcounts", ttl_secs=86_400), Count(), Fields("count"))
    g.persistent_aggregate(state.opaque("ocounts"), Count(), Fields("count"))
    g.persistent_aggregate(state.counters("ccounts"), Count(), Fields("count"))
    s.tumbling_window(3, WindowsStoreFactory("win"), Fields("n"), Sum(), Fields("total"))
    return t.build()
