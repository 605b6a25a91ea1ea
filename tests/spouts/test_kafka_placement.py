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
from pathlib import Path

import pytest

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from transactional import TopologyConfig, run_topology
from transactional.engine.placement import AUTO_MAX_RECORDS, SmallBatches, max_records, sized_rules
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


def topology(bootstrap: str, topic: str, pids: Path) -> TridentTopology:
    spout = KafkaTransactionalSpout(bootstrap, topic, max_records_per_partition=10, field_names=("sentence",))
    t = TridentTopology(f"kafka-placement-{topic}")
    t.new_stream("spout", spout).each(Fields("sentence"), Split(str(pids)), Fields("word")) \
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
    cfg = TopologyConfig(spark_master="local[2]", progress=False, driver_batch_max_records=setting)
    result = run_topology(topology(kafka_broker.bootstrap, kafka_topic, tmp_path).build(), cfg, max_batches=3,
                          spark_context=spark_context)
    assert result.map_state("counts").multi_get(["w0", "w1", "w2", "x"]) == [10, 10, 10, 30]
    placed = [m.group(1) for r in caplog.records if r.name == "trident"
              for m in [re.fullmatch(r"txid \d+: processing (in the driver's process|as a Spark job)", r.getMessage())]
              if m]
    pids = {p.name for p in tmp_path.iterdir()}
    if setting is None:
        assert placed == ["in the driver's process"] * 3
        assert pids == {str(os.getpid())}
    else:
        assert placed == ["as a Spark job"] * 3
        assert str(os.getpid()) not in pids and len(pids) >= 1


def test_a_first_tiny_batch_that_paid_a_fixed_cost_does_not_keep_later_batches_off_the_driver() -> None:
    def batch(n: int) -> dict[str, dict[str, dict[str, int]]]:
        return {"k": {"0": {"start": 0, "end": n}}}

    small = SmallBatches({"k": lambda m: m["0"]["end"] - m["0"]["start"]}, budget_secs=1.0)
    small.ran(batch(1), 0.3)                    # one record, and the consumer to create: 0.3 s a record
    assert small(batch(2_000)) is False
    small.ran(batch(2_000), 0.2)                # measured on Spark: at most 0.1 ms a record
    assert small.per_item == 0.2 / 2_000
    assert small(batch(2_000)) is True and small(batch(9_000)) is False
