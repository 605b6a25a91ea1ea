"""trident.testing.TopologyTestDriver: a Trident topology run in process, one txid a step,
with its processing time and its event-time watermark set by hand -- windows, sessions,
TTL and interval joins fire at the scripted times, every tapped stream and every map is
readable, a replayed txid is recorded once, and nothing waits on a clock."""

from __future__ import annotations

from typing import Any

import pytest

from transactional import ConfigError, FailedException, Fields, TopologyConfig
from trident import BaseAggregator, BaseFilter, Count, TridentTopology, state
from trident.testing import TopologyTestDriver
from trident.windowing import Duration, SlidingCountWindow, WindowsStoreFactory


class Words(BaseAggregator):
    """Per window: its words joined, and its bounds (collector.window)."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(str(tuple[0]))

    def complete(self, acc, collector):
        w = collector.window
        collector.emit((" ".join(acc), w.get_start_timestamp(), w.get_end_timestamp()))


OUT = Fields("words", "start", "end")
FAILED: set[str] = set()


class FailOnce(BaseFilter):
    """FailedException the first time it sees ``word`` in a tuple (its txid is replayed)."""

    def __init__(self, key: str, word: str) -> None:
        self.key, self.word = key, word

    def is_keep(self, t):
        if self.word in t[0] and self.key not in FAILED:
            FAILED.add(self.key)
            raise FailedException("once")
        return True


def test_processing_time_windows_fire_at_the_times_the_test_sets() -> None:
    d = TopologyTestDriver("ptime")
    t = TridentTopology(d.name)
    s = t.new_stream("words", d.input("words", Fields("word")))
    d.tap(s.tumbling_window(Duration(10, "s"), WindowsStoreFactory("w"), Fields("word"), Words(), OUT), "windows")
    d.pipe("words", ["a", "b"]).advance_time(5).pipe("words", ["c"]).advance_time(10).pipe("words", ["d"])
    d.advance_time(10)
    r = d.run(t)
    # txids 1..4 at 0, 5, 15, 25 s: [0, 10 s) fires at txid 3 (15 s), [10, 20 s) at txid 4
    assert d.emitted_by_txid("windows") == {3: [("a b c", 0, 10_000)], 4: [("d", 10_000, 20_000)]}
    assert r.batches_committed == 4 and [d.txid_time(i) for i in (1, 2, 3, 4)] == [0, 5, 15, 25]
    assert d.window_store("w")["window:0"]["events"] == [] and d.window_store("w")["window:0"]["fired"] == 2


def test_a_hand_set_watermark_fires_event_time_windows_and_sends_later_tuples_to_the_late_stream() -> None:
    d = TopologyTestDriver("event")
    t = TridentTopology(d.name)
    s = t.new_stream("words", d.input("words", Fields("word", "ts")))
    d.tap(s.tumbling_window(Duration(2, "s"), WindowsStoreFactory("ev"), Fields("word"), Words(), OUT,
                            timestamp_field="ts", late_stream="late"), "windows")
    d.tap(t.late_stream("late"), "late")
    d.pipe("words", [("a", 1000), ("b", 2500), ("c", 1500)])     # txid 1: the records' watermark 2500
    d.advance_watermark(4000)                                      # txid 2: [2 s, 4 s) ends too
    d.pipe("words", [("d", 2400), ("e", 4100)])                     # still txid 2: d is late (below 2500)
    d.advance_watermark(6000)                                      # txid 3: [4 s, 6 s) fires, no record needed
    d.run(t)
    assert d.emitted_by_txid("windows") == {1: [("a c", 0, 2000)], 2: [("b", 2000, 4000)],
                                            3: [("e", 4000, 6000)]}
    assert d.emitted("late") == [("d", 2400)]
    assert d.window_store("ev")["window:0"]["late"] == 1


def test_the_watermark_waits_for_the_partition_that_lags_until_the_test_moves_it() -> None:
    d = TopologyTestDriver("lag")
    t = TridentTopology(d.name)
    s = t.new_stream("words", d.input("words", Fields("word", "ts"), partitions=2)).parallelism_hint(2)
    d.tap(s.tumbling_window(Duration(1, "s"), WindowsStoreFactory("wm"), Fields("word"), Words(), OUT,
                            timestamp_field="ts"), "windows")
    d.pipe("words", [("a0", 500), ("a1", 5000)], partition=0).pipe("words", [("b0", 100)], partition=1)
    d.next_batch().pipe("words", [("a2", 6000)], partition=0)          # partition 1 sends nothing
    d.advance_watermark(3000)
    d.run(t)
    # partition 1 held the watermark at 100 for two txids; the hand-set 3000 fires [0, 1 s)
    assert d.emitted_by_txid("windows") == {3: [("a0 b0", 0, 1000)]}
    assert sorted(d.window_store("wm")["window:0"]["maxima"].values()) == [100, 6000]


class Clicks(BaseAggregator):
    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        w = collector.window
        collector.emit((acc, w.get_start_timestamp(), w.get_end_timestamp()))


def test_sessions_per_user_close_when_the_test_moves_the_watermark_past_their_gap() -> None:
    d = TopologyTestDriver("sessions")
    t = TridentTopology(d.name)
    clicks = t.new_stream("clicks", d.input("clicks", Fields("user", "ts")))
    sessions = clicks.group_by(Fields("user")).session_window(
        Duration(5, "s"), WindowsStoreFactory("s"), Fields("ts"), Clicks(), Fields("clicks", "start", "end"),
        timestamp_field="ts", late_stream="late")
    d.tap(sessions, "sessions")
    d.tap(t.late_stream("late"), "late")
    d.pipe("clicks", [("ann", 1000), ("bob", 1500), ("ann", 3000)])
    d.next_batch().pipe("clicks", [("ann", 12_000), ("ann", 7500)])      # 7500 bridges ann's two sessions
    d.advance_watermark(20_000).pipe("clicks", [("bob", 2000), ("cid", 30_000)])   # bob 2000: late
    d.advance_watermark(40_000)
    d.run(t)
    assert d.emitted_by_txid("sessions") == {
        2: [("bob", [1500], 1500, 6500)],                           # the records' watermark 12 000
        3: [("ann", [1000, 3000, 12_000, 7500], 1000, 17_000)],
        4: [("cid", [30_000], 30_000, 35_000)]}
    assert d.emitted("late") == [("bob", 2000)]


def test_a_ttl_expires_by_the_drivers_processing_time() -> None:
    d = TopologyTestDriver("ttl")
    t = TridentTopology(d.name)
    (t.new_stream("words", d.input("words", Fields("word")))
     .group_by(Fields("word")).persistent_aggregate(state.transactional("counts", ttl_secs=15), Count(),
                                                    Fields("count")))
    d.pipe("words", ["a"]).advance_time(10).pipe("words", ["a"]).advance_time(10).pipe("words", ["b"])
    d.advance_time(20).pipe("words", ["a"]).advance_time(10).pipe("words", ["b"])
    d.run(t)
    # a: 1 at 0 s, 2 at 10 s (expires 25 s), gone by 40 s: 1 again; b: 1 at 20 s, gone by 50 s
    assert d.map_state("counts") == {"a": 1, "b": 1}


ORDERS = [("o1", 1000), ("o2", 2000), ("o3", 5000)]
PAYMENTS = [("p1", "o1", 3000), ("p2", "o2", 15_000), ("p3", "o3", 9000)]


def test_an_interval_join_drops_rows_once_the_hand_set_watermark_passes_their_bound() -> None:
    d = TopologyTestDriver("ijoin")
    t = TridentTopology(d.name)
    orders = t.new_stream("orders", d.input("orders", Fields("order_id", "ts")))
    payments = t.new_stream("payments", d.input("payments", Fields("pay_id", "order_id", "ts")))
    out = Fields("order_id", "ts", "pay_id", "pay_order", "pay_ts")
    d.tap(t.interval_join(orders, Fields("order_id"), "ts", payments, Fields("order_id"), "ts", Duration(10, "s"),
                          Duration(0), WindowsStoreFactory("paid"), out, late_stream="late"), "pairs")
    d.tap(t.late_stream("late"), "late")
    d.pipe("orders", ORDERS).pipe("payments", PAYMENTS[:1])
    d.advance_watermark(12_500).pipe("payments", PAYMENTS[1:])     # then o1, o2 (ts + 10 s below it) leave
    d.next_batch().pipe("payments", [("p4", "o3", 12_000)])        # below 12 500: late
    d.run(t)
    assert d.emitted_by_txid("pairs") == {1: [("o1", 1000, "p1", "o1", 3000)], 2: [("o3", 5000, "p3", "o3", 9000)]}
    assert d.emitted("late") == [("b", ["p4", "o3", 12_000])]
    rows = d.window_store("paid")["ijoin:0"]["rows"]
    assert sorted(x[3][0] for x in rows) == ["o3", "p2"]


def test_a_replayed_txid_is_recorded_once() -> None:
    d = TopologyTestDriver("replay")
    t = TridentTopology(d.name)
    s = t.new_stream("words", d.input("words", Fields("word")))
    w = s.window(SlidingCountWindow.of(4, 2), WindowsStoreFactory("w"), Fields("word"), Words(), OUT)
    d.tap(w.each(OUT, FailOnce(d.name, "w3")), "windows")
    for i in range(6):
        d.next_batch().pipe("words", [f"w{i}"]) if i else d.pipe("words", ["w0"])
    r = d.run(t)
    assert d.name in FAILED and r.attempts > r.batches_committed
    assert [w for w, _, _ in d.emitted("windows")] == ["w0 w1", "w0 w1 w2 w3", "w2 w3 w4 w5"]


def test_misuse_is_refused_naming_the_fix() -> None:
    d = TopologyTestDriver("bad")
    with pytest.raises(ConfigError, match=r"pipe\('x'\): no input of that name; make its spout with input"):
        d.pipe("x", [1])
    t = TridentTopology(d.name)
    s = t.new_stream("s", d.input("s", Fields("w"), partitions=2))
    with pytest.raises(ConfigError, match=r"the input has partitions 0..1"):
        d.pipe("s", [1], partition=2)
    d.tap(s, "s")
    with pytest.raises(ConfigError, match=r"that label is taken"):
        d.tap(s, "s")
    with pytest.raises(ConfigError, match=r"the driver has not run yet"):
        d.map_state("m")
    with pytest.raises(ConfigError, match=r"runs a TridentTopology"):
        d.run(Any)                                                     # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"got executor='spark': leave it 'in-process'"):
        d.run(t, TopologyConfig(executor="spark"))
