"""Tumbling counts per minute of event time, exactly once, in Trident.

    trident run examples/trident_windowed_count.py [--state redis://127.0.0.1:6379/0]

clicks (page, ts in ms; a few arrive out of order, two too late)
  -> tumbling_window(1 minute, event time on ts, lag 10 s) -> Aggregate: (minute, page, count)
  -> group_by(minute, page) -> persistent_aggregate(Sum) into "clicks-per-minute"

The window stage keeps its open minutes in the map "click-windows" (the topology's state:
in memory, or Redis -- then a restarted driver resumes them). A minute fires once the
watermark (the newest time seen minus the lag) passes its end, as a function of the
batches it covers: a replayed batch fires the same minutes, and the persistent state takes
each once. A click older than the watermark is late: counted, logged and dropped.
"""

import random

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseAggregator, Sum, TridentTopology, state
from trident.windowing import Duration, WindowsStoreFactory

PAGES = ["/", "/docs", "/pricing", "/blog"]
MINUTE = 60_000


def make_clicks(n=600, seed=5):
    rng = random.Random(seed)
    clicks = [(rng.choice(PAGES), i * 1_000 + rng.randint(-5_000, 5_000)) for i in range(n)]   # out of order
    clicks.insert(300, ("/late", 100_000))        # two clicks minutes behind the others: late
    clicks.insert(450, ("/late", 200_000))
    return clicks


class PerPage(BaseAggregator):
    """Per window: (minute, page, clicks)."""

    def init(self, batch_id, collector):
        return {}

    def aggregate(self, acc, tuple, collector):
        acc[(tuple["ts"] // MINUTE, tuple["page"])] = acc.get((tuple["ts"] // MINUTE, tuple["page"]), 0) + 1

    def complete(self, acc, collector):
        for (minute, page), n in sorted(acc.items()):
            collector.emit((minute, page, n))


def build_topology(topology_id="trident-windowed-count"):
    t = TridentTopology(topology_id)
    (t.new_stream("clicks", MemoryTransactionalSpout(make_clicks(), Fields("page", "ts"), 25))
     .tumbling_window(Duration(1, "minutes"), WindowsStoreFactory("click-windows"), Fields("page", "ts"), PerPage(),
                      Fields("minute", "page", "n"), timestamp_field="ts", lag=Duration(10, "seconds"))
     .group_by(Fields("minute", "page"))
     .persistent_aggregate(state.transactional("clicks-per-minute"), Fields("n"), Sum(), Fields("count")))
    return t.build()


def report(result):
    keys = [(m, p) for m in range(12) for p in PAGES]
    got = dict(zip(keys, result.map_state("clicks-per-minute").multi_get(keys), strict=True))
    for m in range(12):
        row = {p: got[(m, p)] for p in PAGES if got[(m, p)]}
        if row:
            print(f"minute {m:>2}: {row}")
    rec = result.map_state("click-windows").multi_get(["window:0"])[0]
    print(f"late clicks dropped: {rec['late']}; windows fired: {rec['fired']}; still open: {len(rec['events'])} clicks")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
