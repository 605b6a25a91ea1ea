"""transactional.testing.TopologyTestDriver: a core topology run in process with its input
piped and its processing time advanced by hand -- windows fire at the scripted times, every
stream is observable, and the run needs no server and no sleeping."""

from __future__ import annotations

from typing import Any

from transactional import Fields, TopologyBuilder
from transactional.testing import TopologyTestDriver
from transactional.windowing import BaseWindowedBolt, Count, Duration


class Words(BaseWindowedBolt):
    """Emits each window's words, start and end."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, window: Any) -> None:
        self.collector.emit((" ".join(t[0] for t in window.get()), window.get_start_timestamp(),
                             window.get_end_timestamp()), anchors=window.get())

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("words", "start", "end"))


WORD = Fields("word")


def builder(d: TopologyTestDriver, bolt: BaseWindowedBolt, fields: Fields = WORD) -> TopologyBuilder:
    b = TopologyBuilder(d.name)
    b.set_spout("s", d.input("s", fields))
    b.set_bolt("w", bolt).global_grouping("s")
    return b


def test_processing_time_windows_fire_at_the_times_the_test_sets() -> None:
    d = TopologyTestDriver("ptime")
    d.pipe("s", ["a", "b"]).advance_time(5).pipe("s", ["c"]).advance_time(10).pipe("s", ["d"])
    r = d.run(builder(d, Words().with_tumbling_window(Duration(10, "s"))))
    # a, b at 0 s and c at 5 s share [0, 10 s); d at 15 s fires when the input ends
    assert d.emitted("w") == [("a b c", 0, 10_000), ("d", 10_000, 20_000)]
    assert d.emitted("s") == [("a",), ("b",), ("c",), ("d",)]
    assert d.acked("s") == [(0, 0), (0, 1), (1, 0), (2, 0)] and d.failed("s") == []
    assert r.batches_committed == 4                     # one per step, and one as the input ended


def test_a_step_of_time_alone_fires_the_windows_due_then() -> None:
    d = TopologyTestDriver("tick")
    d.pipe("s", ["a"]).advance_time(3).pipe("s", ["b"]).advance_time(30)
    d.run(builder(d, Words().with_window(Duration(4, "s"), Duration(2, "s"))))
    # windows of 4 s every 2 s: a at 0 s, b at 3 s; the last step (33 s) fires the rest
    assert d.emitted("w") == [("a", -2000, 2000), ("a b", 0, 4000), ("b", 2000, 6000)]


def test_event_time_and_the_late_stream_through_the_driver() -> None:
    d = TopologyTestDriver("event")
    d.pipe("s", [("a", 1000), ("b", 2500), ("c", 1500)]).pipe("s", [])
    d.advance_time(1).pipe("s", [("d", 1900), ("e", 4200)])
    bolt = Words().with_tumbling_window(Duration(2, "s")).with_timestamp_field("ts").with_lag(Duration(500)) \
        .with_late_tuple_stream("late")
    d.run(builder(d, bolt, Fields("word", "ts")))
    assert d.emitted("w") == [("a c", 0, 2000), ("b", 2000, 4000), ("e", 4000, 6000)]
    assert d.emitted("w", "late") == [(("d", 1900),)]


def test_count_windows_through_the_driver_follow_storm() -> None:
    d = TopologyTestDriver("count")
    d.pipe("s", [str(i) for i in range(1, 8)])
    d.run(builder(d, Words().with_window(Count(5), Count(2))))
    assert [w for w, _, _ in d.emitted("w")] == ["1 2", "1 2 3 4", "2 3 4 5 6", "3 4 5 6 7"]


class Session(BaseWindowedBolt):
    """Emits each session: its key, clicks, start and end."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, window: Any) -> None:
        self.collector.emit((window.get_key(), [t[1] for t in window.get()], window.get_start_timestamp(),
                             window.get_end_timestamp()), anchors=window.get())

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("user", "clicks", "start", "end"))


def test_session_windows_per_user_merge_when_a_late_click_bridges_them() -> None:
    d = TopologyTestDriver("sessions")
    # one micro-batch per step; the watermark is the greatest timestamp minus the lag (10 s)
    d.pipe("s", [("ann", 1000), ("bob", 1500), ("ann", 3000)])           # watermark -7000
    d.advance_time(1).pipe("s", [("ann", 12_000), ("bob", 16_000)])     # 6000: nothing ended yet
    d.advance_time(1).pipe("s", [("ann", 7500), ("cid", 31_000)])       # 21 000; ann 7500 bridges
    d.advance_time(1).pipe("s", [("ann", 5000), ("bob", 60_000)])       # 50 000; ann 5000 is late
    bolt = Session().with_session_window(Duration(5, "s"), key_field="user").with_timestamp_field("ts") \
        .with_lag(Duration(10, "s")).with_late_tuple_stream("late")
    r = d.run(builder(d, bolt, Fields("user", "ts")))
    assert d.emitted("w") == [
        ("ann", [1000, 3000, 12_000, 7500], 1000, 17_000),    # [1000, 8000) and [12 000, 17 000) merged
        ("bob", [1500], 1500, 6500), ("bob", [16_000], 16_000, 21_000),
        ("cid", [31_000], 31_000, 36_000),
        ("bob", [60_000], 60_000, 65_000)]                     # fired as the input ended
    assert d.emitted("w", "late") == [(("ann", 5000),)]
    assert sorted(d.acked("s")) == [(s, i) for s, n in enumerate([3, 2, 2, 2]) for i in range(n)]
    assert r.failed == {"s": 0}
