"""When the driver plans and launches the next txid (``launch_policy``,
transactional/engine/launch.py; docs/design.md, "Pipelining and max_spout_pending"): the
coordinator's rule on its own, then whole runs on the in-process executor whose spout
records, at every plan, which batches were processing then."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import launch_feeds
import pytest

from transactional import BaseBatchBolt, BaseTransactionalBolt, Committer, Fields, TopologyConfig, Values
from transactional.engine.coordinator import (
    Commit,
    Coordinator,
    CoordinatorSettings,
    Launch,
    Plan,
    Recovered,
    TransactionalReplay,
)
from transactional.engine.driver import RunWatch, run_topology
from transactional.exceptions import ConfigError
from transactional.spout import PartitionedCoordinator, PartitionedEmitter, PartitionedTransactionalSpout
from transactional.topology import TransactionalTopologyBuilder

# -- the coordinator's rule (rule 7) -----------------------------------------------------------


def adaptive(msp: int = 3, **kw: Any) -> Coordinator:
    return Coordinator(CoordinatorSettings(max_spout_pending=msp, launch_policy="adaptive", idle_timeout_secs=None, **kw),
                       TransactionalReplay(False))


def test_not_backlogged_the_next_txid_is_planned_when_the_batch_before_it_is_processed():
    c = adaptive()
    assert c.start(0.0) == [Plan(1, None, None)]
    assert c.planned(1, [0, 4], None, 0.0) == [Launch(1, 1, [0, 4], None, ())]    # no Plan(2): 1 processes
    assert c.tick(0.5) == [] and c.ready(0.5) == []                              # polls and input wait too
    assert c.next_wakeup(0.5) == 30.0                                           # only txid 1's timeout: no spin
    # txid 1's processing ends: its commit first, then txid 2 is planned (taking what arrived)
    assert c.processed(1, 1, None, 1.0) == [Commit(1, 1, [0, 4], None, (1,)), Plan(2, [0, 4], None)]
    assert c.planned(2, [4, 10], None, 1.1) == [Launch(2, 1, [4, 10], None, ())]
    assert c.committed(1, 1.2) == []                                            # a free slot, but 2 processes
    assert c.processed(2, 1, None, 2.0) == [Commit(2, 1, [4, 10], None, (1,)), Plan(3, [4, 10], None)]


def test_backlogged_every_slot_fills_and_later_batches_process_during_a_commit():
    c = adaptive()
    c.start(0.0)
    assert c.planned(1, [0, 5], None, 0.0, backlogged=True) == [Launch(1, 1, [0, 5], None, ()), Plan(2, [0, 5], None)]
    assert c.planned(2, [5, 10], None, 0.0, backlogged=True) == [Launch(2, 1, [5, 10], None, ()),
                                                                  Plan(3, [5, 10], None)]
    assert c.planned(3, [10, 12], None, 0.0, backlogged=False) == [Launch(3, 1, [10, 12], None, ())]
    assert len(c.inflight) == 3
    # 1 commits while 2 and 3 process; the slot it frees waits for their processing to end
    assert c.processed(1, 1, None, 1.0) == [Commit(1, 1, [0, 5], None, (1,))]
    assert c.committed(1, 1.1) == []
    assert c.processed(2, 1, None, 1.2) == [Commit(2, 1, [5, 10], None, (1,))]
    assert c.processed(3, 1, None, 1.3) == [Plan(4, [10, 12], None)]   # 2 still commits: 3 waits its turn


def test_replays_launch_whenever_a_slot_is_free():
    rec = Recovered(0, None, None, {1: {"meta": [0, 5], "attempts": 1}, 2: {"meta": [5, 9], "attempts": 1}})
    c = Coordinator(CoordinatorSettings(max_spout_pending=3, launch_policy="adaptive", idle_timeout_secs=None),
                    TransactionalReplay(False), rec)
    assert c.start(0.0) == [Launch(1, 2, [0, 5], None, ()), Launch(2, 2, [5, 9], None, ())]


def test_eager_plans_whenever_a_slot_is_free():
    c = Coordinator(CoordinatorSettings(max_spout_pending=2, launch_policy="eager"), TransactionalReplay(False))
    c.start(0.0)
    assert c.planned(1, [0, 4], None, 0.0) == [Launch(1, 1, [0, 4], None, ()), Plan(2, [0, 4], None)]


def test_the_default_is_adaptive_and_a_wrong_value_names_the_setting():
    assert TopologyConfig().launch_policy == "adaptive"
    assert CoordinatorSettings.of(TopologyConfig()).launch_policy == "adaptive"
    assert CoordinatorSettings.of(TopologyConfig(launch_policy="eager")).launch_policy == "eager"
    with pytest.raises(ConfigError, match="launch_policy"):
        TopologyConfig(launch_policy="soon")


# -- whole runs: a spout that sees the phases of the batches -----------------------------------

class Feed:
    """One partition of rows that a test adds to while the run goes on, and what the
    spout, the bolts and the driver's loop saw (shared in this process: in-process executor)."""

    def __init__(self, rows: int, cap: int) -> None:
        self.rows, self.cap = list(range(rows)), cap
        self.cond = threading.Condition()
        self.processing: set[int] = set()      # txids whose processing bolt has begun and not finished
        self.plans: list[dict[str, Any]] = []  # every plan: the range (or None) and who was processing
        self.events: list[tuple[str, int]] = []
        self.loops = 0                         # the driver's loop went round (RunWatch.between)
        self.launched: set[int] = set()
        self.in_flight = self.max_in_flight = 0
        self.on_processing: Any = None         # a hook: (feed, txid) in the processing bolt's finish_batch

    def event(self, name: str, txid: int) -> None:
        with self.cond:
            self.events.append((name, txid))
            self.cond.notify_all()

    def wait_for(self, what: Any, timeout: float = 30.0) -> bool:
        with self.cond:
            return self.cond.wait_for(what, timeout)


