"""Trident session windows per user (a Redis windows store) whose fired sessions are
counted into a transactional map ``fired``, for the window rebalance SIGKILL test
(tests/transactional/engine/test_rebalance_windows.py). ``TRIDENT_TEST_TOPOLOGY``: the id."""

import os

from spouts import MemoryTransactionalSpout
from transactional import Fields
from transactional.windowing import Duration
from trident import Count, TridentTopology, state
from trident.operation import BaseAggregator
from trident.windowing import WindowsStoreFactory

#: clicks (user, ts ms), 3 a batch: sessions (gap 5 s) open across batches and close later
CLICKS = [(u, 1000 * (i // 2) + (300 if u == "bob" else 0)) for i, u in
          enumerate(["ann", "bob", "cid"] * 4 + ["ann"] * 3 + ["bob", "cid", "ann"] * 3)]
CLICKS = [(u, ts if i < 15 else ts + 20_000) for i, (u, ts) in enumerate(CLICKS)] + \
    [("dan", 60_000 + 1000 * i) for i in range(6)]

#: the window stage's component id (the window and the partial count of its output)
WINDOW = "window(WindowSpec) -> aggregate(Count)"


class Clicks(BaseAggregator):
    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        collector.emit((" ".join(map(str, acc)),))


def build_topology():
    t = TridentTopology(os.environ["TRIDENT_TEST_TOPOLOGY"])
    (t.new_stream("clicks", MemoryTransactionalSpout(CLICKS, Fields("user", "ts"), 3))
     .group_by(Fields("user"))
     .session_window(Duration(5, "s"), WindowsStoreFactory("sessions"), Fields("ts"), Clicks(), Fields("clicks"),
                     timestamp_field="ts", lag=Duration(2, "s"))
     .group_by(Fields("user", "clicks")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n")))
    return t.build()
