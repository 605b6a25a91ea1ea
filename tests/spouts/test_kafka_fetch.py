"""The Kafka emitter reads several partitions' ranges in one consumer assignment
(``KafkaEmitter.fetch_partitions``), against a real broker (Tansu, the ``kafka_broker``
fixture): for one emitter task's partitions, and for the partitions of several logical
tasks that one process runs in turn (``transactional.engine.spout_planner.fetch_group``).
Each partition emits exactly what a read of it alone emits, and a range that is short or
gone fails (transactional) or shortens (opaque) that partition only. Assignments are
counted through ``KafkaEmitter._assign``."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from collectors import RowCollector as Collector

from spouts.kafka import KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout
from spouts.kafka.emitter import KafkaEmitter
from transactional.engine.spout_planner import SpoutContext, emit_spout_task, fetch_group, spout_kind
from transactional.exceptions import FailedException, SpoutError
from transactional.tuples import TransactionAttempt

pytestmark = pytest.mark.integration

TX = TransactionAttempt(5, 1)
FIELDS = ("partition", "offset", "value")
#: partition -> its planned range in batch TX
META = {"0": {"start": 3, "end": 17}, "1": {"start": 0, "end": 3}, "2": {"start": 2, "end": 7},
        "3": {"start": 0, "end": 5}}


ASSIGNED: list[list[int]] = []


class CountingEmitter(KafkaEmitter):
    """Records the partitions of each assignment in ``ASSIGNED``."""

    def _assign(self, c: Any, partitions: list[Any]) -> None:
        ASSIGNED.append(sorted(tp.partition for tp in partitions))
        super()._assign(c, partitions)


class CountingSpout(KafkaTransactionalSpout):
    def get_emitter(self, conf, context):
        return CountingEmitter(self)


class CountingOpaqueSpout(OpaqueKafkaTransactionalSpout):
    def get_emitter(self, conf, context):
        return CountingEmitter(self)


@pytest.fixture
def topic4(kafka_broker, kafka_topic):
    """4 partitions holding 25, 3, 7 and 5 records ``p<partition>-<i>``."""
    kafka_broker.create_topic(kafka_topic, 4)
    kafka_broker.produce(kafka_topic, {p: [f"p{p}-{i}" for i in range(n)] for p, n in enumerate((25, 3, 7, 5))})
    ASSIGNED.clear()
    return kafka_topic


def alone(spout, partition: int, meta: dict) -> tuple[Any, list[tuple]]:
    """One partition's range read by itself with a fresh emitter (the reference)."""
    e = spout.get_emitter({}, None)
    try:
        col = Collector()
        return e.emit_partition_batch(TX, col, partition, meta), col.rows
    finally:
        e.close()


def run_task(spout, task: int, num_tasks: int, meta: dict, run_id: str, fetched=None) -> tuple[Any, list[tuple]]:
    col = Collector()
    ctx = SpoutContext("t", "spout", task, num_tasks)
    got = emit_spout_task(run_id, spout, spout_kind(spout), {}, ctx, TX, meta, col, 0, fetched)
    return got, col.rows


def test_a_task_reads_its_partitions_in_one_assignment_and_emits_each_as_alone(kafka_broker, topic4):
    spout = CountingSpout(kafka_broker.bootstrap, topic4, fields=FIELDS)
    want = [row for p, m in META.items() for row in alone(spout, int(p), m)[1]]
    assert ASSIGNED == [[0], [1], [2], [3]]
    ASSIGNED.clear()
    run_id = uuid.uuid4().hex
    got, rows = run_task(spout, 0, 1, META, run_id)
    assert ASSIGNED == [[0, 1, 2, 3]]
    assert got is None
    assert rows == want and len(rows) == 14 + 3 + 5 + 5
    assert rows[:2] == [(TX, 0, 3, "p0-3"), (TX, 0, 4, "p0-4")]
    # the same emitter again (its consumer reused): the partitions whose reads ended first
    # were paused while the others went on, and are fetched again
    assert run_task(spout, 0, 1, META, run_id) == (None, want)
    assert ASSIGNED == [[0, 1, 2, 3]] * 2


def test_the_tasks_a_process_runs_in_turn_are_read_once_and_each_emits_its_own(kafka_broker, topic4):
    spout = CountingSpout(kafka_broker.bootstrap, topic4, fields=FIELDS)
    run_id = uuid.uuid4().hex
    fetched = fetch_group(run_id, spout, spout_kind(spout), {}, SpoutContext("t", "spout", 0, 2), range(2), TX, META)
    assert fetched is not None and sorted(fetched) == [0, 1, 2, 3]
    _, rows0 = run_task(spout, 0, 2, META, run_id, fetched)
    _, rows1 = run_task(spout, 1, 2, META, run_id, fetched)
    assert ASSIGNED == [[0, 1, 2, 3]] and fetched == {}
    assert rows0 == alone(spout, 0, META["0"])[1] + alone(spout, 2, META["2"])[1]
    assert rows1 == alone(spout, 1, META["1"])[1] + alone(spout, 3, META["3"])[1]
    # one task in the group, or nothing to read together: each task reads its own
    assert fetch_group(run_id, spout, "partitioned", {}, SpoutContext("t", "spout", 0, 2), [0], TX, META) is None


