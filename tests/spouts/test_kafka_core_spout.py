"""``KafkaSpout`` (at-least-once) against a real Kafka-protocol broker (Tansu): the
committed offset of a partition never passes its lowest unacked message, failed records
come again, and a restarted spout re-reads every record that was not acked."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis_stream_child import Collector, Ctx

from spouts.kafka.core import KafkaSpout
from transactional.exceptions import ConfigError

pytestmark = pytest.mark.integration


def drain(spout: KafkaSpout, c: Collector, n: int, tries: int = 200) -> list[tuple[Any, Any]]:
    for _ in range(tries):
        if len(c.out) >= n:
            break
        spout.next_tuple()
    out, c.out = c.out, []
    return out


@pytest.fixture
def topic(kafka_broker: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(name, 2)
    kafka_broker.produce(name, {0: [f"a{i}" for i in range(6)], 1: [f"b{i}" for i in range(4)]})
    return name


def opened(kafka_broker: Any, topic: str, group: str, task: int = 0, tasks: int = 1) -> tuple[KafkaSpout, Collector]:
    s, c = KafkaSpout(kafka_broker.bootstrap, topic, group, fields=("partition", "offset", "value"),
                      commit_interval_secs=0), Collector()
    s.open({}, Ctx(task, tasks), c)
    return s, c


def test_the_committed_offset_stays_at_the_lowest_unacked_record(kafka_broker: Any, topic: str) -> None:
    s, c = opened(kafka_broker, topic, f"g-{uuid.uuid4().hex[:6]}")
    got = drain(s, c, 10)
    assert sorted(m for _, m in got) == [(0, i) for i in range(6)] + [(1, i) for i in range(4)]
    assert all(v == (p, o, ("a" if p == 0 else "b") + str(o)) for v, (p, o) in got)
    for off in (0, 1, 3, 4):                          # (0, 2) is still out
        s.ack((0, off))
    for off in range(4):
        s.ack((1, off))
    assert s.commit() == {0: 2, 1: 4}
    s.ack((0, 2))
    assert s.commit() == {0: 5, 1: 4}                 # (0, 5) is still out
    s.ack((0, 5))
    assert s.commit() == {0: 6, 1: 4}
    s.close()


def test_failed_records_come_again_and_a_restart_rereads_the_unacked(kafka_broker: Any, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    s, c = opened(kafka_broker, topic, group)
    drain(s, c, 10)
    for off in (0, 1, 2, 4):
        s.ack((0, off))
    s.fail((0, 3))
    again = drain(s, c, 1)
    assert again == [((0, 3, "a3"), (0, 3))]
    s.commit()                                        # partition 0 at 3; partition 1 at 0
    del s                                             # a crash: no close, nothing more committed
    s2, c2 = opened(kafka_broker, topic, group)
    reread = sorted(m for _, m in drain(s2, c2, 7))
    assert reread == [(0, 3), (0, 4), (0, 5)] + [(1, i) for i in range(4)]   # nothing lost
    s2.close()


def test_partitions_are_shared_among_spout_tasks(kafka_broker: Any, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex[:6]}"
    s0, c0 = opened(kafka_broker, topic, group, 0, 2)
    s1, c1 = opened(kafka_broker, topic, group, 1, 2)
    assert {p for _, (p, _) in drain(s0, c0, 6)} == {0}
    assert {p for _, (p, _) in drain(s1, c1, 4)} == {1}
    s0.close(), s1.close()


def test_bad_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="fields among"):
        KafkaSpout("127.0.0.1:1", "t", "g", fields=("nope",))
    with pytest.raises(ConfigError, match="start must be 'earliest' or 'latest'"):
        KafkaSpout("127.0.0.1:1", "t", "g", start="middle")
