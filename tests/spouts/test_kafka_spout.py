"""The Kafka spouts' parts without the engine, against a real broker (Tansu, from the
``kafka_broker`` fixture): planning on the driver, exact reads of planned ranges,
opaque short reads, errors for ranges that are gone, partitions added to the topic,
an unreachable broker, the informational offset commits."""

from __future__ import annotations

import json
import pickle
import time

import pytest
from collectors import RowCollector as Collector
from pyspark import cloudpickle

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from transactional.exceptions import ConfigError, FailedException, SpoutError
from transactional.testing._process import free_port, wait_until
from transactional.tuples import Fields, TransactionAttempt

pytestmark = pytest.mark.integration

TX1 = TransactionAttempt(1, 1)


class Declarer:
    def declare(self, fields: Fields, stream: str = "default", direct: bool = False) -> None:
        self.fields = fields


def read(spout, partition: int, meta: dict, tx: TransactionAttempt = TX1):
    """Emit one planned range with a fresh emitter; (returned meta, emitted values)."""
    e = spout.get_emitter({}, None)
    try:
        col = Collector()
        got = e.emit_partition_batch(tx, col, partition, meta)
        assert all(r[0] == tx for r in col.rows)
        return got, [r[1:] if len(r) > 2 else r[1] for r in col.rows]
    finally:
        e.close()


@pytest.fixture
def topic3(kafka_broker, kafka_topic):
    """3 partitions holding 25, 3 and 0 records ``p<partition>-<i>``."""
    kafka_broker.create_topic(kafka_topic, 3)
    ends = kafka_broker.produce(kafka_topic, {0: [f"p0-{i}" for i in range(25)], 1: ["p1-0", "p1-1", "p1-2"]})
    assert ends == {0: 25, 1: 3}
    return kafka_topic


def test_coordinator_plans_ranges_up_to_the_high_watermark(kafka_broker, topic3):
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, max_records_per_partition=10)
    c = spout.get_coordinator({}, None)
    try:
        assert c.num_partitions() == 3
        assert c.plan_partition(0, None) == {"start": 0, "end": 10}
        assert c.plan_partition(0, {"start": 0, "end": 10}) == {"start": 10, "end": 20}
        assert c.plan_partition(0, {"start": 10, "end": 20}) == {"start": 20, "end": 25}
        assert c.plan_partition(0, {"start": 20, "end": 25}) is None      # nothing new
        assert c.plan_partition(1, None) == {"start": 0, "end": 3}
        assert c.plan_partition(2, None) is None                          # empty partition
        kafka_broker.produce(topic3, {0: ["late-0", "late-1"], 2: ["p2-0"]})
        assert c.plan_partition(0, {"start": 20, "end": 25}) == {"start": 25, "end": 27}
        assert c.plan_partition(2, None) == {"start": 0, "end": 1}
    finally:
        c.close()


def test_start_positions_latest_and_explicit_offsets(kafka_broker, topic3):
    latest = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, start="latest").get_coordinator({}, None)
    explicit = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, start={0: 22}).get_coordinator({}, None)
    try:
        assert latest.plan_partition(0, None) is None
        assert explicit.plan_partition(0, None) == {"start": 22, "end": 25}
        assert explicit.plan_partition(1, None) == {"start": 0, "end": 3}   # not named: earliest
        kafka_broker.produce(topic3, {0: ["new-0", "new-1"]})
        # 'latest' is where the topology began, not where the log ends at each plan
        assert latest.plan_partition(0, None) == {"start": 25, "end": 27}
    finally:
        latest.close()
        explicit.close()


def test_emitter_reads_exactly_the_planned_range_and_replays_it(kafka_broker, topic3):
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3)
    meta = {"start": 7, "end": 19}
    got, first = read(spout, 0, meta)
    assert got is None
    assert first == [f"p0-{i}" for i in range(7, 19)]
    # a replay (new attempt, another emitter) reads the same records
    _, again = read(spout, 0, meta, TransactionAttempt(1, 2))
    assert again == first
    # the last record of the partition, and a range ending at the high watermark
    assert read(spout, 0, {"start": 24, "end": 25})[1] == ["p0-24"]
    # one emitter reused across ranges and partitions (as in a Spark worker)
    e = spout.get_emitter({}, None)
    try:
        for part, m, want in [(0, {"start": 0, "end": 3}, ["p0-0", "p0-1", "p0-2"]),
                              (1, {"start": 1, "end": 3}, ["p1-1", "p1-2"]),
                              (0, {"start": 3, "end": 4}, ["p0-3"])]:
            col = Collector()
            e.emit_partition_batch(TX1, col, part, m)
            assert [r[1] for r in col.rows] == want
    finally:
        e.close()


