"""Windows and tick tuples in core topologies (transactional.windowing, transactional.ticks):
count and duration windows, event time with lag, watermark and the late stream, acking as
tuples leave the window, FailedException failing a window, persistence in KeyValueState,
and the build-time refusals."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from spouts import MEMORY_SPOUT_LOGS, MemorySpout
from transactional import (
    BaseRichBolt,
    BaseStatefulBolt,
    ConfigError,
    FailedException,
    Fields,
    TopologyBuilder,
    TopologyConfig,
    TopologyError,
    is_tick,
    run_topology,
)
from transactional.windowing import BaseStatefulWindowedBolt, BaseWindowedBolt, Count, Duration

FIRED: dict[str, list] = {}
SEEN: dict[str, list] = {}


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(executor: str, **kw: Any) -> TopologyConfig:
    kw.setdefault("progress", False)
    kw.setdefault("message_timeout_secs", 30)
    kw.setdefault("idle_timeout_secs", 0.3)
    kw.setdefault("poll_interval_secs", 0.05)
    kw.setdefault("retry_backoff_secs", 0.05)
    return TopologyConfig(executor=executor, **kw)


def acks(name: str, kind: str) -> list:
    return sorted(m for e, m, _, _ in MEMORY_SPOUT_LOGS.get(name, []) if e == kind)


class Upper(BaseRichBolt):
    """A processing-phase bolt in front of the window (runs on the executor)."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        self.collector.emit(tuple.values, anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "ts"))


class Recorder(BaseWindowedBolt):
    """Records each window it sees under ``FIRED[name]``; emits its size anchored to it."""

    def __init__(self, name: str, fail_first: bool = False) -> None:
        self.name, self.fail_first = name, fail_first

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        got = FIRED.setdefault(self.name, [])
        if self.fail_first and not got:
            got.append("failed")
            raise FailedException("first window fails")
        got.append(([t[0] for t in window.get()], [t[0] for t in window.get_new()],
                     [t[0] for t in window.get_expired()], window.get_start_timestamp(), window.get_end_timestamp()))
        self.collector.emit((len(window.get()),), anchors=window.get())

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


class Sink(BaseRichBolt):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tuple):
        SEEN.setdefault(self.name, []).append((tuple.source_stream, tuple.values))
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        pass


def topology(name: str, items: list, bolt: BaseWindowedBolt, per_call: int = 100, upper: bool = True) -> Any:
    """spout -> [up, on the executors] -> w (global) -> sink, and late -> sink."""
    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout(items, Fields("word", "ts"), name=name, per_call=per_call), 1)
    src = "s"
    if upper:
        b.set_bolt("up", Upper(), 1).shuffle_grouping("s")
        src = "up"
    d = b.set_bolt("w", bolt, 1).global_grouping(src)
    b.set_bolt("sink", Sink(name), 1).shuffle_grouping("w")
    if bolt.window_config.late_stream:
        b.set_bolt("late", Sink(name), 1).shuffle_grouping("w", bolt.window_config.late_stream)
    assert d is not None
    return b.build()


def test_a_tumbling_count_window_fires_every_n_tuples_and_acks_them_as_they_leave(executor: str) -> None:
    name = uid("tumble")
    items = [(f"w{i}", i) for i in range(12)]
    r = run_topology(topology(name, items, Recorder(name).with_tumbling_window(Count(4)), per_call=5, upper=False),
                     config(executor))
    windows = [w[0] for w in FIRED[name]]
    assert windows == [["w0", "w1", "w2", "w3"], ["w4", "w5", "w6", "w7"], ["w8", "w9", "w10", "w11"]]
    assert [w[2] for w in FIRED[name]] == [[], ["w0", "w1", "w2", "w3"], ["w4", "w5", "w6", "w7"]]
    assert acks(name, "ack") == list(range(12)) and acks(name, "fail") == []
    assert sorted(v for _, v in SEEN[name]) == [(4,), (4,), (4,)]
    assert r.pending == {"s": 0}


def test_a_sliding_count_window_holds_the_last_n_and_slides_by_s(executor: str) -> None:
    name = uid("slide")
    items = [(f"w{i}", i) for i in range(8)]
    run_topology(topology(name, items, Recorder(name).with_window(Count(4), Count(2)), upper=False),
                 config(executor), max_batches=1)
    got = FIRED[name]
    assert [w[0] for w in got] == [["w0", "w1"], ["w0", "w1", "w2", "w3"], ["w2", "w3", "w4", "w5"],
                                   ["w4", "w5", "w6", "w7"]]
    assert [w[1] for w in got] == [["w0", "w1"], ["w2", "w3"], ["w4", "w5"], ["w6", "w7"]]
    assert [w[2] for w in got] == [[], [], ["w0", "w1"], ["w2", "w3"]]
    # as Storm's WindowManager: a tuple leaves (and is acked) at the trigger that evicts it;
    # w4..w7 are in the last window fired and still in the window
    assert acks(name, "ack") == [0, 1, 2, 3]


