"""The Kafka spouts read every produced record although the broker answers ListOffsets
short (issue 27).

A plain confluent-kafka producer batches records; Tansu then answers ListOffsets(latest)
with the base offset of the last record batch + 1, short of that batch's other records.
The coordinator plans from the high watermark a Fetch response reports instead, so a run
reads every record without waiting for a later produce, and the lag reads 0 only when
every record was committed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from transactional import Fields, TopologyConfig
from transactional.ops.run import run_topology
from trident import Count, TridentTopology
from trident import state as trident_state

pytestmark = pytest.mark.integration

PER_PARTITION = 10_000


def produce_plainly(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "r") -> None:
    """What a new user does: produce in a loop, flush once (librdkafka batches records)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition * partitions):
        p.produce(topic, f"{tag}{i}".encode(), partition=i % partitions)
    p.flush(30)


@pytest.fixture
def plain_topic(kafka_broker: Any, kafka_topic: str) -> str:
    kafka_broker.create_topic(kafka_topic, 2)
    produce_plainly(kafka_broker.bootstrap, kafka_topic, 2, PER_PARTITION)
    return kafka_topic


@pytest.mark.parametrize("cls", [KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout],
                         ids=["transactional", "opaque"])
def test_plans_reach_every_record_and_lag_is_zero_only_when_all_are_committed(kafka_broker, plain_topic, cls):
    c = cls(kafka_broker.bootstrap, plain_topic, max_records_per_partition=4_000).get_coordinator({}, None)
    try:
        listed = [c.watermarks(p)[1] for p in range(2)]
        assert all(h < PER_PARTITION for h in listed), f"the broker answered ListOffsets in full here: {listed}"
        for p in range(2):
            ranges, last = [], None
            while (m := c.plan_partition(p, last)) is not None:
                ranges.append((m["start"], m["end"]))
                last = m
            assert ranges == [(0, 4_000), (4_000, 8_000), (8_000, PER_PARTITION)]
        assert c.lag() == {"0": PER_PARTITION, "1": PER_PARTITION}
        c.committed(1, {"0": {"start": 0, "end": 9_000}, "1": {"start": 0, "end": PER_PARTITION}})
        assert c.lag() == {"0": 1_000, "1": 0}
        c.committed(2, {"0": {"start": 9_000, "end": PER_PARTITION}})
        assert c.lag() == {"0": 0, "1": 0}
    finally:
        c.close()


def test_latest_starts_after_the_last_record_not_inside_the_last_record_batch(kafka_broker, plain_topic):
    c = KafkaTransactionalSpout(kafka_broker.bootstrap, plain_topic, start="latest").get_coordinator({}, None)
    try:
        assert c.initial_meta(0, False) == {"start": PER_PARTITION, "end": PER_PARTITION}
        assert c.plan_partition(0, {"start": PER_PARTITION, "end": PER_PARTITION}) is None
        produce_plainly(kafka_broker.bootstrap, plain_topic, 2, 3, tag="late")
        assert c.plan_partition(0, {"start": PER_PARTITION, "end": PER_PARTITION}) == \
            {"start": PER_PARTITION, "end": PER_PARTITION + 3}
    finally:
        c.close()


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_a_run_counts_every_record_of_a_plain_producer(kafka_broker, plain_topic, opaque):
    cls = OpaqueKafkaTransactionalSpout if opaque else KafkaTransactionalSpout
    spout = cls(kafka_broker.bootstrap, plain_topic, max_records_per_partition=3_000, fields=("partition", "value"))
    t = TridentTopology(f"plain-{uuid.uuid4().hex[:8]}")
    flavour = trident_state.opaque if opaque else trident_state.transactional
    t.new_stream("kafka", spout).group_by(Fields("partition")) \
        .persistent_aggregate(flavour("per-partition"), Count(), Fields("n"))
    r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False, max_spout_pending=3))
    assert r.map_state("per-partition", opaque=opaque).multi_get([0, 1]) == [PER_PARTITION, PER_PARTITION]
    assert r.batches_committed == 4