def test_fields_and_deserializers(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: [("k1", json.dumps({"n": 1})), ("k2", json.dumps({"n": 2}))]})
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, deserializer="json",
                                    key_deserializer="utf-8", fields=("partition", "offset", "key", "value"),
                                    field_names=("p", "o", "k", "doc"))
    d = Declarer()
    spout.declare_output_fields(d)
    assert d.fields == Fields("tx", "p", "o", "k", "doc")
    _, rows = read(spout, 0, {"start": 0, "end": 2})
    assert rows == [(0, 0, "k1", {"n": 1}), (0, 1, "k2", {"n": 2})]
    raw = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, deserializer="bytes")
    assert read(raw, 0, {"start": 1, "end": 2})[1] == [b'{"n": 2}']
    custom = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, deserializer=lambda b: len(b))
    assert read(custom, 0, {"start": 0, "end": 2})[1] == [8, 8]


def _three_records(tx, partition, start, end):
    return start + 3


def _unfetchable(tx, partition, start, end):
    return start


def test_opaque_short_read_returns_what_it_emitted_and_the_plan_continues_there(kafka_broker, topic3):
    spout = OpaqueKafkaTransactionalSpout(kafka_broker.bootstrap, topic3, max_records_per_partition=10,
                                          fetch_fault=_three_records)
    got, rows = read(spout, 0, {"start": 10, "end": 20})
    assert got == {"start": 10, "end": 13}
    assert rows == ["p0-10", "p0-11", "p0-12"]
    nothing = OpaqueKafkaTransactionalSpout(kafka_broker.bootstrap, topic3, fetch_fault=_unfetchable)
    assert read(nothing, 0, {"start": 10, "end": 20}) == ({"start": 10, "end": 10}, [])
    # the coordinator plans the next batch from where the short one ended: nothing skipped
    c = spout.get_coordinator({}, None)
    try:
        assert c.plan_partition(0, got) == {"start": 13, "end": 23}
    finally:
        c.close()
    # without a fault the opaque emitter returns the whole planned range
    whole = OpaqueKafkaTransactionalSpout(kafka_broker.bootstrap, topic3)
    assert read(whole, 0, {"start": 10, "end": 20})[0] == {"start": 10, "end": 20}


def test_transactional_spout_fails_the_batch_when_a_range_is_unavailable(kafka_broker, topic3):
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, fetch_fault=_three_records)
    with pytest.raises(FailedException) as e:
        read(spout, 0, {"start": 10, "end": 20}, TransactionAttempt(4, 1))
    msg = str(e.value)
    assert topic3 in msg and "partition 0" in msg and "10..19" in msg and "txid 4" in msg


def test_a_range_that_is_gone_is_a_spout_error_naming_it_not_a_hang(kafka_broker, topic3):
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, fetch_timeout_secs=8)
    t0 = time.monotonic()
    # offsets the log does not hold (as after a truncation, or the topic recreated)
    with pytest.raises(SpoutError) as e:
        read(spout, 0, {"start": 20, "end": 40}, TransactionAttempt(9, 2))
    assert time.monotonic() - t0 < 5, "must not wait for the whole fetch timeout"
    msg = str(e.value)
    assert all(s in msg for s in (repr(topic3), "partition 0", "20..39", "txid 9")), msg


def test_opaque_read_past_the_end_emits_what_exists(kafka_broker, topic3):
    spout = OpaqueKafkaTransactionalSpout(kafka_broker.bootstrap, topic3, fetch_timeout_secs=1.5)
    got, rows = read(spout, 0, {"start": 20, "end": 40})
    assert rows == [f"p0-{i}" for i in range(20, 25)]
    assert got == {"start": 20, "end": 25}


def test_a_deleted_topic_is_a_spout_error(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 1)
    kafka_broker.produce(kafka_topic, {0: [f"r{i}" for i in range(10)]})
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, fetch_timeout_secs=8)
    c = spout.get_coordinator({}, None)
    meta = c.plan_partition(0, None)
    c.close()
    assert meta == {"start": 0, "end": 10}
    kafka_broker.delete_topic(kafka_topic)
    t0 = time.monotonic()
    with pytest.raises(SpoutError) as e:
        read(spout, 0, meta, TransactionAttempt(3, 1))
    assert time.monotonic() - t0 < 8
    assert repr(kafka_topic) in str(e.value) and "0..9" in str(e.value) and "txid 3" in str(e.value)


def test_partitions_added_to_the_topic_are_read_from_their_start(kafka_broker, kafka_topic):
    kafka_broker.create_topic(kafka_topic, 2)
    kafka_broker.produce(kafka_topic, {0: ["a0", "a1"], 1: ["b0"]})
    # 'latest' applies to the partitions there at the start; later ones start at earliest
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, kafka_topic, start="latest")
    c = spout.get_coordinator({}, None)
    try:
        assert c.num_partitions() == 2
        assert c.plan_partition(0, None) is None
        kafka_broker.add_partitions(kafka_topic, 4)
        kafka_broker.produce(kafka_topic, {0: ["a2"], 3: ["d0", "d1", "d2"]})
        wait_until(lambda: c.num_partitions() == 4, 10, what="the coordinator to see 4 partitions")
        assert c.plan_partition(3, None) == {"start": 0, "end": 3}
        assert c.plan_partition(2, None) is None
        assert c.plan_partition(0, None) == {"start": 2, "end": 3}
        assert read(spout, 3, {"start": 0, "end": 3})[1] == ["d0", "d1", "d2"]
        # the records that were there before are still at their offsets
        assert read(spout, 0, {"start": 0, "end": 3})[1] == ["a0", "a1", "a2"]
    finally:
        c.close()