class FeedCoordinator(PartitionedCoordinator):
    def __init__(self, name: str) -> None:
        self.feed, self.capped = launch_feeds.FEEDS[name], False

    def num_partitions(self) -> int:
        return 1

    def plan_partition(self, partition: int, last_meta: Any) -> Any:
        f = self.feed
        start = last_meta["end"] if last_meta else 0
        with f.cond:
            end = min(start + f.cap, len(f.rows))
            self.capped = end < len(f.rows)
            f.plans.append({"range": (start, end) if end > start else None, "processing": sorted(f.processing)})
        return {"start": start, "end": end} if end > start else None

    def backlogged(self) -> bool:
        return self.capped


class FeedEmitter(PartitionedEmitter):
    def __init__(self, name: str) -> None:
        self.feed = launch_feeds.FEEDS[name]

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, meta: Any) -> Any:
        with self.feed.cond:
            rows = self.feed.rows[meta["start"]:meta["end"]]
        for r in rows:
            collector.emit((tx, r))
        return None


class FeedSpout(PartitionedTransactionalSpout):
    def __init__(self, name: str) -> None:
        self.name = name

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> PartitionedCoordinator:
        return FeedCoordinator(self.name)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> PartitionedEmitter:
        return FeedEmitter(self.name)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tx", "n"))


class Work(BaseBatchBolt):
    """The processing phase: says when txid's processing begins and ends; the feed's hook runs between."""

    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf: Any, context: Any, collector: Any, attempt: Any) -> None:
        self.feed, self.collector, self.attempt, self.n = launch_feeds.FEEDS[self.name], collector, attempt, 0
        with self.feed.cond:
            self.feed.processing.add(attempt.txid)
        self.feed.event("processing-start", attempt.txid)

    def execute(self, tuple: Any) -> None:
        self.n += 1

    def finish_batch(self) -> None:
        if self.feed.on_processing is not None:
            self.feed.on_processing(self.feed, self.attempt.txid)
        with self.feed.cond:
            self.feed.processing.discard(self.attempt.txid)
        self.feed.event("processing-end", self.attempt.txid)
        self.collector.emit(Values(self.attempt, self.n))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "n"))


class CommitPhase(BaseTransactionalBolt, Committer):
    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf: Any, context: Any, collector: Any, attempt: Any) -> None:
        self.feed, self.attempt = launch_feeds.FEEDS[self.name], attempt

    def execute(self, tuple: Any) -> None:
        pass

    def finish_batch(self) -> None:
        self.feed.event("commit-start", self.attempt.txid)
        self.feed.event("commit-end", self.attempt.txid)


