"""Storm's ``WindowManagerTest`` sequences, ported (learned from, not copied): the core
window machine (``transactional.engine.core.window_keeper.WindowTask``) fed event by event,
with the watermark advanced by hand, fires the same windows with the same new and
expired tuples, and acks (Storm's ``onExpiry``) the same tuples in the same order.

Differences from Storm, by design: our duration windows are ``[end - length, end)`` (Storm:
``(end - length, end]``; no timestamp here sits on a boundary), and a time-triggered window
evicts right after it fires what no later window can hold (Storm at the next trigger); the
expired lists the bolt sees are the same."""

from __future__ import annotations

from typing import Any

from transactional.engine.core.task import CoreTuple
from transactional.engine.core.window_keeper import WindowTask
from transactional.tuples import Fields
from transactional.windowing import BaseWindowedBolt, Count, Duration

FIELDS = Fields("n", "ts")
HAND = Duration(10**9)       # a lag so long that only the watermark given by hand counts


class _Ids:
    def report(self, key: int, m: Any) -> Any:
        return m


class Collector:
    """What the window machine tells the bolt's collector: acks (Storm's onExpiry)."""

    def __init__(self) -> None:
        self.acked: list[int] = []
        self.ids = _Ids()

    def ack(self, t: CoreTuple) -> None:
        self.acked.append(t[0])

    def fail(self, t: CoreTuple) -> None:
        raise AssertionError(f"no tuple fails here: {t}")

    def emit(self, values: Any, anchors: Any = None, stream: str = "default") -> None:
        raise AssertionError(f"nothing is late here: {values}")


class Listener(BaseWindowedBolt):
    """Storm's test listener: each activation's tuples, new tuples and expired tuples."""

    def __init__(self) -> None:
        self.events: list[list[int]] = []
        self.new: list[list[int]] = []
        self.expired: list[list[int]] = []

    def execute(self, window: Any) -> None:
        self.events.append([t[0] for t in window.get()])
        self.new.append([t[0] for t in window.get_new()])
        self.expired.append([t[0] for t in window.get_expired()])


class Machine:
    """One windowed task, fed by hand: ``add(n, ts)``, ``watermark(ms)``."""

    def __init__(self, bolt: BaseWindowedBolt) -> None:
        assert isinstance(bolt, Listener)
        self.bolt, self.collector = bolt, Collector()
        self.task = WindowTask(None, "w", 0, bolt.window_config, lambda: 0.0)   # type: ignore[arg-type]
        self.task.begin(self.collector, bolt)
        self.key = 0

    def add(self, *events: tuple[int, int]) -> None:
        for n, ts in events:
            self.key += 1
            self.task.add(CoreTuple((n, ts), FIELDS, "s", "default", 0, {self.key: 1}, self.key))

    def watermark(self, ms: int) -> None:
        self.task.end(watermark=ms)
        self.task.begin(self.collector, self.bolt)

    def clear(self) -> None:
        self.bolt.events, self.bolt.new, self.bolt.expired = [], [], []
        self.collector.acked = []


def seq(a: int, b: int | None = None) -> list[int]:
    return list(range(a, (a if b is None else b) + 1))


def count_machine(length: int, slide: int) -> Machine:
    return Machine(Listener().with_window(Count(length), Count(slide)))


def event_machine(length: Count | Duration, slide: Count | Duration) -> Machine:
    return Machine(Listener().with_window(length, slide).with_timestamp_field("ts").with_lag(HAND))


def test_count_based_window_length_5_sliding_2() -> None:
    m = count_machine(5, 2)
    b = m.bolt
    m.add((1, 0), (2, 0))
    assert m.collector.acked == []
    assert (b.events[-1], b.new[-1], b.expired[-1]) == (seq(1, 2), seq(1, 2), [])
    m.add((3, 0), (4, 0))
    assert m.collector.acked == []
    assert (b.events[-1], b.new[-1], b.expired[-1]) == (seq(1, 4), seq(3, 4), [])
    m.add((5, 0), (6, 0))
    assert m.collector.acked == [1]
    assert (b.events[-1], b.new[-1], b.expired[-1]) == (seq(2, 6), seq(5, 6), [1])
    m.clear()
    m.add((7, 0))
    assert m.collector.acked == []                      # nothing leaves until the trigger
    m.add((8, 0))
    assert m.collector.acked == [2, 3]
    assert (b.events[-1], b.new[-1], b.expired[-1]) == (seq(4, 8), seq(7, 8), [2, 3])


