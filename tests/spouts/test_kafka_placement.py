"""Small Kafka batches in the driver's process (``TopologyConfig.driver_batch_max_records``,
transactional/engine/placement.py, docs/performance.md "Latency: Kafka to Redis"): the rule
from the spout's ``planned_records``, and on the real broker with local[2] Spark, the batches
processed in the driver's process with the setting None ("auto") and as Spark jobs with 0
(the default: at 10k records/s the driver's one thread fell behind) -- with the same exact
counts."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import pytest

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from transactional import TopologyConfig, run_topology
from transactional.engine.placement import AUTO_MAX_RECORDS, DriverLoad, SmallBatches, max_records, sized_rules
from transactional.tuples import Fields
from trident import BaseFunction, Count, TridentTopology
from trident import state as trident_state


class Split(BaseFunction):
    """``("w0 w1",)`` -> ``("w0",), ("w1",)``; marks the process it runs in (a file named by its pid)."""

    def __init__(self, pids: str) -> None:
        self.pids = pids

    def execute(self, tuple, collector):
        Path(self.pids, str(os.getpid())).touch()
        for w in tuple[0].split():
            collector.emit((w,))


class SplitAfterSpark(Split):
    """``Split`` that, in the driver's process, waits (at most a minute) for a Spark worker
    to have run it: the driver's batch is still processing when the next one is placed."""

    def __init__(self, pids: str) -> None:
        super().__init__(pids)
        self.driver = os.getpid()

    def execute(self, tuple, collector):
        Path(self.pids, str(os.getpid())).touch()
        deadline = time.monotonic() + 60
        while os.getpid() == self.driver and set(os.listdir(self.pids)) <= {str(self.driver)}:
            if time.monotonic() > deadline:
                raise TimeoutError("no Spark worker ran the function within 60 s")
            time.sleep(0.01)
        for w in tuple[0].split():
            collector.emit((w,))


def topology(bootstrap: str, topic: str, pids: Path, split: type[Split] = Split) -> TridentTopology:
    spout = KafkaTransactionalSpout(bootstrap, topic, max_records_per_partition=10, field_names=("sentence",))
    t = TridentTopology(f"kafka-placement-{topic}")
    t.new_stream("spout", spout).each(Fields("sentence"), split(str(pids)), Fields("word")) \
        .group_by(Fields("word")).persistent_aggregate(trident_state.transactional("counts"), Count(), Fields("n"))
    return t


def test_the_kafka_rule_is_the_planned_records_and_the_setting_resolves_like_the_drpc_one() -> None:
    t = TridentTopology("sized")
    t.new_stream("k", OpaqueKafkaTransactionalSpout("127.0.0.1:1", "t"))
    rules = sized_rules(t.build(), 10)
    assert list(rules) == ["k"]
    assert rules["k"]({"0": {"start": 5, "end": 9}, "1": {"start": 0, "end": 6}}) == 10
    assert rules["k"]({"0": {"start": 0, "end": 11}}) is None
    assert sized_rules(t.build(), 0) == {}
    small = SmallBatches(rules)
    assert small({"k": {"0": {"start": 0, "end": 3}}}) is True
    assert small({"k": {"0": {"start": 0, "end": 3}}, "other": {"0": [0, 1]}}) is False   # a spout without a rule
    assert TopologyConfig().driver_batch_max_records == 0
    assert max_records(TopologyConfig(), "local[2]") == (0, False)
    assert max_records(TopologyConfig(driver_batch_max_records=None), "local[2]") == (AUTO_MAX_RECORDS, True)
    assert max_records(TopologyConfig(driver_batch_max_records=None), "spark://h:7077") == (0, True)
    assert max_records(TopologyConfig(driver_batch_max_records=0), "local[2]") == (0, False)
    assert max_records(TopologyConfig(driver_batch_max_records=500), "yarn") == (500, False)


