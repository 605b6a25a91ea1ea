"""Trident windows (trident.windowing): count and duration windows, event time with late
tuples, exactly once across a replayed txid and a driver SIGKILL on Redis, and the errors
for bad windows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from spouts import MemoryTransactionalSpout
from state.map import TransactionalMap, open_map_backing
from transactional import ConfigError, FailedException, Fields, TopologyConfig, run_topology
from trident import BaseAggregator, BaseFilter, Count, TridentTopology, state
from trident.windowing import (
    Duration,
    InMemoryWindowsStoreFactory,
    SlidingCountWindow,
    TumblingCountWindow,
    WindowsStoreFactory,
)

REPO = Path(__file__).resolve().parents[2]
FAILED_ONCE: set[str] = set()


def uid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def config(executor: str, **kw: Any) -> TopologyConfig:
    kw.setdefault("progress", False)
    kw.setdefault("retry_backoff_secs", 0.02)
    kw.setdefault("max_spout_pending", 3)
    return TopologyConfig(executor=executor, **kw)


class Words(BaseAggregator):
    """Per window: its words, in order, joined."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        collector.emit((" ".join(acc),))


class FailOnce(BaseFilter):
    """FailedException the first time it sees ``word`` (its txid is replayed)."""

    def __init__(self, key: str, word: str) -> None:
        self.key, self.word = key, word

    def is_keep(self, tuple):
        if self.word in tuple[0] and self.key not in FAILED_ONCE:
            FAILED_ONCE.add(self.key)
            raise FailedException("once")
        return True


def windows_of(result: Any, name: str, keys: list[str]) -> dict[str, int]:
    m = result.map_state(name)
    return {k: v for k, v in zip(keys, m.multi_get(keys), strict=True) if v is not None}


def test_count_windows_fire_each_window_once_into_a_persistent_state(executor: str) -> None:
    words = [(f"w{i}", i) for i in range(11)]
    t = TridentTopology(uid("tcount"))
    s = t.new_stream("words", MemoryTransactionalSpout(words, Fields("word", "ts"), 3))
    s.tumbling_window(4, InMemoryWindowsStoreFactory("tumble"), Fields("word"), Words(), Fields("words")) \
        .group_by(Fields("words")).persistent_aggregate(state.transactional("tumbling"), Count(), Fields("n"))
    s.window(SlidingCountWindow.of(4, 2), WindowsStoreFactory("slide"), Fields("word"), Words(), Fields("words")) \
        .group_by(Fields("words")).persistent_aggregate(state.transactional("sliding"), Count(), Fields("n"))
    r = run_topology(t.build(), config(executor))
    tumbling = ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9 w10"]
    assert windows_of(r, "tumbling", tumbling) == {"w0 w1 w2 w3": 1, "w4 w5 w6 w7": 1}
    sliding = ["w0 w1", "w0 w1 w2 w3", "w2 w3 w4 w5", "w4 w5 w6 w7", "w6 w7 w8 w9"]
    assert windows_of(r, "sliding", sliding) == dict.fromkeys(sliding, 1)
    # w8..w10 wait in the open tumbling window, in the store
    rec = r.map_state("tumble").multi_get(["window:0"])[0]
    assert [e[2] for e in rec["events"]] == [["w8"], ["w9"], ["w10"]] and rec["fired"] == 2


