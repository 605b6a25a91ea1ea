"""Where a partition with no batch yet starts is stored with the coordinator state, so a
restart does not move it (issue 8, item 4).

With ``start="latest"`` the records already in the topic when the topology first plans
are not read (by design); everything produced after that is, exactly once, even when the
driver stops and a new one starts later with the same ZooKeeper coordination:

- partitions read before the restart continue where their last batch ended;
- partitions never read (no batch yet) start where the *first* driver placed them, not
  at the high watermark of the restart;
- partitions added to the topic while no driver ran start at earliest (``start`` applies
  to the partitions present when the topology first started).

Each record is counted under its own key ``"<partition>:<offset>"`` in Redis, so the
check is record by record: every record produced after the first start counts 1, every
record produced before it is absent.

The first tests drive ``SpoutPlanner`` over ``MemoryTransactionalState`` with a scripted
coordinator (no server): the stored record, its order against the batch, its reuse by a
new planner, and coordinators without ``initial_meta``.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spouts.base import PartitionedCoordinator, PartitionedTransactionalSpout
from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from state.base import MemoryTransactionalState
from transactional import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    TopologyConfig,
    TransactionalTopologyBuilder,
    run_topology,
)
from transactional.engine.spout_planner import SpoutPlanner

# -- SpoutPlanner and its stored starts, with a scripted coordinator ------------------------------

class Scripted(PartitionedCoordinator):
    """``ends[p]``: where partition p's log ends now; ``initial_meta`` starts a partition
    at its end (like ``latest``), or at 0 when it is new; None while ``down``."""

    def __init__(self, ends: dict[int, int], with_initial: bool = True) -> None:
        self.ends, self.down, self.asked, self.events = ends, False, [], []
        if with_initial:
            self.initial_meta = self._initial

    def num_partitions(self) -> int:
        return len(self.ends)

    def _initial(self, partition: int, new_partition: bool) -> dict | None:
        self.asked.append((partition, new_partition))
        if self.down:
            return None
        s = 0 if new_partition else self.ends[partition]
        return {"start": s, "end": s}

    def plan_partition(self, partition: int, last_meta: dict | None) -> dict | None:
        self.events.append(("plan", partition, last_meta))
        start = last_meta["end"] if last_meta else 0
        end = self.ends[partition]
        return {"start": start, "end": end} if end > start else None


class Spout(PartitionedTransactionalSpout):
    """A partitioned spout whose coordinator is given (only the planner's side)."""

    def __init__(self, coordinator: Scripted) -> None:
        self.coordinator = coordinator

    def get_coordinator(self, conf, context):
        return self.coordinator

    def get_emitter(self, conf, context):
        raise NotImplementedError

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("tx", "n"))


class WatchedState(MemoryTransactionalState):
    """Notes every write in the coordinator's event list, to check the order."""

    def __init__(self, topology_id: str, events: list) -> None:
        super().__init__(topology_id)
        self.events = events

    def set(self, path, value):
        self.events.append(("set", path, value))
        super().set(path, value)


def _planner(coordinator: Scripted, state) -> SpoutPlanner:
    return SpoutPlanner(Spout(coordinator), {}, "t", "spout", 1, state=state)


def test_planner_stores_starts_before_a_batch_reads_them_and_a_new_planner_reuses_them():
    tid = f"starts-{uuid.uuid4().hex[:8]}"
    c = Scripted({0: 5, 1: 7})
    state = WatchedState(tid, c.events)
    try:
        p = _planner(c, state)
        assert p.plan(1, None, None) is None                  # 'latest': nothing new yet
        assert state.get("starts/spout") == {"initial_partitions": 2, "partitions": {
            "0": {"start": 5, "end": 5}, "1": {"start": 7, "end": 7}}}
        assert c.asked == [(0, False), (1, False)]
        c.ends[1] = 9
        assert p.plan(1, None, None) == ({"1": {"start": 7, "end": 9}}, {"1": {"start": 7, "end": 9}})
        assert c.asked == [(0, False), (1, False)]            # decided once, not again
        # a restart: a new planner (new coordinator) over the same state; partition 0 got
        # records while no driver ran, and a partition was added
        c2 = Scripted({0: 8, 1: 9, 2: 4})
        c2.events = state.events = []
        p2 = _planner(c2, state)
        meta, parts = p2.plan(2, {"1": {"start": 7, "end": 9}}, {"1": {"start": 7, "end": 9}})
        assert meta == {"0": {"start": 5, "end": 8}, "2": {"start": 0, "end": 4}}
        assert parts == {"0": {"start": 5, "end": 8}, "1": {"start": 7, "end": 9}, "2": {"start": 0, "end": 4}}
        assert c2.asked == [(2, True)]                        # added after the first plan: new
        # the new start was stored before the plan returned the batch that reads it
        sets = [i for i, e in enumerate(c2.events) if e[0] == "set"]
        assert len(sets) == 1 and c2.events[sets[0]][1] == "starts/spout"
        assert state.get("starts/spout")["partitions"]["2"] == {"start": 0, "end": 0}
        assert state.get("starts/spout")["initial_partitions"] == 2
    finally:
        MemoryTransactionalState.reset(tid)