@pytest.mark.integration
@pytest.mark.parametrize("setting", [None, 0])
def test_small_kafka_batches_run_in_the_driver_with_auto_on_local_spark_and_as_spark_jobs_with_0(
        spark_context, kafka_broker, kafka_topic, tmp_path, caplog, setting):
    caplog.set_level(logging.DEBUG, logger="trident")
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: [f"w{i % 3} x" for i in range(30)]})
    # one batch in flight: under auto a second one would go to Spark (the next test)
    cfg = TopologyConfig(spark_master="local[2]", progress=False, driver_batch_max_records=setting,
                         max_spout_pending=1)
    result = run_topology(topology(kafka_broker.bootstrap, kafka_topic, tmp_path).build(), cfg, max_batches=3,
                          spark_context=spark_context)
    assert result.map_state("counts").multi_get(["w0", "w1", "w2", "x"]) == [10, 10, 10, 30]
    placed = placements(caplog)
    pids = {p.name for p in tmp_path.iterdir()}
    if setting is None:
        assert placed == ["in the driver's process"] * 3
        assert pids == {str(os.getpid())}
    else:
        assert placed == ["as a Spark job"] * 3
        assert str(os.getpid()) not in pids and len(pids) >= 1


def placements(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The placement log lines of the run, in order: where each batch processed."""
    return [m.group(1) for r in caplog.records if r.name == "trident"
            for m in [re.fullmatch(r"txid \d+: processing (in the driver's process|as a Spark job)", r.getMessage())]
            if m]


@pytest.mark.integration
def test_a_batch_placed_while_another_processes_in_the_driver_runs_as_a_spark_job(
        spark_context, kafka_broker, kafka_topic, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="trident")
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: [f"w{i % 2} x" for i in range(20)]})
    cfg = TopologyConfig(spark_master="local[2]", progress=False, driver_batch_max_records=None, max_spout_pending=2)
    # txid 1 waits in the driver's process until txid 2 has run on a Spark worker
    result = run_topology(topology(kafka_broker.bootstrap, kafka_topic, tmp_path, SplitAfterSpark).build(), cfg,
                          max_batches=2, spark_context=spark_context)
    assert result.map_state("counts").multi_get(["w0", "w1", "x"]) == [10, 10, 20]
    assert result.batches_committed == 2
    assert placements(caplog) == ["in the driver's process", "as a Spark job"]
    pids = {p.name for p in tmp_path.iterdir()}
    assert str(os.getpid()) in pids and len(pids) >= 2


def test_the_driver_takes_one_sized_batch_at_a_time_within_half_of_the_last_second() -> None:
    now = [100.0]
    small = SmallBatches({"k": lambda m: m["0"]["end"] - m["0"]["start"]}, budget_secs=1.0,
                         load=DriverLoad(share=0.5, window=1.0, clock=lambda: now[0]))
    batch = {"k": {"0": {"start": 0, "end": 5}}}
    assert small.take(batch) is True
    assert small.take(batch) is False           # the first one still processes here
    small.left(0.2)
    assert small.take(batch) is True            # 0.2 s of the last second
    now[0] = 100.3
    small.left(0.4)
    assert small.take(batch) is False           # 0.6 s of the last second: more than half
    now[0] = 100.9
    assert small.take(batch) is False           # both still in the window
    now[0] = 101.05
    assert small.take(batch) is True            # the first (0.2 s) left the window: 0.4 s used
    small.left(0.0)
    assert small.load is not None and small.load.running == 0
    assert small(batch) is True                 # the size test alone is unchanged
    assert SmallBatches({"k": lambda m: 5}).take(batch) is True     # no load bound: as before


def test_a_first_tiny_batch_that_paid_a_fixed_cost_does_not_keep_later_batches_off_the_driver() -> None:
    def batch(n: int) -> dict[str, dict[str, dict[str, int]]]:
        return {"k": {"0": {"start": 0, "end": n}}}

    small = SmallBatches({"k": lambda m: m["0"]["end"] - m["0"]["start"]}, budget_secs=1.0)
    small.ran(batch(1), 0.3)                    # one record, and the consumer to create: 0.3 s a record
    assert small(batch(2_000)) is False
    small.ran(batch(2_000), 0.2)                # measured on Spark: at most 0.1 ms a record
    assert small.per_item == 0.2 / 2_000
    assert small(batch(2_000)) is True and small(batch(9_000)) is False