def test_event_time_windows_drop_late_tuples_and_count_them(executor: str, caplog: pytest.LogCaptureFixture) -> None:
    # batches of 3: [a 1000, b 2500, c 1500] -> watermark 2000; [d 1900 late, e 4200, f 3100] -> 3700
    words = [("a", 1000), ("b", 2500), ("c", 1500), ("d", 1900), ("e", 4200), ("f", 3100),
             ("g", 9000), ("h", 5100), ("i", 6000)]
    t = TridentTopology(uid("tevent"))
    (t.new_stream("words", MemoryTransactionalSpout(words, Fields("word", "ts"), 3))
     .tumbling_window(Duration(2, "seconds"), WindowsStoreFactory("ev"), Fields("word"), Words(), Fields("words"),
                      timestamp_field="ts", lag=Duration(500))
     .group_by(Fields("words")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n")))
    r = run_topology(t.build(), config(executor))
    want = ["a c", "b f", "e h", "i"]
    assert windows_of(r, "fired", want + ["d", "g"]) == dict.fromkeys(want, 1)
    rec = r.map_state("ev").multi_get(["window:0"])[0]
    assert rec["late"] == 1 and [e[2] for e in rec["events"]] == [["g"]]
    assert "1 late tuple(s) dropped (below the watermark 2000); 1 so far" in caplog.text


class Bounds(BaseAggregator):
    """Per window: its words and its bounds, as the aggregator finds them (collector.window)."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        w = collector.window
        collector.emit((" ".join(acc), w.get_start_timestamp(), w.get_end_timestamp()))


class Keep(BaseFilter):
    """Keeps every tuple, noting it under ``SEEN[name]`` (in-process runs only)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_keep(self, t):
        SEEN.setdefault(self.name, []).append(tuple(t))
        return True


SEEN: dict[str, list] = {}


def test_late_tuples_flow_on_the_late_stream_and_aggregators_see_the_windows_bounds() -> None:
    words = [("a", 1000), ("b", 2500), ("c", 1500), ("d", 1900), ("e", 4200), ("f", 3100),
             ("g", 9000), ("h", 5100), ("i", 6000)]
    name = uid("tlate")
    t = TridentTopology(name)
    (t.new_stream("words", MemoryTransactionalSpout(words, Fields("word", "ts"), 3))
     .tumbling_window(Duration(2, "seconds"), WindowsStoreFactory("ev"), Fields("word"), Bounds(),
                      Fields("words", "start", "end"), timestamp_field="ts", lag=Duration(500), late_stream="late")
     .each(Fields("words", "start", "end"), Keep(name + "/windows")))
    t.late_stream("late").each(Fields("word", "ts"), Keep(name + "/late"))
    r = run_topology(t.build(), config("in-process"))
    assert SEEN[name + "/windows"] == [("a c", 0, 2000), ("b f", 2000, 4000), ("e h", 4000, 6000), ("i", 6000, 8000)]
    assert SEEN[name + "/late"] == [("d", 1900)]
    assert r.map_state("ev").multi_get(["window:0"])[0]["late"] == 1
    with pytest.raises(ConfigError, match=r"no window has late_stream='other' \(those that have: \['late'\]\)"):
        t.late_stream("other")


def test_a_sliding_count_window_follows_storms_window_manager() -> None:
    name = uid("tstorm")
    t = TridentTopology(name)
    (t.new_stream("words", MemoryTransactionalSpout([(str(i), i) for i in range(1, 9)], Fields("word", "ts"), 3))
     .sliding_window(5, 2, WindowsStoreFactory("s"), Fields("word"), Bounds(), Fields("words", "start", "end"))
     .each(Fields("words", "start", "end"), Keep(name)))
    run_topology(t.build(), config("in-process"), clock=lambda: 7.0)
    # length 5 sliding 2 over 1, 2, 3 ...: [1,2], [1..4], [2..6], [4..8]; a count window has no
    # start, and ends at its newest tuple's time (processing time: the txid's, 7 s)
    assert SEEN[name] == [("1 2", None, 7000), ("1 2 3 4", None, 7000), ("2 3 4 5 6", None, 7000),
                          ("4 5 6 7 8", None, 7000)]


def test_a_replayed_txid_fires_the_same_windows_once(executor: str) -> None:
    words = [(f"w{i}", i) for i in range(12)]
    key = uid("replay")

    def build(fail: bool) -> Any:
        t = TridentTopology(uid("treplay"))
        w = t.new_stream("words", MemoryTransactionalSpout(words, Fields("word", "ts"), 3)) \
            .tumbling_window(TumblingCountWindow.of(4).length, WindowsStoreFactory("w"), Fields("word"), Words(),
                             Fields("words"))
        if fail:
            w = w.each(Fields("words"), FailOnce(key, "w4"))
        w.group_by(Fields("words")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n"))
        return t.build()

    clean = run_topology(build(False), config(executor))
    failed = run_topology(build(True), config(executor))
    keys = ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9 w10 w11"]
    assert key in FAILED_ONCE and failed.attempts > clean.attempts
    assert windows_of(failed, "fired", keys) == windows_of(clean, "fired", keys) == dict.fromkeys(keys, 1)


def test_bad_windows_are_refused_naming_the_operation_and_the_fix() -> None:
    t = TridentTopology(uid("tbad"))
    s = t.new_stream("words", MemoryTransactionalSpout([("a", 1)], Fields("word", "ts"), 3))
    with pytest.raises(ConfigError, match=r"window: sliding interval 5 tuples is longer than the window 3 tuples"):
        s.window(SlidingCountWindow.of(3, 5), WindowsStoreFactory("w"), Fields("word"), Count(), Fields("n"))
    with pytest.raises(ConfigError, match=r"timestamp field 'time' is not in the stream, whose fields are"):
        s.tumbling_window(Duration(1, "s"), WindowsStoreFactory("w"), Fields("word"), Count(), Fields("n"),
                          timestamp_field="time")
    with pytest.raises(ConfigError, match=r"negative lag .* give a lag >= 0"):
        s.tumbling_window(Duration(1, "s"), WindowsStoreFactory("w"), Fields("word"), Count(), Fields("n"),
                          timestamp_field="ts", lag=Duration(-1))


# -- a driver killed mid-window, on Redis ------------------------------------------------------

def _run_child(tmp_path: Path, zk_url: str, redis_url: str, crash_at: str | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRIDENT_CRASH_AT", None)
    if crash_at:
        env["TRIDENT_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "transactional.ops.cli", "run", str(REPO / "tests" / "support" / "trident_window_kill_topology.py"),
         "--set", "executor=in-process", "--coordination", zk_url + "?session_timeout=1", "--state", redis_url,
         "--max-spout-pending", "3", "--lock-wait", "30", "-q"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, start_new_session=True)


def _expected() -> tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, int], dict[str, int]]:
    """The windows a fault-free run fires (computed from the spout's batches directly)."""
    import trident_window_kill_topology as k

    r = run_topology(k.build_topology(), config("in-process"))
    rows = [w for p in k.DATA.values() for w, _ in p]
    return (windows_of(r, "fired", rows), windows_of(r, "fired_time", rows), windows_of(r, "fired_session", rows),
            windows_of(r, "fired_join", rows), windows_of(r, "fired_wjoin", rows))


def test_a_driver_killed_mid_window_on_redis_resumes_with_the_same_windows(tmp_path: Path, zk_url: str,
                                                                          redis_url: str) -> None:
    import trident_window_kill_topology as k
    from crash_plans import crash_plan

    # every commit crash point once, then TRIDENT_TEST_KILLS more at random points (seeded)
    for crash in crash_plan():
        p = _run_child(tmp_path, zk_url, redis_url, crash)
        assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-2000:])
    p = _run_child(tmp_path, zk_url, redis_url, None)
    assert p.returncode == 0, p.stderr[-3000:]
    want_count, want_time, want_session, want_join, want_wjoin = _expected()
    rows = [w for part in k.DATA.values() for w, _ in part]
    for name, want in (("fired", want_count), ("fired_time", want_time), ("fired_session", want_session),
                       ("fired_join", want_join), ("fired_wjoin", want_wjoin)):
        m = TransactionalMap(open_map_backing(redis_url, f"trident-window-kill:{name}"), name)
        got = {w: v for w, v in zip(rows, m.multi_get(rows), strict=True) if v is not None}
        assert got == want and sum(want.values()) > 0