def test_a_sliding_count_window_follows_storms_window_manager_and_the_end_of_the_input_fires_the_rest(
        executor: str) -> None:
    name = uid("storm")
    items = [(f"w{i}", i) for i in range(7)]
    r = run_topology(topology(name, items, Recorder(name).with_window(Count(5), Count(2)), upper=False),
                     config(executor))
    got = FIRED[name]
    # length 5 sliding 2 over 1, 2, 3...: [1,2], [1..4], [2..6] with [1] expired; then the input
    # ended with w6 after the last trigger: a last window fires, and every tuple is acked once
    assert [w[0] for w in got] == [["w0", "w1"], ["w0", "w1", "w2", "w3"], ["w1", "w2", "w3", "w4", "w5"],
                                   ["w2", "w3", "w4", "w5", "w6"]]
    assert [w[2] for w in got] == [[], [], ["w0"], ["w1"]]
    assert acks(name, "ack") == [0, 1, 2, 3, 4, 5, 6]     # each once
    assert r.pending == {"s": 0} and r.failed == {"s": 0}


def test_a_finite_event_time_run_fires_its_last_windows_at_the_end(executor: str) -> None:
    name = uid("evend")
    items = [("a", 1000), ("b", 2500), ("c", 4100)]
    bolt = Recorder(name).with_tumbling_window(Duration(2, "seconds")).with_timestamp_field("ts") \
        .with_lag(Duration(5, "seconds"))
    r = run_topology(topology(name, items, bolt, per_call=3, upper=False), config(executor))
    # the watermark never passed 0 (lag 5 s): every window fires when the input ends
    assert [(w[0], w[3], w[4]) for w in FIRED[name]] == [(["a"], 0, 2000), (["b"], 2000, 4000), (["c"], 4000, 6000)]
    assert acks(name, "ack") == [0, 1, 2] and r.pending == {"s": 0} and r.failed == {"s": 0}


def test_event_time_windows_fire_at_the_watermark_and_late_tuples_go_to_the_late_stream(executor: str) -> None:
    name = uid("event")
    # one source task per batch of 3 (per_call): the watermark moves at each micro-batch's end
    items = [("a", 1000), ("b", 2500), ("c", 1500),       # batch 1: max 2500, watermark 2500 - 500 = 2000
             ("d", 1900), ("e", 4200), ("f", 3100),       # d is late (1900 < 2000); watermark 3700
             ("g", 9000), ("h", 5100), ("i", 6000)]       # watermark 8500
    bolt = Recorder(name).with_tumbling_window(Duration(2, "seconds")).with_timestamp_field("ts") \
        .with_lag(Duration(500)).with_late_tuple_stream("late")
    run_topology(topology(name, items, bolt, per_call=3), config(executor, micro_batch_size=3), max_batches=3)
    got = [(sorted(w[0]), w[3], w[4]) for w in FIRED[name]]
    assert got == [(["a", "c"], 0, 2000), (["b", "f"], 2000, 4000), (["e", "h"], 4000, 6000), (["i"], 6000, 8000)]
    late = [v for s, v in SEEN[name] if s == "late"]
    assert late == [(("d", 1900),)]
    # every tuple acked: late ones at once, the others as their window left; g waits in its window
    assert acks(name, "ack") == [0, 1, 2, 3, 4, 5, 7, 8]


def test_a_sliding_duration_window_in_event_time_holds_each_tuple_in_length_over_slide_windows(executor: str) -> None:
    name = uid("evslide")
    items = [("a", 500), ("b", 1500), ("c", 2500), ("d", 3500), ("z", 10_000)]
    bolt = Recorder(name).with_window(Duration(2, "seconds"), Duration(1, "seconds")).with_timestamp_field("ts")
    run_topology(topology(name, items, bolt, per_call=5), config(executor), max_batches=1)
    got = [(sorted(w[0]), w[3], w[4]) for w in FIRED[name]]
    assert got == [(["a"], -1000, 1000), (["a", "b"], 0, 2000), (["b", "c"], 1000, 3000), (["c", "d"], 2000, 4000),
                   (["d"], 3000, 5000)]


def test_failed_exception_in_execute_fails_the_windows_tuples_and_their_replay_fills_a_new_window(executor: str) -> None:
    name = uid("failwin")
    items = [(f"w{i}", i) for i in range(4)]
    run_topology(topology(name, items, Recorder(name, fail_first=True).with_tumbling_window(Count(2)), upper=False),
                 config(executor))
    assert FIRED[name][0] == "failed"
    assert acks(name, "fail") == [0, 1]
    assert sorted(x for w in FIRED[name][1:] for x in w[0]) == ["w0", "w1", "w2", "w3"]
    assert acks(name, "ack") == [0, 1, 2, 3]


