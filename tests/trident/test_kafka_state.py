"""The Kafka state (trident.kafka) on the Tansu broker the Kafka spouts use: per-task
partitions, txid/seq/epoch headers, a replay writing only what is missing, the fence,
bad input, and drivers SIGKILLed at every commit crash point, read back from the
earliest offset and compared with a fault-free run, partition by partition."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from crash_plans import kill_at_every_crash_point, run_topology_file

from spouts import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from state.errors import ConfigError, LeadershipLostError, StateUnavailableError, UnstorableValueError
from transactional import Fields
from transactional.testing import free_port
from trident import TridentTopology
from trident.kafka import HEADER_SEQ, HEADER_STATE, HEADER_TXID, TridentKafkaStateFactory, TridentKafkaUpdater
from trident.state import EPOCH, TOPOLOGY_ID

pytestmark = pytest.mark.integration


def make(kafka, topic: str, task: int = 0, tasks: int = 1, epoch: int = 1, **kw):
    f = TridentKafkaStateFactory(kafka.bootstrap, topic, key_field="k", value_field="v", **kw)
    return f.make_state({EPOCH: epoch, TOPOLOGY_ID: "t"}, None, task, tasks)


def apply(st, txid: int, recs) -> None:
    st.begin_commit(txid)
    for k, v in recs:
        st.add(k, v)
    st.commit(txid)


def values(kafka, topic: str, partitions: int) -> dict[int, list[bytes]]:
    return {p: [v for _, v in kafka.read(topic, p)] for p in range(partitions)}


def test_each_task_writes_its_partitions_and_a_replay_writes_only_what_is_missing(kafka_broker, kafka_topic) -> None:
    kafka_broker.create_topic(kafka_topic, partitions=2)
    st = make(kafka_broker, kafka_topic)
    apply(st, 1, [(None, "a"), (None, "b"), (None, "c")])        # keyless: spread by position
    # a driver died while txid 2 was half written: its first record is in the topic
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    p.produce(kafka_topic, value=b"d", partition=0,
              headers=[(HEADER_STATE, b"t:" + kafka_topic.encode()), (HEADER_TXID, b"2"), (HEADER_SEQ, b"0")])
    p.flush(10)
    apply(st, 2, [(None, "d"), (None, "e"), (None, "f")])       # the replay: d is not written again
    apply(st, 2, [(None, "d"), (None, "e"), (None, "f")])       # and once more: nothing
    assert values(kafka_broker, kafka_topic, 2) == {0: [b"a", b"c", b"d", b"f"], 1: [b"b", b"e"]}
    two = make(kafka_broker, kafka_topic, task=1, tasks=2)
    assert two.parts == [1]
    st.close()


def test_a_stale_driver_writes_nothing(kafka_broker, kafka_topic) -> None:
    kafka_broker.create_topic(kafka_topic, partitions=1)
    old, new = make(kafka_broker, kafka_topic, epoch=1), make(kafka_broker, kafka_topic, epoch=2)
    apply(old, 1, [("x", "1")])
    apply(new, 2, [("x", "2")])
    with pytest.raises(LeadershipLostError, match=r"a newer driver \(epoch 2\) writes it; this driver \(epoch 1\)"):
        apply(old, 3, [("x", "3")])
    assert values(kafka_broker, kafka_topic, 1) == {0: [b"1", b"2"]}


def test_bad_input_stops_before_anything_is_written(kafka_broker, kafka_topic) -> None:
    with pytest.raises(ConfigError, match=f"Kafka topic '{kafka_topic}' does not exist at .*create it first"):
        make(kafka_broker, kafka_topic)
    kafka_broker.create_topic(kafka_topic, partitions=1)
    with pytest.raises(ConfigError, match="has 1 partition\\(s\\) but the state has 2 tasks"):
        make(kafka_broker, kafka_topic, task=0, tasks=2)
    st = make(kafka_broker, kafka_topic)
    st.begin_commit(1)
    st.add("k", "fine")
    with pytest.raises(UnstorableValueError, match="the serializer cannot encode <object object"):
        st.add("k", object())
    f = TridentKafkaStateFactory(f"127.0.0.1:{free_port()}", "x", connect_timeout=2)
    with pytest.raises(StateUnavailableError, match="Kafka at '127.0.0.1:\\d+' cannot be reached for topic 'x'"):
        f.make_state({EPOCH: 1}, None, 0, 1)
    assert values(kafka_broker, kafka_topic, 1) == {0: []}


def test_an_opaque_spout_is_refused() -> None:
    t = TridentTopology("kafka-opaque")
    (t.new_stream("s", OpaqueMemoryTransactionalSpout({0: [("a",)]}, Fields("v"), 1))
     .partition_persist(TridentKafkaStateFactory("127.0.0.1:1", "out"), Fields("v"), TridentKafkaUpdater()))
    with pytest.raises(ConfigError, match=r"state 'kafka:out' skips a replayed txid.*\['s'\]"):
        t.build()
    t = TridentTopology("kafka-tx")
    (t.new_stream("s", MemoryTransactionalSpout({0: [("a",)]}, Fields("v"), 1))
     .partition_persist(TridentKafkaStateFactory("127.0.0.1:1", "out"), Fields("v"), TridentKafkaUpdater()))
    t.build()




def run_child(tmp_path: Path, bootstrap: str, out: str, tid: str, zk_url: str, crash_at: str | None):
    return run_topology_file(tmp_path, "kafka_kill_topology.py", zk_url, crash_at,
                             {"TRIDENT_TEST_KAFKA": bootstrap, "TRIDENT_TEST_OUT": out, "TRIDENT_TEST_TOPOLOGY": tid})


def test_drivers_killed_at_every_commit_crash_point_write_what_a_fault_free_run_writes(
        tmp_path: Path, kafka_broker, zk_url: str) -> None:
    clean, crashed = f"clean-{uuid.uuid4().hex[:8]}", f"crashed-{uuid.uuid4().hex[:8]}"
    for t in (clean, crashed):
        kafka_broker.create_topic(t, partitions=4)
    p = run_child(tmp_path, kafka_broker.bootstrap, clean, f"kk-clean-{uuid.uuid4().hex[:6]}", zk_url, None)
    assert p.returncode == 0, p.stderr[-3000:]
    tid = f"kk-{uuid.uuid4().hex[:6]}"
    kill_at_every_crash_point(lambda spec: run_child(tmp_path, kafka_broker.bootstrap, crashed, tid, zk_url, spec),
                              announced=False)
    want = {q: kafka_broker.read(clean, q) for q in range(4)}
    assert sum(len(v) for v in want.values()) == sum(len(s[0].split()) for rows in
                                                     __import__("kafka_kill_topology").DATA.values() for s in rows)
    assert {q: kafka_broker.read(crashed, q) for q in range(4)} == want


def test_a_core_kafka_bolt_writes_every_tuple_at_least_once_and_acks_it(kafka_broker, kafka_topic) -> None:
    from spouts.core import MemorySpout
    from transactional import TopologyBuilder, TopologyConfig, run_topology
    from trident.kafka import KafkaBolt

    kafka_broker.create_topic(kafka_topic, partitions=1)
    items = [f"s{i}" for i in range(50)]
    b = TopologyBuilder(f"kbolt-{uuid.uuid4().hex[:6]}")
    b.set_spout("s", MemorySpout(items, Fields("line")), 1)
    b.set_bolt("k", KafkaBolt(kafka_broker.bootstrap, kafka_topic, value_field="line"), 2).shuffle_grouping("s")
    r = run_topology(b.build(), TopologyConfig(executor="in-process", progress=False))
    assert r.acked == {"s": 50}, r.acked
    assert sorted(v.decode() for _, v in kafka_broker.read(kafka_topic, 0)) == sorted(items)


def test_a_transactional_committer_writes_a_topic_exactly_once(kafka_broker, kafka_topic) -> None:
    from transactional import TopologyConfig, TransactionalTopologyBuilder, run_topology
    from trident.kafka import KafkaCommitter

    kafka_broker.create_topic(kafka_topic, partitions=2)
    data = {0: [(f"a{i}",) for i in range(7)], 1: [(f"b{i}",) for i in range(5)]}
    b = TransactionalTopologyBuilder(f"kcommit-{uuid.uuid4().hex[:6]}", "s",
                                     MemoryTransactionalSpout(data, Fields("line"), 3), 2)
    b.set_committer_bolt("k", KafkaCommitter(TridentKafkaStateFactory(kafka_broker.bootstrap, kafka_topic,
                                                                      value_field="line")), 2).shuffle_grouping("s")
    run_topology(b.build(), TopologyConfig(executor="in-process", progress=False))
    got = sorted(v.decode() for p in range(2) for _, v in kafka_broker.read(kafka_topic, p))
    assert got == sorted(x for rows in data.values() for (x,) in rows)


# -- transactions=True: each task's txid one Kafka transaction ----------------------------------

def read_committed(kafka, topic: str, partition: int) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "rc", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[bytes] = []
    try:
        while True:
            for m in c.consume(100, 5):
                if m.error() is None:
                    out.append(m.value())
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return out
    finally:
        c.close()


def test_transactions_commit_each_txid_with_its_marker_and_a_replay_writes_nothing(
        kafka_broker, kafka_topic, caplog) -> None:
    import logging

    kafka_broker.create_topic(kafka_topic, partitions=2)
    with caplog.at_level(logging.INFO, logger="trident"):
        st = make(kafka_broker, kafka_topic, transactions=True)
    assert f"Kafka state kafka:{kafka_topic}: one Kafka transaction per task and txid" in caplog.text
    apply(st, 1, [("a", "1"), ("b", "2")])
    apply(st, 2, [("a", "3")])
    apply(st, 2, [("a", "3")])                            # the replay of a committed txid: nothing
    assert st.txn.last_txid()[0] == 2                     # the marker: the group's committed offset
    assert sorted(read_committed(kafka_broker, kafka_topic, 0) + read_committed(kafka_broker, kafka_topic, 1)) == [
        b"1", b"2", b"3"]
    with pytest.raises(Exception, match=r"committed txid 2, newer than the batch's 1"):
        apply(st, 1, [("a", "1")])
    st.close()


def test_a_stale_drivers_transactional_producer_is_fenced(kafka_broker, kafka_topic) -> None:
    kafka_broker.create_topic(kafka_topic, partitions=1)
    old = make(kafka_broker, kafka_topic, epoch=1, transactions=True)
    apply(old, 1, [("x", "1")])
    new = make(kafka_broker, kafka_topic, epoch=2, transactions=True)   # the same transactional.id: fences old
    with pytest.raises(LeadershipLostError, match=r"producer 'trident:t:.*:task0' was fenced by a newer one"):
        apply(old, 2, [("x", "stale")])
    apply(new, 2, [("x", "2")])
    assert read_committed(kafka_broker, kafka_topic, 0) == [b"1", b"2"]


def test_the_test_broker_shows_aborted_records_to_read_committed_consumers(kafka_broker, kafka_topic) -> None:
    """What docs/states.md says of Tansu: transactions, fencing and transactional offsets
    work; aborted records are not hidden (so transactions=True is not exact there)."""
    from confluent_kafka import Producer

    kafka_broker.create_topic(kafka_topic, partitions=1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"probe-{kafka_topic}"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(kafka_topic, b"aborted", partition=0)
    p.flush(10)
    p.abort_transaction(10)
    assert read_committed(kafka_broker, kafka_topic, 0) == [b"aborted"]