def test_tumbling_count_window() -> None:
    m = count_machine(3, 3)
    b = m.bolt
    m.add((1, 0), (2, 0))
    assert b.events == [] and m.collector.acked == []
    m.add((3, 0))
    assert m.collector.acked == []
    assert (b.events[-1], b.new[-1], b.expired[-1]) == (seq(1, 3), seq(1, 3), [])
    m.clear()
    m.add((4, 0), (5, 0), (6, 0))
    assert m.collector.acked == seq(1, 3)
    assert (b.events, b.new, b.expired) == ([seq(4, 6)], [seq(4, 6)], [seq(1, 3)])


def test_event_time_based_window() -> None:
    m = event_machine(Duration(20), Duration(10))
    b = m.bolt
    m.add((1, 603), (2, 605), (3, 607))
    m.watermark(609)                                    # finds the next window end, fires nothing
    assert b.events == []
    m.add((4, 618), (5, 626), (6, 636))
    m.watermark(631)                                    # three windows
    assert b.events == [seq(1, 3), seq(1, 4), seq(4, 5)]
    assert b.expired == [[], [], seq(1, 3)]
    assert b.new == [seq(1, 3), [4], [5]]
    assert m.collector.acked == seq(1, 4)               # Storm: 1..3; 4 leaves at its next trigger
    m.add((7, 825), (8, 826), (9, 827), (10, 839))     # a gap in time
    m.clear()
    m.watermark(834)
    assert b.events == [seq(5, 6), [6], seq(7, 9)]
    assert b.expired == [[4], [5], []]                  # 6 left with an empty window (Storm drops it)
    assert b.new == [[6], [], seq(7, 9)]
    assert m.collector.acked == [5, 6]                  # Storm: 4, 5, 6


def test_count_based_window_with_event_ts() -> None:
    m = event_machine(Count(3), Duration(10))
    b = m.bolt
    m.add((1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 636))
    m.watermark(631)
    assert b.events == [seq(1, 3), seq(2, 4), seq(3, 5)]
    m.add((7, 665), (8, 666), (9, 667), (10, 679))
    m.clear()
    m.watermark(674)
    assert b.events == [seq(4, 6), seq(4, 6), seq(4, 6), seq(7, 9)]   # the same tuples in three windows


def test_count_based_trigger_with_event_ts() -> None:
    m = event_machine(Duration(20), Count(3))
    b = m.bolt
    m.add((1, 603), (2, 605), (3, 607), (4, 618), (5, 625), (6, 626), (7, 629), (8, 636))
    m.watermark(631)
    assert b.events == [seq(1, 3), seq(3, 6)]
    m.clear()                                           # our count trigger fires as the tuples come
    m.add((9, 665), (10, 666), (11, 667), (12, 669), (12, 679))
    m.watermark(674)
    assert b.events == [[9], seq(9, 12)]


def test_count_based_tumbling_with_same_event_ts() -> None:
    m = event_machine(Count(2), Count(2))
    m.add((1, 10), (2, 10), (3, 11), (4, 12), (5, 12), (6, 12), (7, 12), (8, 13), (9, 14), (10, 15))
    m.watermark(20)
    assert m.bolt.events == [seq(1, 2), seq(3, 4), seq(5, 6), seq(7, 8), seq(9, 10)]


def test_count_based_sliding_with_same_event_ts() -> None:
    m = event_machine(Count(5), Count(2))
    m.add((1, 10), (2, 10), (3, 11), (4, 12), (5, 12), (6, 12), (7, 12), (8, 13), (9, 14), (10, 15))
    m.watermark(20)
    assert m.bolt.events == [seq(1, 2), seq(1, 4), seq(2, 6), seq(4, 8), seq(6, 10)]


def test_event_time_lag_keeps_out_of_order_tuples_in_their_window() -> None:
    m = event_machine(Duration(20), Duration(10))
    m.add((1, 603), (2, 605), (3, 607), (4, 618), (5, 626), (6, 632), (7, 629), (8, 636))
    m.watermark(631)
    assert m.bolt.events == [seq(1, 3), seq(1, 4), [4, 5, 7]]


def test_the_end_of_the_input_fires_the_pending_windows_and_acks_every_tuple() -> None:
    m = count_machine(5, 2)
    m.add((1, 0), (2, 0), (3, 0))
    m.task.final = True
    m.watermark(0)
    assert m.bolt.events == [seq(1, 2), seq(1, 3)]      # 3 came after the last trigger: a last window
    assert m.collector.acked == seq(1, 3) and m.task.events == []
    e = event_machine(Duration(20), Duration(10))
    e.add((1, 603), (2, 617))
    e.task.final = True
    e.watermark(0)
    assert e.bolt.events == [[1], [1, 2], [2]] and e.collector.acked == [1, 2]