def test_tick_tuples_reach_every_task_once_per_micro_batch_after_the_interval(executor: str) -> None:
    name = uid("tick")

    class Ticks(BaseRichBolt):
        """Runs on the executors; says what ticks it got to a bolt on the driver."""

        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, tuple):
            if is_tick(tuple):
                self.collector.emit(("tick", tuple.values[0]))
            self.collector.ack(tuple)

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("what", "rate"))

    class Record(BaseStatefulBolt):                   # a stateful bolt: on the driver
        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, tuple):
            SEEN.setdefault(name, []).append((tuple[0], (tuple[1],)))
            self.collector.ack(tuple)

    b = TopologyBuilder(name)
    b.set_spout("s", MemorySpout([(i,) for i in range(5)], Fields("n"), name=name, per_call=1), 1)
    b.set_bolt("fast", Ticks(), 2).shuffle_grouping("s").add_configuration("topology.tick.tuple.freq.secs", 1e-6)
    b.set_bolt("slow", Ticks(), 1).shuffle_grouping("s")
    b.set_bolt("rec", Record(), 1).shuffle_grouping("fast").shuffle_grouping("slow")
    r = run_topology(b.build(), config(executor, micro_batch_size=1, tick_tuple_freq_secs=3600))
    # every micro-batch comes more than a microsecond after the last: each of fast's 2 tasks
    # gets one tick in each (also in those of no tuples that ticks make while tuples are
    # pending); slow's hour never passes
    assert r.batches_committed >= 5
    assert SEEN[name] == [("tick", (1e-6,))] * (2 * r.batches_committed)
    assert r.topology_id == name


def test_build_errors_name_the_bolt_and_the_fix() -> None:
    b = TopologyBuilder(uid("bad"))
    with pytest.raises(TopologyError, match=r"'w': sliding interval Count\(5\) is longer than the window Count\(3\)"):
        b.set_bolt("w", Recorder("x").with_window(Count(3), Count(5)))
    with pytest.raises(TopologyError, match=r"'w2': negative lag .*with n >= 0"):
        b.set_bolt("w2", Recorder("x").with_window(Duration(3, "s")).with_timestamp_field("ts").with_lag(Duration(-1)))
    b2 = TopologyBuilder(uid("bad"))
    b2.set_spout("s", MemorySpout([], Fields("word")), 1)
    b2.set_bolt("w", Recorder("x").with_tumbling_window(Duration(1, "s")).with_timestamp_field("ts")).global_grouping("s")
    with pytest.raises(TopologyError, match=r"'w' reads its timestamps from field 'ts', which stream 'default' of 's' "
                                            r"does not have \(its fields: \['word'\]\)"):
        b2.build()
    t = topology(uid("bad"), [], Recorder("x").with_tumbling_window(Duration(20, "s")), upper=False)
    with pytest.raises(ConfigError, match=r"'w': .*spans 40000 ms, not less than message_timeout_secs=30.0 .*Raise message_timeout_secs above 40"):
        run_topology(t, config("in-process"))
    t = topology(uid("bad"), [], Recorder("x").with_window(Count(10), Count(5)), upper=False)
    with pytest.raises(ConfigError, match=r"'w': .*needs 15 tuples pending, more than max_spout_pending=10"):
        run_topology(t, config("in-process", max_spout_pending=10))


class PersistentCounter(BaseStatefulWindowedBolt):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        FIRED.setdefault(self.name, []).append(sorted(t[0] for t in window.get()))
        self.state.put("windows", self.state.get("windows", 0) + 1)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_a_persistent_window_resumes_after_a_restart() -> None:
    name = uid("persist")
    state = f"memory://{name}"
    items = [(f"w{i}", i) for i in range(5)]
    bolt = PersistentCounter(name).with_tumbling_window(Count(3)).with_persistence()
    cfg = config("in-process", state=state, checkpoint_interval_ms=0)
    run_topology(topology(name, items, bolt, upper=False), cfg)
    assert FIRED[name] == [["w0", "w1", "w2"]]
    assert acks(name, "ack") == [0, 1, 2, 3, 4]       # all acked: w3, w4 are in the checkpointed window
    b = PersistentCounter(name).with_tumbling_window(Count(3)).with_persistence()
    run_topology(topology(name, [("x", 9)], b, upper=False), cfg)
    assert FIRED[name] == [["w0", "w1", "w2"], ["w3", "w4", "x"]]


class PersistentSessions(BaseStatefulWindowedBolt):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, window):
        FIRED.setdefault(self.name, []).append((window.get_key(), [t[1] for t in window.get()],
                                                window.get_start_timestamp(), window.get_end_timestamp()))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def test_a_persistent_session_window_resumes_its_open_sessions_after_a_restart() -> None:
    name = uid("psession")
    cfg = config("in-process", state=f"memory://{name}", checkpoint_interval_ms=0)

    def bolt() -> BaseWindowedBolt:
        return PersistentSessions(name).with_session_window(Duration(5, "s"), key_field="word") \
            .with_timestamp_field("ts").with_persistence()

    run_topology(topology(name, [("ann", 1000), ("bob", 2000), ("ann", 3000)], bolt(), upper=False), cfg)
    assert FIRED.get(name) is None                   # the sessions stay open, in the state
    assert acks(name, "ack") == [0, 1, 2]            # acked at the checkpoint that holds them
    run_topology(topology(name, [("ann", 20_000)], bolt(), upper=False), cfg)
    assert FIRED[name] == [("ann", [1000, 3000], 1000, 8000), ("bob", [2000], 2000, 7000)]