def test_unreachable_broker_is_a_clear_error_naming_the_address_within_10s():
    address = f"127.0.0.1:{free_port()}"
    spout = KafkaTransactionalSpout(address, "words")
    t0 = time.monotonic()
    with pytest.raises(SpoutError) as e:
        spout.get_coordinator({}, None)
    assert time.monotonic() - t0 < 10
    assert address in str(e.value) and "words" in str(e.value)


def test_broker_down_mid_run_opaque_emits_less_transactional_fails_the_batch(kafka_factory, kafka_topic):
    broker = kafka_factory()
    broker.create_topic(kafka_topic, 1)
    broker.produce(kafka_topic, {0: [f"r{i}" for i in range(10)]})
    opaque = OpaqueKafkaTransactionalSpout(broker.bootstrap, kafka_topic, fetch_timeout_secs=1.5,
                                           metadata_timeout_secs=1)
    plain = KafkaTransactionalSpout(broker.bootstrap, kafka_topic, fetch_timeout_secs=1.5, metadata_timeout_secs=1)
    c = opaque.get_coordinator({}, None)
    try:
        broker.kill()
        # the coordinator keeps what it knew and plans nothing while the broker is away
        assert c.num_partitions() == 1
        assert c.plan_partition(0, {"start": 0, "end": 10}) is None
    finally:
        c.close()
    t0 = time.monotonic()
    assert read(opaque, 0, {"start": 0, "end": 10}) == ({"start": 0, "end": 0}, [])
    with pytest.raises(FailedException, match="partition 0: offsets 0..9 of txid 1"):
        read(plain, 0, {"start": 0, "end": 10})
    assert time.monotonic() - t0 < 10


def test_committed_offsets_are_written_to_the_consumer_group_for_monitoring(kafka_broker, topic3):
    spout = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, group_id=f"{topic3}-monitor")
    c = spout.get_coordinator({}, None)
    try:
        c.committed(1, {"0": {"start": 0, "end": 10}, "1": {"start": 0, "end": 3}})
        c.committed(2, {"0": {"start": 10, "end": 25}})

        def offsets():
            c.consumer.poll(0)
            return kafka_broker.committed_offsets(f"{topic3}-monitor", topic3, [0, 1])

        wait_until(lambda: offsets() == {0: 25, 1: 3}, 10, what="the committed offsets")
    finally:
        c.close()
    # without a group nothing is written
    quiet = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3).get_coordinator({}, None)
    quiet.committed(1, {"0": {"start": 0, "end": 10}})
    quiet.close()
    assert kafka_broker.committed_offsets(f"trident-spout-{topic3}", topic3, [0])[0] < 0


def test_spouts_are_picklable_and_open_no_client_until_used(kafka_broker, topic3):
    spout = OpaqueKafkaTransactionalSpout(kafka_broker.bootstrap, topic3, fetch_fault=_three_records)
    e = spout.get_emitter({}, None)
    assert e.consumer is None                          # created lazily, in the Spark task
    copy = pickle.loads(pickle.dumps(spout))
    assert read(copy, 0, {"start": 0, "end": 5})[0] == {"start": 0, "end": 3}
    with_lambda = KafkaTransactionalSpout(kafka_broker.bootstrap, topic3, deserializer=lambda b: b[::-1])
    assert read(cloudpickle.loads(cloudpickle.dumps(with_lambda)), 1, {"start": 0, "end": 1})[1] == [b"0-1p"]


@pytest.mark.parametrize("kwargs, match", [
    ({"bootstrap_servers": "", "topic": "t"}, "bootstrap_servers"),
    ({"topic": ""}, "topic"),
    ({"max_records_per_partition": 0}, "max_records_per_partition"),
    ({"start": "middle"}, "start"),
    ({"start": {0: -1}}, "start offset"),
    ({"deserializer": "avro"}, "deserializer"),
    ({"fields": ("value", "headers")}, "fields"),
    ({"field_names": ("a", "b")}, "field_names"),
    ({"client_config": {"enable.auto.commit": True}}, "enable.auto.commit"),
    ({"fetch_timeout_secs": 0}, "fetch_timeout_secs"),
])
def test_invalid_options_are_config_errors(kwargs, match):
    args = {"bootstrap_servers": "127.0.0.1:9092", "topic": "t", **kwargs}
    with pytest.raises(ConfigError, match=match):
        KafkaTransactionalSpout(**args)
