"""The Kafka coordinator plans every partition of a batch in one round (issue 38):
``plan_partitions`` asks ListOffsets per partition and probes all partitions whose
answer may be short with ONE fetch (one consumer assignment), against a real broker
(Tansu). The request counts come from a counting ``Consumer`` passed through the
coordinator's ``consumer_factory`` seam, not from timing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from spouts.base import PartitionedTransactionalSpout
from spouts.kafka import KafkaCoordinator, KafkaTransactionalSpout
from transactional.engine.spout_planner import SpoutPlanner
from transactional.testing._process import wait_until
from transactional.tuples import Fields

pytestmark = pytest.mark.integration


class Counting(Consumer):
    """A consumer that counts its fetch assignments and ListOffsets requests."""

    calls: Counter[str] = Counter()

    def assign(self, partitions: Any) -> None:
        Counting.calls["assign"] += 1
        super().assign(partitions)

    def incremental_assign(self, partitions: Any) -> None:
        Counting.calls["assign"] += 1
        super().incremental_assign(partitions)

    def get_watermark_offsets(self, partition: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("cached", False):
            Counting.calls["list_offsets"] += 1
        return super().get_watermark_offsets(partition, *args, **kwargs)


def coordinator(bootstrap: str, topic: str, **kwargs: Any) -> KafkaCoordinator:
    Counting.calls = Counter()
    return KafkaCoordinator(KafkaTransactionalSpout(bootstrap, topic, **kwargs), consumer_factory=Counting)


def produce_batched(bootstrap: str, topic: str, records: dict[int, int], tag: str) -> None:
    """``records[p]`` records into partition p, flushed once: the last record batch of a
    partition holds several records, so Tansu's ListOffsets answers short of them."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for part, n in records.items():
        for i in range(n):
            p.produce(topic, f"{tag}{i}".encode(), partition=part)
    p.flush(30)


def test_one_plan_gives_exact_ranges_for_every_partition_with_one_fetch(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 4)
    produce_batched(kafka_broker.bootstrap, kafka_topic, {0: 30, 1: 7, 3: 12}, "a")
    c = coordinator(kafka_broker.bootstrap, kafka_topic, max_records_per_partition=20)
    try:
        listed = {p: c.watermarks(p)[1] for p in (0, 1, 3)}
        assert any(listed[p] < n for p, n in ((0, 30), (1, 7), (3, 12))), f"ListOffsets answered in full: {listed}"
        empty = {"start": 0, "end": 0}
        Counting.calls.clear()
        plan = c.plan_partitions({p: empty for p in range(4)})
        # exact ranges, the cap on partition 0, nothing for the empty partition 2
        assert plan == {0: {"start": 0, "end": 20}, 1: {"start": 0, "end": 7}, 2: None, 3: {"start": 0, "end": 12}}
        # one ListOffsets a partition, ONE fetch assignment for all partitions probed
        assert Counting.calls == Counter({"list_offsets": 4, "assign": 1})
        # nothing new anywhere but the rest of partition 0; ListOffsets did not move: no fetch
        Counting.calls.clear()
        last = {0: plan[0], 1: plan[1], 2: empty, 3: plan[3]}
        assert c.plan_partitions(last) == {0: {"start": 20, "end": 30}, 1: None, 2: None, 3: None}
        assert Counting.calls == Counter({"list_offsets": 4})
        assert c.lag() == {"0": 30, "1": 7, "2": 0, "3": 12}
    finally:
        c.close()


def test_one_plan_after_more_records_reads_the_short_batches_of_several_partitions(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 3)
    kafka_broker.produce(kafka_topic, {0: ["x0", "x1"], 1: ["y0"], 2: ["z0"]})   # ListOffsets right here
    c = coordinator(kafka_broker.bootstrap, kafka_topic)
    try:
        first = c.plan_partitions({0: None, 1: None, 2: None})
        assert first == {0: {"start": 0, "end": 2}, 1: {"start": 0, "end": 1}, 2: {"start": 0, "end": 1}}
        produce_batched(kafka_broker.bootstrap, kafka_topic, {0: 5, 2: 9}, "late")
        Counting.calls.clear()
        assert c.plan_partitions(first) == {0: {"start": 2, "end": 7}, 1: None, 2: {"start": 1, "end": 10}}
        assert Counting.calls["assign"] == 1
    finally:
        c.close()


def test_partitions_added_mid_run_are_planned_in_the_same_round(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, {0: ["a0", "a1"], 1: ["b0", "b1"]})
    # plans capped below the log's end fetch nothing: librdkafka crashes when a topic it
    # fetched from is deleted under it, and the broker helper adds partitions by recreating
    # the topic (tests/support, docs/kafka.md)
    c = coordinator(kafka_broker.bootstrap, kafka_topic, max_records_per_partition=1)
    planner = SpoutPlanner(_Given(c), {}, "t", "kafka", 1)
    try:
        meta, parts = planner.plan(1, None, None)
        assert meta == {"0": {"start": 0, "end": 1}, "1": {"start": 0, "end": 1}}
        kafka_broker.add_partitions(kafka_topic, 3)
        kafka_broker.produce(kafka_topic, {2: ["c0", "c1"]})
        wait_until(lambda: c.num_partitions() == 3, 10, what="the coordinator to see 3 partitions")
        Counting.calls.clear()
        meta, parts = planner.plan(2, meta, parts)
        assert meta == {"0": {"start": 1, "end": 2}, "1": {"start": 1, "end": 2}, "2": {"start": 0, "end": 1}}
        assert parts == meta
        assert Counting.calls == Counter({"list_offsets": 3 + 1})   # + where partition 2 starts (once)
    finally:
        c.close()


class _Given(PartitionedTransactionalSpout):
    """A spout whose coordinator is given (the planner's side only)."""

    def __init__(self, c: KafkaCoordinator) -> None:
        self.c = c

    def get_coordinator(self, conf: Any, context: Any) -> KafkaCoordinator:
        return self.c

    def get_emitter(self, conf: Any, context: Any) -> Any:
        raise NotImplementedError

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("tx", "value"))
