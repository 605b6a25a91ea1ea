"""Trident's join over windows (TridentTopology.window_join), driven by
trident.testing.TopologyTestDriver: ad impressions joined with clicks in the same
tumbling or sliding window by ad id, inner and left, by event time or processing time
or count; late tuples of either side on a stream; a replayed txid joins the same
windows once; and the errors."""

from __future__ import annotations

import pytest

from transactional import ConfigError, FailedException, Fields
from trident import BaseFilter, Count, TridentTopology, state
from trident.testing import TopologyTestDriver
from trident.windowing import (
    Duration,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowsStoreFactory,
)

IMPRESSIONS = Fields("ad", "shown", "page")
CLICKS = Fields("click", "ad", "at")
OUT = Fields("ad", "shown", "page", "click", "at")
FAILED: set[str] = set()


def topology(d: TopologyTestDriver, window, **kw) -> TridentTopology:
    t = TridentTopology(d.name)
    a = t.new_stream("impressions", d.input("impressions", IMPRESSIONS))
    b = t.new_stream("clicks", d.input("clicks", CLICKS))
    out = kw.pop("out", OUT)
    d.tap(t.window_join(a, b, window, Fields("ad"), Fields("ad"), out, WindowsStoreFactory("joins"), **kw), "joined")
    return t


def test_an_event_time_tumbling_join_pairs_the_tuples_of_each_window_by_key() -> None:
    d = TopologyTestDriver("tumble")
    t = topology(d, TumblingDurationWindow.of(Duration(10, "s")), timestamp_fields=("shown", "at"),
                 out=Fields(*OUT, "start", "end"))
    d.pipe("impressions", [("ad1", 1000, "home"), ("ad2", 2000, "news"), ("ad1", 12_000, "home")])
    d.pipe("clicks", [("c1", "ad1", 4000), ("c2", "ad1", 9000), ("c3", "ad2", 11_000)])   # c3: the next window
    d.next_batch().pipe("clicks", [("c4", "ad1", 15_000)])
    d.advance_watermark(20_000)
    d.run(t)
    assert d.emitted_by_txid("joined") == {
        1: [("ad1", 1000, "home", "c1", 4000, 0, 10_000), ("ad1", 1000, "home", "c2", 9000, 0, 10_000)],
        3: [("ad1", 12_000, "home", "c4", 15_000, 10_000, 20_000)]}           # ad2's click was not in its window
    assert d.window_store("joins")["wjoin:0"]["events"] == [] and d.window_store("joins")["wjoin:0"]["fired"] == 2


def test_a_left_join_keeps_the_impressions_without_a_click_in_their_window() -> None:
    d = TopologyTestDriver("left")
    t = topology(d, TumblingDurationWindow.of(Duration(10, "s")), timestamp_fields=("shown", "at"), join_type="left")
    d.pipe("impressions", [("ad1", 1000, "home"), ("ad2", 2000, "news"), ("ad3", 3000, "blog")])
    d.pipe("clicks", [("c1", "ad1", 4000), ("c2", "ad2", 12_000)])
    d.advance_watermark(10_000)
    d.run(t)
    assert d.emitted("joined") == [("ad1", 1000, "home", "c1", 4000), ("ad2", 2000, "news", None, None),
                                   ("ad3", 3000, "blog", None, None)]


def test_a_sliding_window_pairs_the_tuples_in_every_window_holding_both() -> None:
    d = TopologyTestDriver("slide")
    t = topology(d, SlidingDurationWindow.of(Duration(10, "s"), Duration(5, "s")), timestamp_fields=("shown", "at"),
                 out=Fields(*OUT, "start", "end"))
    d.pipe("impressions", [("ad1", 6000, "home")]).pipe("clicks", [("c1", "ad1", 8000), ("c2", "ad1", 12_000)])
    d.advance_watermark(30_000)
    d.run(t)
    # windows [0, 10 s), [5 s, 15 s), [10 s, 20 s): the impression is in the first two
    assert d.emitted("joined") == [("ad1", 6000, "home", "c1", 8000, 0, 10_000),
                                   ("ad1", 6000, "home", "c1", 8000, 5000, 15_000),
                                   ("ad1", 6000, "home", "c2", 12_000, 5000, 15_000)]