class Watch(RunWatch):
    """Counts the driver's loops and the txids in flight (launched, not committed)."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed

    def started(self, engine: Any) -> None:
        engine.listeners.append(self.hear)

    def hear(self, t: Any) -> None:
        f = self.feed
        with f.cond:
            if t.kind == "launched":
                f.launched.add(t.txid)
                f.in_flight += 1
                f.max_in_flight = max(f.max_in_flight, f.in_flight)
            elif t.kind in ("committed", "failed"):
                f.in_flight -= 1
            f.cond.notify_all()

    def between(self, runner: Any, now: float) -> None:
        with self.feed.cond:
            self.feed.loops += 1
            self.feed.cond.notify_all()


def run_feed(feed: Feed, policy: str, msp: int = 3) -> Any:
    name = f"launch-{uuid.uuid4().hex[:8]}"
    launch_feeds.FEEDS[name] = feed
    try:
        b = TransactionalTopologyBuilder(name, "spout", FeedSpout(name), 1)
        b.set_bolt("work", Work(name), 1).shuffle_grouping("spout")
        b.set_bolt("commit", CommitPhase(name), 1).global_grouping("work")
        cfg = TopologyConfig(executor="in-process", progress=False, max_spout_pending=msp, launch_policy=policy,
                             poll_interval_secs=0.01, idle_timeout_secs=0, message_timeout_secs=60,
                             max_attempts=1)
        return run_topology(b.build(), cfg, watch=Watch(feed))
    finally:
        launch_feeds.FEEDS.pop(name, None)


def records_arrive_during_txid_1(feed: Feed, txid: int) -> None:
    """In txid 1's processing: 6 rows arrive, then the driver goes round its loop three
    times (time enough to plan with a 0.01 s poll interval: a plan due is asked for in one
    round and carried out in the next)."""
    if txid != 1:
        return
    with feed.cond:
        feed.rows += range(4, 10)
        seen = feed.loops
    assert feed.wait_for(lambda: feed.loops >= seen + 3)


def test_adaptive_plans_the_next_batch_when_processing_ends_and_it_takes_all_that_arrived():
    feed = Feed(rows=4, cap=100)
    feed.on_processing = records_arrive_during_txid_1
    r = run_feed(feed, "adaptive")
    assert r.last_txid == 2
    # txid 1: the 4 rows there; txid 2, planned once txid 1's processing ended: the 6 that
    # arrived meanwhile; then nothing more (the run ends idle). No plan while a batch processed.
    assert feed.plans == [{"range": (0, 4), "processing": []}, {"range": (4, 10), "processing": []},
                          {"range": None, "processing": []}]
    assert feed.max_in_flight == 1
    ev = feed.events
    assert ev.index(("commit-start", 1)) < ev.index(("processing-start", 2))   # commit first, then the plan


def test_eager_plans_while_a_batch_processes():
    feed = Feed(rows=4, cap=100)
    feed.on_processing = records_arrive_during_txid_1
    r = run_feed(feed, "eager")
    assert r.last_txid == 2
    planned = [p for p in feed.plans if p["range"] is not None]
    assert planned == [{"range": (0, 4), "processing": []}, {"range": (4, 10), "processing": [1]}]


def test_adaptive_with_a_backlog_fills_max_spout_pending_and_overlaps_processing_with_commits():
    feed = Feed(rows=30, cap=5)

    def hold(f: Feed, txid: int) -> None:
        if txid == 1:     # txid 1 processes until txid 3 is launched: the backlog filled every slot
            assert f.wait_for(lambda: 3 in f.launched)
        if txid == 2:     # txid 2 processes until txid 1's commit has begun
            assert f.wait_for(lambda: ("commit-start", 1) in f.events)

    feed.on_processing = hold
    r = run_feed(feed, "adaptive")
    assert r.last_txid == 6 and r.batches_committed == 6
    assert feed.max_in_flight == 3
    ranges = [p["range"] for p in feed.plans]
    assert ranges[:6] == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30)]
    assert ranges[6:] and set(ranges[6:]) == {None}   # then nothing new (asked again while 5 and 6 committed)
    ev = feed.events
    assert ev.index(("commit-start", 1)) < ev.index(("processing-end", 2))   # 2 processed during 1's commit
    assert [t for e, t in ev if e == "commit-end"] == [1, 2, 3, 4, 5, 6]
