"""Ad impressions joined with the clicks on them in the same minute, exactly once, in Trident.

    trident run examples/ad_clicks_window_join.py [--state redis://127.0.0.1:6379/0]

impressions (imp, ad, shown)      clicks (click, imp, at)
  -> window_join on imp, tumbling 1-minute windows of event time (shown, at), left join
  -> (imp, ad, shown, click, at, start, end)       click None: an impression not clicked
  -> group_by(ad, clicked) -> persistent_aggregate(Count) into "impressions-per-ad"

Every impression lands in one window; a click counts for it only in the same minute (a
click in the next minute does not: that is what an interval join is for). A left join
keeps the impressions without a click (click and at None), so the counts give a
click-through rate per ad. A click below the watermark is late and flows on the stream
"late-clicks" instead.
"""

import random

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseFunction, Count, TridentTopology, state
from trident.windowing import Duration, TumblingDurationWindow, WindowsStoreFactory

ADS = ["ad1", "ad2", "ad3"]
OUT = Fields("imp", "ad", "shown", "click", "at", "start", "end")


def make_data(n=300, seed=5):
    rng = random.Random(seed)
    impressions = [(f"i{i}", rng.choice(ADS), i * 1000) for i in range(n)]
    clicks = [(f"c{imp[1:]}", imp, shown + rng.randint(1000, 20_000))
              for imp, _, shown in impressions if rng.random() < 0.3]
    clicks.sort(key=lambda c: c[2])
    return impressions, clicks


class Clicked(BaseFunction):
    """Whether the impression was clicked in its minute."""

    def execute(self, tuple, collector):
        collector.emit((tuple[0] is not None,))


def build_topology(topology_id="ad-clicks-window-join"):
    impressions, clicks = make_data()
    t = TridentTopology(topology_id)
    shown = t.new_stream("impressions", MemoryTransactionalSpout(impressions, Fields("imp", "ad", "shown"), 20))
    clicked = t.new_stream("clicks", MemoryTransactionalSpout(clicks, Fields("click", "imp", "at"), 6))
    (t.window_join(shown, clicked, TumblingDurationWindow.of(Duration(1, "minutes")), Fields("imp"), Fields("imp"),
                   OUT, WindowsStoreFactory("ad-clicks"), join_type="left", timestamp_fields=("shown", "at"),
                   lag=Duration(30, "seconds"), late_stream="late-clicks")
     # (imp, ad, shown, click, at, start, end)
     .each(Fields("click"), Clicked(), Fields("clicked"))
     .group_by(Fields("ad", "clicked"))
     .persistent_aggregate(state.transactional("impressions-per-ad"), Count(), Fields("n")))
    return t.build()


def report(result):
    counts = result.map_state("impressions-per-ad")
    for ad in ADS:
        clicked, missed = counts.multi_get([[ad, True], [ad, False]])
        print(f"{ad}: {clicked or 0} clicked in their minute, {missed or 0} not")
    rec = result.map_state("ad-clicks").multi_get(["wjoin:0"])[0]
    print(f"windows joined: {rec['fired']}; tuples still in an open window: {len(rec['events'])}; late: {rec['late']}")


if __name__ == "__main__":
    from transactional.ops.cli import run_example

    run_example(build_topology, report)