def test_late_tuples_of_either_side_go_to_the_late_stream() -> None:
    d = TopologyTestDriver("late")
    t = topology(d, TumblingDurationWindow.of(Duration(10, "s")), timestamp_fields=("shown", "at"), lag=Duration(1, "s"),
                 late_stream="late")
    d.tap(t.late_stream("late"), "late")
    d.pipe("impressions", [("ad1", 15_000, "home")]).pipe("clicks", [("c1", "ad1", 16_000)])   # watermark 14 s
    d.next_batch().pipe("impressions", [("ad2", 3000, "news")]).pipe("clicks", [("c2", "ad1", 13_000)])
    d.advance_watermark(20_000)
    d.run(t)
    # within a txid the rows come by input, in a fixed order (here the clicks' first)
    assert d.emitted("late") == [("b", ["c2", "ad1", 13_000]), ("a", ["ad2", 3000, "news"])]
    assert d.emitted("joined") == [("ad1", 15_000, "home", "c1", 16_000)]
    assert d.window_store("joins")["wjoin:0"]["late"] == 2


def test_processing_time_and_count_windows() -> None:
    d = TopologyTestDriver("ptime")
    t = topology(d, TumblingDurationWindow.of(Duration(10, "s")))
    d.pipe("impressions", [("ad1", 0, "home")]).advance_time(4).pipe("clicks", [("c1", "ad1", 0)])
    d.advance_time(10).pipe("clicks", [("c2", "ad1", 0)]).advance_time(10)
    d.run(t)
    assert d.emitted_by_txid("joined") == {3: [("ad1", 0, "home", "c1", 0)]}     # txid 3 at 14 s: [0, 10 s) fires
    c = TopologyTestDriver("count")
    t = topology(c, TumblingCountWindow.of(3))
    c.pipe("impressions", [("ad1", 0, "home")]).next_batch()
    c.pipe("clicks", [("c1", "ad1", 0), ("c2", "ad1", 0), ("c3", "ad1", 0)])
    c.run(t)
    assert c.emitted("joined") == [("ad1", 0, "home", "c1", 0), ("ad1", 0, "home", "c2", 0)]   # c3: the next window


class FailOnce(BaseFilter):
    def __init__(self, key: str) -> None:
        self.key = key

    def is_keep(self, t):
        if self.key not in FAILED:
            FAILED.add(self.key)
            raise FailedException("once")
        return True


def test_a_replayed_txid_joins_the_same_windows_once() -> None:
    d = TopologyTestDriver("replay")
    t = TridentTopology(d.name)
    a = t.new_stream("impressions", d.input("impressions", IMPRESSIONS))
    b = t.new_stream("clicks", d.input("clicks", CLICKS))
    joined = t.window_join(a, b, TumblingDurationWindow.of(Duration(10, "s")), Fields("ad"), Fields("ad"), OUT,
                           WindowsStoreFactory("joins"), timestamp_fields=("shown", "at"))
    joined.each(OUT, FailOnce(d.name)).group_by(Fields("click")) \
        .persistent_aggregate(state.transactional("pairs"), Count(), Fields("n"))
    d.pipe("impressions", [("ad1", 1000, "home")]).pipe("clicks", [("c1", "ad1", 4000)])
    d.advance_watermark(10_000).pipe("clicks", [("c2", "ad1", 12_000)]).pipe("impressions", [("ad1", 13_000, "x")])
    d.advance_watermark(20_000)
    r = d.run(t)
    assert d.name in FAILED and r.attempts > r.batches_committed
    assert d.map_state("pairs") == {"c1": 1, "c2": 1}


def test_bad_window_joins_are_refused_naming_the_fix() -> None:
    d = TopologyTestDriver("bad")
    t = TridentTopology(d.name)
    a = t.new_stream("impressions", d.input("impressions", IMPRESSIONS))
    b = t.new_stream("clicks", d.input("clicks", CLICKS))
    w = TumblingDurationWindow.of(Duration(10, "s"))
    store = WindowsStoreFactory("j")
    with pytest.raises(ConfigError, match=r"out_fields name the key, then a's other fields, then b's \(5 in all"):
        t.window_join(a, b, w, Fields("ad"), Fields("ad"), Fields("ad"), store)
    with pytest.raises(ConfigError, match=r"join_type is 'inner' or 'left'; got 'outer'"):
        t.window_join(a, b, w, Fields("ad"), Fields("ad"), OUT, store, join_type="outer")
    with pytest.raises(ConfigError, match=r"a late_stream needs event time: give timestamp_fields"):
        t.window_join(a, b, w, Fields("ad"), Fields("ad"), OUT, store, late_stream="late")
    with pytest.raises(ConfigError, match=r"window_join reads field\(s\) \['when'\]"):
        t.window_join(a, b, w, Fields("ad"), Fields("ad"), OUT, store, timestamp_fields="when")
    with pytest.raises(ConfigError, match=r"takes a tumbling or sliding window config"):
        t.window_join(a, b, 10, Fields("ad"), Fields("ad"), OUT, store)