def test_planner_asks_again_when_the_start_cannot_be_told_and_without_initial_meta_stores_nothing():
    tid = f"starts-{uuid.uuid4().hex[:8]}"
    c = Scripted({0: 3})
    c.down = True
    state = MemoryTransactionalState(tid)
    try:
        p = _planner(c, state)
        assert p.plan(1, None, None) is None
        assert not any(e[0] == "plan" for e in c.events)      # not planned from nothing
        assert state.get("starts/spout") == {"initial_partitions": 1, "partitions": {}}
        c.down = False
        c.ends[0] = 4
        assert p.plan(1, None, None) is None                  # starts at 4 now
        assert c.asked == [(0, False), (0, False)]
        assert state.get("starts/spout")["partitions"] == {"0": {"start": 4, "end": 4}}
    finally:
        MemoryTransactionalState.reset(tid)
    tid = f"starts-{uuid.uuid4().hex[:8]}"
    plain = Scripted({0: 3}, with_initial=False)
    state = MemoryTransactionalState(tid)
    try:
        assert _planner(plain, state).plan(1, None, None) == ({"0": {"start": 0, "end": 3}},
                                                              {"0": {"start": 0, "end": 3}})
        assert state.get("starts/spout") is None
        assert _planner(Scripted({0: 3}), None).plan(1, None, None) is None   # no state: memory only
    finally:
        MemoryTransactionalState.reset(tid)


# -- against a real broker, ZooKeeper and Redis -----------------------------------------------------

class _Signalling:
    """Creates the file ``planned_flag`` once every partition was planned: from then on
    the first driver has decided where each partition starts."""

    planned_flag: str | None = None

    def get_coordinator(self, conf, context):
        c = super().get_coordinator(conf, context)
        flag = self.planned_flag
        if flag is not None:
            seen: set[int] = set()
            plan, n = c.plan_partition, c.num_partitions()

            def watched(partition, last_meta):
                out = plan(partition, last_meta)
                seen.add(partition)
                if len(seen) >= n:
                    Path(flag).touch()
                return out

            c.plan_partition = watched
        return c


class LatestSpout(_Signalling, KafkaTransactionalSpout):
    pass


class OpaqueLatestSpout(_Signalling, OpaqueKafkaTransactionalSpout):
    pass


class CountRecords(BaseTransactionalBolt, Committer):
    """Counts each record under ``"<partition>:<offset>"`` in the map "records"."""

    def __init__(self, opaque: bool) -> None:
        self.opaque = opaque

    def prepare(self, conf, context, collector, attempt):
        self.records = context.map_state("records", opaque=self.opaque)
        self.keys: list[str] = []

    def execute(self, tuple):                   # ("tx", "partition", "offset")
        self.keys.append(f"{tuple[1]}:{tuple[2]}")

    def finish_batch(self):
        if self.keys:
            self.records.multi_combine(self.keys, [1] * len(self.keys), "sum")

    def declare_output_fields(self, declarer):
        pass


