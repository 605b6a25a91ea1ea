"""A Trident windowed count for the driver-SIGKILL test (``trident run`` loads it in a child):
tumbling windows of 5 tuples, sliding event-time windows over two partitions, and session
windows per user (a word's index mod 3), each window's result summed into a persistent map
under the window's id -- a window fired twice into the state would double its sum; an
interval join of the users' words within 300 ms, and a join of the users' words in sliding
windows of 1 s every 500 ms, each counted per word."""

from spouts import MemoryTransactionalSpout
from transactional import Fields
from trident import BaseAggregator, BaseFunction, Count, Sum, TridentTopology, state
from trident.windowing import Duration, SlidingDurationWindow, WindowsStoreFactory

DATA = {p: [(f"w{p}-{i}", p * 100 + i * 250) for i in range(40)] for p in range(2)}
TAKE = 3


class FirstAndCount(BaseAggregator):
    """Per window: (the id of its first tuple, how many tuples)."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        collector.emit((min(acc), len(acc)))


class UserOf(BaseFunction):
    """A user per word: its index mod 3 (each user clicks every 750 ms in each partition)."""

    def execute(self, tuple, collector):
        collector.emit((f"u{int(tuple[0].split('-')[1]) % 3}",))


def build_topology():
    t = TridentTopology("trident-window-kill")
    s = t.new_stream("words", MemoryTransactionalSpout(DATA, Fields("word", "ts"), TAKE)).parallelism_hint(2)
    (s.tumbling_window(5, WindowsStoreFactory("tumbling"), Fields("word"), FirstAndCount(), Fields("first", "n"))
     .group_by(Fields("first")).persistent_aggregate(state.transactional("fired"), Fields("n"), Sum(), Fields("n")))
    (s.sliding_window(Duration(2, "s"), Duration(1, "s"), WindowsStoreFactory("sliding"), Fields("word"),
                      FirstAndCount(), Fields("first", "n"), timestamp_field="ts", lag=Duration(500))
     .group_by(Fields("first")).persistent_aggregate(state.transactional("fired_time"), Fields("n"), Sum(),
                                                      Fields("n")))
    (s.each(Fields("word"), UserOf(), Fields("user")).group_by(Fields("user"))
     .session_window(Duration(500), WindowsStoreFactory("sessions"), Fields("word"), FirstAndCount(),
                     Fields("first", "n"), timestamp_field="ts", lag=Duration(300))
     .group_by(Fields("first")).persistent_aggregate(state.transactional("fired_session"), Fields("n"), Sum(),
                                                      Fields("n")))
    users = s.each(Fields("word"), UserOf(), Fields("user"))
    a = users.project(Fields("word", "ts", "user"))
    b = users.project(Fields("user", "ts", "word"))
    (t.interval_join(a, Fields("user"), "ts", b, Fields("user"), "ts", Duration(300), Duration(300),
                     WindowsStoreFactory("joins"), Fields("word", "ts", "user", "user_b", "ts_b", "word_b"),
                     lag=Duration(300))
     .group_by(Fields("word")).persistent_aggregate(state.transactional("fired_join"), Count(), Fields("n")))
    (t.window_join(a, b, SlidingDurationWindow.of(Duration(1, "s"), Duration(500)), Fields("user"), Fields("user"),
                   Fields("user", "word", "ts", "ts_b", "word_b"), WindowsStoreFactory("wjoins"),
                   timestamp_fields="ts", lag=Duration(300))
     .group_by(Fields("word")).persistent_aggregate(state.transactional("fired_wjoin"), Count(), Fields("n")))
    return t.build()
