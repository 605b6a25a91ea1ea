"""trident.builtin's FilterNull, Equals and Negate in a topology, in-process and on Spark."""

from __future__ import annotations

import uuid

from spouts import MemoryTransactionalSpout
from transactional import Fields, TopologyConfig, run_topology
from trident import Count, TridentTopology, state
from trident.builtin import Equals, FilterNull, Negate


def test_filter_null_equals_and_negate(executor: str) -> None:
    rows = [("a", "a"), ("a", None), ("b", "c"), ("d", "d"), (None, None)]
    t = TridentTopology(f"filters-{uuid.uuid4().hex[:8]}")
    s = t.new_stream("rows", MemoryTransactionalSpout(rows, Fields("x", "y"), 2))
    s.each(Fields("x", "y"), FilterNull()).each(Fields("x", "y"), Equals()) \
        .group_by(Fields("x")).persistent_aggregate(state.transactional("same"), Count(), Fields("n"))
    s.each(Fields("x", "y"), FilterNull()).each(Fields("x", "y"), Negate(Equals())) \
        .group_by(Fields("x")).persistent_aggregate(state.transactional("differ"), Count(), Fields("n"))
    r = run_topology(t.build(), TopologyConfig(executor=executor, progress=False))
    assert r.map_state("same").multi_get(["a", "b", "d"]) == [1, None, 1]
    assert r.map_state("differ").multi_get(["a", "b", "d"]) == [None, 1, None]
