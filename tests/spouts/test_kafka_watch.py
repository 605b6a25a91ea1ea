"""The Kafka coordinator while the engine listens (``wake_on_input``, ``spouts.kafka.watch``),
against a real broker: a record produced to an idle topic wakes the driver, plans read
exact ranges from the watch's Fetch answers (also where ListOffsets is short), and a run
fed while it waits counts every record once."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import Producer

from spouts.kafka import KafkaTransactionalSpout
from transactional import TopologyConfig, run_topology
from transactional.engine.wakeup import Wakeup
from transactional.tuples import Fields
from trident import BaseFunction, Count, TridentTopology
from trident import state as trident_state

pytestmark = pytest.mark.integration


class Split(BaseFunction):
    """``("w0 w1",)`` -> ``("w0",), ("w1",)``."""

    def execute(self, tuple, collector):
        for w in tuple[0].split():
            collector.emit((w,))


def produce_batched(bootstrap: str, topic: str, partition: int, n: int, tag: str) -> None:
    """``n`` records in as few record batches as the client makes (ListOffsets on Tansu
    answers the last batch's base offset + 1: short of the end)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "batch.num.messages": 10_000})
    for i in range(n):
        p.produce(topic, f"{tag}-{i}".encode(), partition=partition)
    assert p.flush(30) == 0


@pytest.fixture
def listened(kafka_broker, kafka_topic):
    """(coordinator of an empty 2-partition topic with a Wakeup listening, the Wakeup)."""
    kafka_broker.create_topic(kafka_topic, 2)
    c = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, max_records_per_partition=1000) \
        .get_coordinator({}, None)
    w = Wakeup()
    c.wake_on_input(w.input)
    yield c, w
    c.close()


def test_a_record_produced_to_an_idle_topic_wakes_the_driver(kafka_broker, kafka_topic, listened):
    c, w = listened
    empty = {"start": 0, "end": 0}
    assert c.plan_partition(0, empty) is None
    assert c.plan_partition(1, empty) is None
    assert (w.wait(0.0), w.take_input()) == (False, False)      # nothing past the plans
    kafka_broker.produce(kafka_topic, {1: ["a"]})
    assert w.wait(10.0) is True
    assert w.take_input() is True
    assert c.plan_partition(0, empty) is None
    assert c.plan_partition(1, empty) == {"start": 0, "end": 1}
    # once per plan: the plan above moved the frontier to 1, nothing is past it
    assert (w.wait(0.0), w.take_input()) == (False, False)
    c.committed(1, {"1": {"start": 0, "end": 1}})    # while a range waits for its commit, the commit wakes it
    kafka_broker.produce(kafka_topic, {0: ["b", "c"]})
    assert w.wait(10.0) is True
    assert c.plan_partition(0, empty) == {"start": 0, "end": 2}
    assert c.plan_partition(1, {"start": 0, "end": 1}) is None


def test_plans_from_the_watch_are_exact_where_list_offsets_is_short(kafka_broker, kafka_topic, listened):
    c, w = listened
    produce_batched(kafka_broker.bootstrap, kafka_topic, 0, 40, "x")
    first = c.plan_partition(0, {"start": 0, "end": 0})
    assert first == {"start": 0, "end": 40}                     # ListOffsets, corrected by a Fetch probe
    c.committed(1, {"0": first})
    produce_batched(kafka_broker.bootstrap, kafka_topic, 0, 30, "y")
    assert w.wait(10.0) is True
    assert c.watermarks(0)[1] < 70                              # the broker's ListOffsets is short here
    assert c.plan_partition(0, first) == {"start": 40, "end": 70}
    assert c.plan_partition(0, {"start": 40, "end": 70}) is None


def test_records_produced_while_the_run_waits_are_counted_once(spark_context, kafka_broker, kafka_topic):

    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, {0: ["w0 w1"], 1: ["w1"]})
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, max_records_per_partition=7,
                                    field_names=("sentence",))
    t = TridentTopology(f"kafka-watch-{kafka_topic}")
    t.new_stream("spout", spout).each(Fields("sentence"), Split(), Fields("word")) \
        .group_by(Fields("word")).persistent_aggregate(trident_state.transactional("counts"), Count(), Fields("n"))
    fed = threading.Event()

    def on_commit(txid, result):
        if not fed.is_set():        # after the first batch: more records while the run is idle
            fed.set()
            threading.Thread(target=kafka_broker.produce, daemon=True, args=(
                kafka_topic, {0: [f"w{i % 3}" for i in range(20)], 1: [f"w{i % 3}" for i in range(11)]})).start()

    # a poll interval far longer than the run: only the watch can wake it in time
    cfg = TopologyConfig(spark_master="local[2]", progress=False, idle_timeout_secs=3.0, poll_interval_secs=60.0,
                         max_spout_pending=2)
    result = run_topology(t.build(), cfg, spark_context=spark_context, on_commit=on_commit)
    m = result.map_state("counts")
    assert m.multi_get(["w0", "w1", "w2"]) == [1 + 7 + 4, 2 + 7 + 4, 6 + 3]