def _short_1(tx, partition, start, end):
    """Partition 1 unfetchable after its first record (as if the broker timed out)."""
    return start + 1 if partition == 1 else None


def test_transactional_a_short_range_fails_its_partition_only(kafka_broker, topic4):
    spout = CountingSpout(kafka_broker.bootstrap, topic4, fields=FIELDS, fetch_fault=_short_1)
    e = spout.get_emitter({}, None)
    try:
        emits = e.fetch_partitions(TX, {int(p): m for p, m in META.items()})
        assert ASSIGNED == [[0, 1, 2, 3]]
        for p in (0, 2, 3):
            col = Collector()
            assert emits[p](col) is None
            assert col.rows == alone(KafkaTransactionalSpout(kafka_broker.bootstrap, topic4, fields=FIELDS),
                                     p, META[str(p)])[1]
        with pytest.raises(FailedException, match=r"partition 1: offsets 0..2 of txid 5 read only up to 1 "
                                                  r"\(fetch fault injected\); the batch is retried"):
            emits[1](Collector())
    finally:
        e.close()
    # the task carrying partition 1 fails: the batch is retried
    with pytest.raises(FailedException, match="partition 1"):
        run_task(spout, 0, 1, META, uuid.uuid4().hex)
    # in a group, the other task still emits its partitions
    run_id = uuid.uuid4().hex
    fetched = fetch_group(run_id, spout, "partitioned", {}, SpoutContext("t", "spout", 0, 2), range(2), TX, META)
    _, rows0 = run_task(spout, 0, 2, META, run_id, fetched)
    with pytest.raises(FailedException, match="partition 1"):
        run_task(spout, 1, 2, META, run_id, fetched)
    assert [r[1] for r in rows0] == [0] * 14 + [2] * 5


def test_transactional_a_range_that_is_gone_is_a_spout_error_for_its_partition_only(kafka_broker, topic4):
    spout = CountingSpout(kafka_broker.bootstrap, topic4, fields=FIELDS, fetch_timeout_secs=8)
    meta = {**META, "0": {"start": 20, "end": 40}}       # past the log's end (25)
    e = spout.get_emitter({}, None)
    t0 = time.monotonic()
    try:
        emits = e.fetch_partitions(TX, {int(p): m for p, m in meta.items()})
        assert time.monotonic() - t0 < 5, "must not wait for the whole fetch timeout"
        with pytest.raises(SpoutError) as err:
            emits[0](Collector())
        msg = str(err.value)
        assert all(s in msg for s in (repr(topic4), "partition 0", "20..39", "txid 5")), msg
        col = Collector()
        for p in (1, 2, 3):
            emits[p](col)
        assert [r[1:] for r in col.rows] == [(1, i, f"p1-{i}") for i in range(3)] + \
            [(2, i, f"p2-{i}") for i in range(2, 7)] + [(3, i, f"p3-{i}") for i in range(5)]
    finally:
        e.close()
    assert ASSIGNED == [[0, 1, 2, 3]]


def test_opaque_a_short_or_ended_range_emits_less_for_its_partition_only(kafka_broker, topic4):
    spout = CountingOpaqueSpout(kafka_broker.bootstrap, topic4, fields=FIELDS, fetch_fault=_short_1,
                                fetch_timeout_secs=1.5)
    meta = {**META, "0": {"start": 20, "end": 40}}
    actual, rows = run_task(spout, 0, 1, meta, uuid.uuid4().hex)
    assert ASSIGNED == [[0, 1, 2, 3]]
    assert actual == {"0": {"start": 20, "end": 25}, "1": {"start": 0, "end": 1}, "2": {"start": 2, "end": 7},
                      "3": {"start": 0, "end": 5}}
    assert [r[1:] for r in rows] == [(0, i, f"p0-{i}") for i in range(20, 25)] + [(1, 0, "p1-0")] + \
        [(2, i, f"p2-{i}") for i in range(2, 7)] + [(3, i, f"p3-{i}") for i in range(5)]


def test_reuse_consumer_false_closes_the_consumer_after_the_read(kafka_broker, topic4):
    spout = CountingSpout(kafka_broker.bootstrap, topic4, fields=FIELDS, reuse_consumer=False)
    e = spout.get_emitter({}, None)
    emits = e.fetch_partitions(TX, {1: META["1"], 3: META["3"]})
    assert e.consumer is None and ASSIGNED == [[1, 3]]
    col = Collector()
    emits[1](col)
    emits[3](col)
    assert [r[2] for r in col.rows] == [0, 1, 2, 0, 1, 2, 3, 4]