def record_keys(batch):
    """The columnar key of each record: ``"<partition>:<offset>"`` (Arrow kernels)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = pc.binary_join_element_wise(pc.cast(batch.column(0), pa.string()), pc.cast(batch.column(1), pa.string()),
                                       ":")
    return pa.RecordBatch.from_arrays([keys], names=["key"])


def _topology(tid: str, bootstrap: str, topic: str, opaque: bool, planned_flag: str,
              columnar: bool = False) -> Any:
    cls = OpaqueLatestSpout if opaque else LatestSpout
    # reuse_consumer=False: the topic is recreated to add a partition (Tansu has no
    # CreatePartitions), which crashes librdkafka consumers that fetched from it
    spout = cls(bootstrap, topic, start="latest", fields=("partition", "offset"), fetch_timeout_secs=5,
                max_records_per_partition=7, reuse_consumer=False)
    spout.planned_flag = planned_flag
    if columnar:   # Trident stages taking the spout's reads as Arrow batches
        from trident import Count, TridentTopology
        from trident import state as trident_state

        t = TridentTopology(tid)
        flavour = trident_state.opaque if opaque else trident_state.transactional
        t.new_stream("spout", spout).parallelism_hint(2).map_batches(record_keys, Fields("key")) \
            .group_by(Fields("key")).persistent_aggregate(flavour("records"), Count(), Fields("n"))
        return t.build()
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("count", CountRecords(opaque), 2).shuffle_grouping("spout")
    return b


def _records(n: int, tag: str) -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def _read_back(result, opaque: bool, ends: dict[int, int]) -> dict[str, int]:
    """Every counted record among all offsets below ``ends``: key -> count."""
    keys = [f"{p}:{o}" for p, end in ends.items() for o in range(end)]
    got = result.map_state("records", opaque=opaque).multi_get(keys)
    return {k: n for k, n in zip(keys, got, strict=True) if n is not None}


@pytest.mark.integration
@pytest.mark.parametrize("opaque, columnar", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["transactional", "opaque", "transactional-columns", "opaque-columns"])
def test_latest_counts_everything_produced_after_the_first_start_across_a_restart(
        spark_context, kafka_broker, kafka_topic, zk_url, redis_url, tmp_path, opaque, columnar):
    kafka = kafka_broker
    kafka.create_topic(kafka_topic, 4)
    # before the topology first starts: not read ('latest'); every partition's last
    # record is a record batch of its own, so ListOffsets answers the true end
    before = kafka.produce(kafka_topic, {p: _records(10 + p, "old") for p in range(4)})
    tid = f"latest-{'opaque' if opaque else 'tx'}-{uuid.uuid4().hex[:8]}"
    flag = tmp_path / "planned"
    b = _topology(tid, kafka.bootstrap, kafka_topic, opaque, str(flag), columnar)
    conf = dict(spark_master="local[2]", coordination=zk_url, state=redis_url, max_spout_pending=2,
                progress=False, poll_interval_secs=0.1)
    want: set[str] = set()

    # the first driver: once it has placed every partition, records arrive in 0 and 1
    produced: dict[int, int] = {}

    def produce_after_first_plan():
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if flag.exists():
            produced.update(kafka.produce(kafka_topic, {0: _records(12, "a"), 1: _records(5, "a")}))

    t = threading.Thread(target=produce_after_first_plan, daemon=True)
    t.start()
    try:
        first = run_topology(b, TopologyConfig(idle_timeout_secs=8, **conf), spark_context=spark_context)
    finally:
        t.join(60)
    assert produced == {0: before[0] + 12, 1: before[1] + 5}, "the records were not produced in time"
    want |= {f"0:{o}" for o in range(before[0], produced[0])} | {f"1:{o}" for o in range(before[1], produced[1])}
    ends = {p: before[p] for p in range(4)} | produced
    assert _read_back(first, opaque, ends) == {k: 1 for k in want}
    assert first.batches_committed >= 2 and not first.failures

    # no driver runs: records arrive in the partitions never read (2, 3) and in one read
    # before (0); a partition is added and gets records
    kafka.add_partitions(kafka_topic, 5)
    ends = kafka.produce(kafka_topic, {0: _records(3, "c"), 2: _records(9, "b"), 3: _records(1, "b"),
                                       4: _records(6, "d")})
    ends[1] = produced[1]
    want |= {f"0:{o}" for o in range(produced[0], ends[0])}
    want |= {f"2:{o}" for o in range(before[2], ends[2])} | {f"3:{o}" for o in range(before[3], ends[3])}
    want |= {f"4:{o}" for o in range(ends[4])}

    # a new driver, same ZooKeeper coordination: everything since the first start, once
    second = run_topology(b, TopologyConfig(idle_timeout_secs=3, **conf), spark_context=spark_context)
    assert not second.failures
    got = _read_back(second, opaque, ends)
    missing = sorted(want - set(got), key=lambda k: tuple(map(int, k.split(":"))))
    assert not missing, f"{len(missing)} record(s) produced after the first start were skipped: {missing[:20]}"
    assert got == {k: 1 for k in want}