class Ticks:
    """The driver's clock of a test: 1 s later at each call (one call per txid's first commit)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return float(self.calls)


def test_a_replayed_processing_time_txid_fires_the_same_windows() -> None:
    # batches of 3 words, txid t at t seconds: [0, 2 s) holds txid 1, [2 s, 4 s) txids 2 and 3.
    # A replay of txid 2 (its window output fails once) must keep 2 s, not take a new time.
    words = [(f"w{i}", i) for i in range(12)]
    key = uid("ptime")

    def build(fail: bool) -> Any:
        t = TridentTopology(uid("tptime"))
        w = t.new_stream("words", MemoryTransactionalSpout(words, Fields("word", "ts"), 3)) \
            .tumbling_window(Duration(2, "seconds"), WindowsStoreFactory("pt"), Fields("word"), Words(),
                             Fields("words"))
        if fail:
            w = w.each(Fields("words"), FailOnce(key, "w0"))
        w.group_by(Fields("words")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n"))
        return t.build()

    clean_clock, failed_clock = Ticks(), Ticks()
    clean = run_topology(build(False), config("in-process"), clock=clean_clock)
    failed = run_topology(build(True), config("in-process"), clock=failed_clock)
    keys = ["w0 w1 w2", "w3 w4 w5 w6 w7 w8", "w3 w4 w5", "w9 w10 w11"]
    assert key in FAILED_ONCE and failed.attempts > clean.attempts
    want = {"w0 w1 w2": 1, "w3 w4 w5 w6 w7 w8": 1}
    assert windows_of(failed, "fired", keys) == windows_of(clean, "fired", keys) == want
    assert clean_clock.calls == failed_clock.calls == 4                 # one time per txid


def test_a_txids_time_survives_a_restart_in_its_pending_record() -> None:
    from state.base import MemoryTransactionalState
    from transactional.engine.store import CoordinatorStore

    s = MemoryTransactionalState(uid("times"))
    first = CoordinatorStore(s)
    assert first.commit_time(5, lambda: 7.25) == 7250
    first.write_pending(5, {"s": [0, 3]}, 1, [1])
    first.write_pending(5, {"s": [0, 3]}, 2, [1])                   # the next attempt keeps the time
    assert s.get("meta/5")["time_ms"] == 7250
    restarted = CoordinatorStore(s)
    restarted.recover()
    assert restarted.commit_time(5, lambda: 99.0) == 7250 and restarted.commit_time(6, lambda: 99.0) == 99000
    restarted.drop_pending(5)
    assert 5 not in restarted.times


def test_the_event_time_watermark_waits_for_the_partition_that_lags() -> None:
    # two partitions, one batch of 2 from each per txid: partition 0 runs ahead (ts 1000, 2000,
    # 3000 ...), partition 1 lags (ts 0, 100, 200 ...). The watermark is the least of the two
    # maxima: no window [0, 1 s) fires while partition 1 is below 1 s, although partition 0
    # passed it at its first batch; the lagging partition's tuples are not late.
    data = {0: [(f"a{i}", 1000 * (i + 1)) for i in range(8)],
            1: [(f"b{i}", 100 * i) for i in range(8)] + [(f"b{i}", 1000 + 100 * i) for i in range(8, 16)]}
    t = TridentTopology(uid("twm"))
    (t.new_stream("words", MemoryTransactionalSpout(data, Fields("word", "ts"), 2)).parallelism_hint(2)
     .tumbling_window(Duration(1, "s"), WindowsStoreFactory("wm"), Fields("word"), Words(), Fields("words"),
                      timestamp_field="ts")
     .group_by(Fields("words")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n")))
    seen: list[tuple[int, dict[str, int], int]] = []

    def on_commit(txid: int, r: Any) -> None:
        rec = r.map_state("wm").multi_get(["window:0"])[0]
        seen.append((txid, dict(rec["maxima"]), rec["fired"]))

    r = run_topology(t.build(), config("in-process"), on_commit=on_commit)
    rec = r.map_state("wm").multi_get(["window:0"])[0]
    assert rec["late"] == 0 and len(rec["maxima"]) == 2
    # partition 0 passed 1 s at txid 1, partition 1 only at txid 5 (b8 at 1800): nothing fired before
    assert [fired for _, _, fired in seen[:4]] == [0, 0, 0, 0] and seen[4][2] > 0
    first = "b0 b1 b2 b3 b4 b5 b6 b7"
    assert windows_of(r, "fired", [first, "a0", f"a0 {first}"]) == {f"{first}": 1}


class Clicks(BaseAggregator):
    """Per session: its timestamps in arrival order, and its bounds."""

    def init(self, batch_id, collector):
        return []

    def aggregate(self, acc, tuple, collector):
        acc.append(tuple[0])

    def complete(self, acc, collector):
        w = collector.window
        collector.emit((" ".join(map(str, acc)), w.get_start_timestamp(), w.get_end_timestamp()))


def test_session_windows_per_user_merge_bridged_sessions_and_send_late_clicks_on() -> None:
    # batches of 3 clicks; the watermark is the greatest timestamp minus the lag (10 s)
    clicks = [("ann", 1000), ("bob", 1500), ("ann", 3000),          # watermark -7000
              ("ann", 12_000), ("bob", 16_000), ("cid", 9000),     # 6000: nothing ended
              ("ann", 7500), ("cid", 31_000), ("ann", 8000),       # 21 000; ann 7500 bridges two sessions
              ("ann", 5000), ("bob", 60_000), ("bob", 61_000)]     # 50 000; ann 5000 is late
    name = uid("tsession")
    t = TridentTopology(name)
    (t.new_stream("clicks", MemoryTransactionalSpout(clicks, Fields("user", "ts"), 3))
     .group_by(Fields("user"))
     .session_window(Duration(5, "s"), WindowsStoreFactory("sessions"), Fields("ts"), Clicks(),
                     Fields("clicks", "start", "end"), timestamp_field="ts", lag=Duration(10, "s"), late_stream="late")
     .each(Fields("user", "clicks", "start", "end"), Keep(name)))
    t.late_stream("late").each(Fields("user", "ts"), Keep(name + "/late"))
    r = run_topology(t.build(), config("in-process"))
    assert SEEN[name] == [("ann", "1000 3000 12000 7500 8000", 1000, 17_000),
                          ("bob", "1500", 1500, 6500), ("bob", "16000", 16_000, 21_000),
                          ("cid", "9000", 9000, 14_000),
                          ("cid", "31000", 31_000, 36_000)]
    assert SEEN[name + "/late"] == [("ann", 5000)]
    rec = r.map_state("sessions").multi_get(["window:0"])[0]
    assert [(e[3], e[1]) for e in rec["events"]] == [(["bob"], 60_000), (["bob"], 61_000)]   # still open


def test_a_replayed_txid_fires_the_same_sessions_once() -> None:
    clicks = [("ann", 1000), ("bob", 1500), ("ann", 3000), ("ann", 12_000), ("bob", 16_000), ("cid", 9000),
              ("ann", 7500), ("cid", 31_000), ("ann", 8000), ("bob", 60_000), ("bob", 61_000), ("cid", 90_000)]
    key = uid("sreplay")

    def build(fail: bool) -> Any:
        t = TridentTopology(uid("tsreplay"))
        w = (t.new_stream("clicks", MemoryTransactionalSpout(clicks, Fields("user", "ts"), 3))
             .group_by(Fields("user"))
             .session_window(Duration(5, "s"), WindowsStoreFactory("s"), Fields("ts"), Clicks(),
                             Fields("clicks", "start", "end"), timestamp_field="ts", lag=Duration(10, "s")))
        if fail:
            w = w.each(Fields("clicks"), FailOnce(key, "7500"))
        w.group_by(Fields("user", "clicks")).persistent_aggregate(state.transactional("fired"), Count(), Fields("n"))
        return t.build()

    clean = run_topology(build(False), config("in-process"))
    failed = run_topology(build(True), config("in-process"))
    keys = [("ann", "1000 3000 12000 7500 8000"), ("bob", "1500"), ("bob", "16000"), ("cid", "9000"),
            ("cid", "31000"), ("bob", "60000 61000"), ("ann", "1000 3000"), ("ann", "12000")]
    assert key in FAILED_ONCE and failed.attempts > clean.attempts
    want = dict.fromkeys(keys[:6], 1)
    assert windows_of(failed, "fired", keys) == windows_of(clean, "fired", keys) == want
