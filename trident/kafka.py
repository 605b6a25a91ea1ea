"""Exactly once into a Kafka topic: ``TridentKafkaStateFactory`` (storm-kafka-client's
``TridentKafkaStateFactory``, named for this project; docs/states.md).

>>> f = TridentKafkaStateFactory("127.0.0.1:9092", "counts", key_field="word", value_field="count")
>>> f.name, f.owned_partitions(task=1, num_tasks=2, num_partitions=4)
('kafka:counts', [1, 3])

**Mechanism** (exact with transactional spouts, on any Kafka-protocol broker, including
one whose transactions do not hide aborted records). Task ``i`` of ``n`` is the only
writer of the topic partitions ``p`` with ``p % n == i`` (a record goes to one of them by
its key's hash), with an idempotent producer (no gap, no duplicate, in order). Every
record carries headers ``trident.state``, ``trident.txid``, ``trident.seq`` (its place
among the txid's records in that partition) and ``trident.epoch``. Before writing txid
``t`` to a partition the task reads the partition's last record:

* its txid newer than ``t``: ``StateAheadError`` (someone else writes the topic);
* its epoch newer than the driver's: ``LeadershipLostError`` (a stale driver writes nothing);
* its txid ``t`` and seq ``s``: an earlier attempt of ``t`` wrote the first ``s + 1`` of
  the batch's records there before the driver died; the replay -- the same batch, a
  transactional spout's -- writes only the rest.

A replay of an *opaque* spout may be another batch, and records once in a topic cannot be
taken back: this state refuses opaque spouts when the topology is built. On a broker
that hides aborted records, ``transactions=True`` makes each task's commit one Kafka
transaction instead (``trident.kafka_txn``), so ``read_committed`` consumers never see a
partial txid; which mode a state runs in is logged when it starts.
"""

from __future__ import annotations

import copy
import json
import logging
import zlib
from collections.abc import Callable
from typing import Any

from state.errors import ConfigError, LeadershipLostError, StateAheadError, StateUnavailableError, UnstorableValueError
from transactional.bolt import BaseTransactionalBolt, Committer
from transactional.core import BaseRichBolt
from transactional.extras import missing_extra
from trident.kafka_txn import KafkaTransactions
from trident.operation import BaseStateUpdater, TridentCollector, TridentTuple
from trident.state import EPOCH, TOPOLOGY_ID, State, StateFactory

try:
    import confluent_kafka  # noqa: F401 - checked at import: a missing extra is one line naming it
except ModuleNotFoundError as e:
    raise missing_extra(e, "trident.kafka") from None

__all__ = ["TridentKafkaStateFactory", "TridentKafkaState", "TridentKafkaUpdater", "default_serializer", "read_partition",
           "HEADER_TXID", "HEADER_SEQ", "HEADER_EPOCH", "HEADER_STATE", "KafkaBolt", "KafkaCommitter"]

HEADER_STATE, HEADER_TXID, HEADER_SEQ, HEADER_EPOCH = "trident.state", "trident.txid", "trident.seq", "trident.epoch"


def default_serializer(v: Any) -> bytes | None:
    """bytes as they are, str as UTF-8, None as None, anything else as JSON."""
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return json.dumps(v, separators=(",", ":")).encode()


class TridentKafkaStateFactory(StateFactory):
    """A Kafka topic as a Trident state (see the module docstring). ``key_field`` /
    ``value_field``: the tuple fields that become each record's key and value (no
    ``key_field``: records without a key); ``serializer``: value -> bytes (default
    ``default_serializer``; also used for keys); ``producer_config``: more librdkafka
    settings; ``transactions``: each task's txid as one Kafka transaction, for
    ``read_committed`` consumers (``trident.kafka_txn``; needs a broker that hides aborted
    records)."""

    opaque_safe = False

    def __init__(self, bootstrap: str, topic: str, *, key_field: str | None = None, value_field: str = "value",
                 serializer: Callable[[Any], bytes | None] = default_serializer,
                 producer_config: dict[str, Any] | None = None, state_id: str | None = None,
                 connect_timeout: float = 10.0, transactions: bool = False) -> None:
        self.bootstrap = bootstrap
        self.transactions = transactions
        self.topic = topic
        self.key_field = key_field
        self.value_field = value_field
        self.serializer = serializer
        self.producer_config = dict(producer_config or {})
        self.state_id = state_id
        self.connect_timeout = connect_timeout

    @property
    def name(self) -> str:
        """``kafka:<topic>``."""
        return f"kafka:{self.topic}"

    @staticmethod
    def owned_partitions(task: int, num_tasks: int, num_partitions: int) -> list[int]:
        """The partitions task ``task`` of ``num_tasks`` writes."""
        return [p for p in range(num_partitions) if p % num_tasks == task]

    def num_partitions(self) -> int:
        """The topic's partition count; ``ConfigError`` when it does not exist,
        ``StateUnavailableError`` when the broker cannot be reached."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": int(self.connect_timeout * 1000)})
        try:
            md = admin.list_topics(timeout=self.connect_timeout)
        except KafkaException as e:
            msg = (f"Kafka at {self.bootstrap!r} cannot be reached for topic {self.topic!r}: {e}. Start the broker or "
                   "fix the bootstrap servers")
            raise StateUnavailableError(msg) from None
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            msg = (f"Kafka topic {self.topic!r} does not exist at {self.bootstrap!r}; create it first (as many "
                   "partitions as the state's tasks, or more), e.g. kafka-topics --create --topic "
                   f"{self.topic} --partitions N")
            raise ConfigError(msg)
        return len(t.partitions)

    # -- trident verify's scratch copies (trident.state.StateFactory.scratch) --

    #: on a scratch copy: the real topic
    scratch_of: str | None = None

    def scratch(self, namespace: str) -> TridentKafkaStateFactory:
        """A copy writing into the topic ``<topic>.<namespace>`` on the same broker, created with
        the real topic's partition count; the real topic is only asked for its metadata."""
        c = copy.copy(self)
        c.scratch_of = self.topic
        c.topic = f"{self.topic}.{namespace}"[:249]
        c.state_id = None if self.state_id is None else f"{self.state_id}.{namespace}"
        return c

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": int(self.connect_timeout * 1000),
                            "logger": _Quiet()})  # type: ignore[dict-item]

    def _create_scratch(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.cimpl import NewTopic

        real = copy.copy(self)
        real.topic, real.scratch_of = self.scratch_of or self.topic, None
        n = real.num_partitions()
        admin = self._admin()          # kept alive until the futures are done
        try:
            for _, f in admin.create_topics([NewTopic(self.topic, n, 1)], operation_timeout=self.connect_timeout).items():
                f.result(self.connect_timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:     # another task made it first
                raise

    def read_scratch(self) -> dict[Any, Any] | None:
        """Every record of the scratch topic as ``{(partition, key, value): count}``."""
        if self.scratch_of is None:
            return None
        try:
            n = self.num_partitions()
        except ConfigError:             # never created: no task wrote
            return {}
        out: dict[Any, Any] = {}
        for p in range(n):
            for k, v in read_partition(self.bootstrap, self.topic, p, self.connect_timeout * 3):
                out[(p, k, v)] = out.get((p, k, v), 0) + 1
        return out

    def drop_scratch(self) -> None:
        """Delete the scratch topic (where the broker allows it)."""
        if self.scratch_of is not None:
            admin = self._admin()
            try:
                for _, f in admin.delete_topics([self.topic], operation_timeout=self.connect_timeout).items():
                    f.result(self.connect_timeout)
            except Exception:  # noqa: BLE001, S110 - a broker that does not delete topics keeps it
                pass

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> TridentKafkaState:
        """Check the topic (it exists, it has a partition for every task), open the producer."""
        if self.scratch_of is not None:
            self._create_scratch()
        n = self.num_partitions()
        if n < num_partitions:
            msg = (f"Kafka topic {self.topic!r} has {n} partition(s) but the state has {num_partitions} tasks; each "
                   f"task writes partitions of its own: give the state at most {n} tasks (parallelism_hint)")
            raise ConfigError(msg)
        sid = self.state_id or f"{conf.get(TOPOLOGY_ID, 'trident')}:{self.topic}"
        st = TridentKafkaState(self, sid, partition_index, num_partitions, n, conf.get(EPOCH))
        if partition_index == 0:
            logging.getLogger("trident").info(
                "Kafka state %s: %s", self.name,
                "one Kafka transaction per task and txid (read_committed consumers see whole txids where the broker "
                "hides aborted records)" if self.transactions else
                "exact by record headers, without Kafka transactions: a consumer may see a txid's records before "
                "its commit is recorded (transactions=True for read_committed consumers)")
        return st


class TridentKafkaState(State):
    """One task's share of the topic (module docstring)."""

    def __init__(self, factory: TridentKafkaStateFactory, state_id: str, task: int, num_tasks: int,
                 num_partitions: int, epoch: int | None) -> None:
        from confluent_kafka import Producer

        self.f = factory
        self.state_id = state_id
        self.task = task
        self.parts = factory.owned_partitions(task, num_tasks, num_partitions)
        self.epoch = epoch
        self.records: list[tuple[bytes | None, bytes | None]] = []
        config = {"bootstrap.servers": factory.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "logger": _Quiet(), **factory.producer_config}
        self.txn: KafkaTransactions | None = None
        if factory.transactions:
            self.txn = KafkaTransactions(factory.bootstrap, factory.topic, state_id, task, self.parts[0], epoch,
                                         config, factory.connect_timeout)
            self.producer = self.txn.producer
        else:
            self.producer = Producer(config)

    def begin_commit(self, txid: int) -> None:
        """Start batch ``txid``."""
        self.records = []

    def add(self, key: Any, value: Any) -> None:
        """One record of the batch (serialized now: a value the serializer refuses stops
        here, before anything of the batch is written)."""
        try:
            k = None if key is None else self.f.serializer(key)
            v = self.f.serializer(value)
        except Exception as e:  # noqa: BLE001 - whatever the serializer raises
            msg = (f"Kafka topic {self.f.topic!r}: the serializer cannot encode {value!r} (key {key!r}): "
                   f"{type(e).__name__}: {e}; give the state a serializer for it, or values it can encode")
            raise UnstorableValueError(msg) from None
        if v is not None and not isinstance(v, bytes) or k is not None and not isinstance(k, bytes):
            msg = f"Kafka topic {self.f.topic!r}: the serializer returned {type(v).__name__}, not bytes"
            raise UnstorableValueError(msg)
        self.records.append((k, v))

    def _partition(self, key: bytes | None, i: int) -> int:
        parts = self.parts
        return parts[(zlib.crc32(key) if key is not None else i) % len(parts)]

    def commit(self, txid: int) -> None:
        """Write the batch's records not yet in the topic (module docstring), and wait
        until the broker has them all."""
        by_part: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        for i, (k, v) in enumerate(self.records):
            by_part.setdefault(self._partition(k, i), []).append((k, v))
        self.records = []
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        if self.txn is not None:
            self.txn.commit(txid, lambda _p: self._produce(by_part, dict.fromkeys(by_part, 0), txid, delivered))
        else:
            self._produce(by_part, self._written_before(sorted(by_part), txid), txid, delivered)
        left = self.producer.flush(60)
        if left or errors:
            msg = f"Kafka topic {self.f.topic!r}: txid {txid}: {left} record(s) not delivered; {errors[:3]}"
            raise StateUnavailableError(msg)

    def _produce(self, by_part: dict[int, list[tuple[bytes | None, bytes | None]]], skips: dict[int, int], txid: int,
                 delivered: Callable[[Any, Any], None]) -> None:
        """Produce each partition's records after its first ``skips[p]``."""
        for p, recs in sorted(by_part.items()):
            skip = skips[p]
            for seq, (k, v) in enumerate(recs):
                if seq < skip:
                    continue
                headers: list[tuple[str, str | bytes | None]] = [(HEADER_STATE, self.state_id.encode()), (HEADER_TXID, str(txid).encode()),
                           (HEADER_SEQ, str(seq).encode()), (HEADER_EPOCH, str(self.epoch or 0).encode())]
                while True:
                    try:
                        self.producer.produce(self.f.topic, value=v, key=k, partition=p, headers=headers,
                                              on_delivery=delivered)
                        break
                    except BufferError:
                        self.producer.poll(0.05)

    def _written_before(self, parts: list[int], txid: int) -> dict[int, int]:
        """Per partition: how many of ``txid``'s records an earlier attempt wrote there,
        checking the fence and the order on each partition's last record (one read of
        all the partitions' tails)."""
        out = {}
        lasts = _last_records(self._consumer(), self.f.topic, parts, self.f.connect_timeout)
        for p in parts:
            last = lasts.get(p)
            out[p] = 0 if last is None else self._check_last(p, last, txid)
        return out

    def _consumer(self) -> Any:
        c = getattr(self, "_tail_consumer", None)
        if c is None:
            from confluent_kafka import Consumer

            c = self._tail_consumer = Consumer({
                "bootstrap.servers": self.f.bootstrap, "group.id": "trident-state", "enable.partition.eof": True,
                "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10,
                "logger": _Quiet()})
        return c

    def _check_last(self, p: int, last: Any, txid: int) -> int:
        h = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (last.headers() or [])}
        if h.get(HEADER_STATE) != self.state_id or HEADER_TXID not in h:
            msg = (f"Kafka topic {self.f.topic!r} partition {p} ends with a record this state did not write "
                   f"(state {h.get(HEADER_STATE)!r}): a state's partitions must have no other writer")
            raise StateAheadError(msg)
        stored_epoch = int(h.get(HEADER_EPOCH) or 0)
        if self.epoch is not None and stored_epoch > self.epoch:
            msg = (f"Kafka topic {self.f.topic!r} partition {p}: a newer driver (epoch {stored_epoch}) writes it; "
                   f"this driver (epoch {self.epoch}) lost its lock and writes nothing")
            raise LeadershipLostError(msg)
        stored = int(h[HEADER_TXID])
        if stored > txid:
            msg = (f"Kafka topic {self.f.topic!r} partition {p} holds txid {stored}, newer than the batch's {txid}: "
                   "another topology writes it, or the topology id was reused")
            raise StateAheadError(msg)
        return int(h[HEADER_SEQ]) + 1 if stored == txid else 0

    def close(self) -> None:
        """Flush the producer, close the tail reader."""
        self.producer.flush(10)
        if self.txn is not None:
            self.txn.close()
        c = getattr(self, "_tail_consumer", None)
        if c is not None:
            c.close()


def _last_records(c: Any, topic: str, parts: list[int], timeout: float) -> dict[int, Any]:
    """The last record of each partition (absent when empty), read from one before the end
    the broker reports (a Fetch's high watermark is the truth where ListOffsets runs
    short), all partitions at once with consumer ``c``."""
    import time

    from confluent_kafka import KafkaError, TopicPartition

    start = []
    for p in parts:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
        if hi > lo:
            start.append(TopicPartition(topic, p, max(lo, hi - 1)))
    if not start:
        return {}
    c.assign(start)
    last: dict[int, Any] = {}
    open_parts = {tp.partition for tp in start}
    deadline = time.monotonic() + timeout
    try:
        while open_parts and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.2):
                err = m.error()
                if err is None:
                    last[m.partition()] = m
                elif err.code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(m.partition())
    finally:
        c.unassign()
    if open_parts:
        msg = f"Kafka topic {topic!r} partitions {sorted(open_parts)}: no end of partition within {timeout}s"
        raise StateUnavailableError(msg)
    return last


def read_partition(bootstrap: str, topic: str, partition: int, timeout: float = 30.0) -> list[tuple[Any, Any]]:
    """``(key, value)`` of every record of a partition, from the earliest offset to the end
    (as a consumer sees the state's output)."""
    import time

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "trident-read", "enable.partition.eof": True,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "logger": _Quiet()})
    out: list[tuple[Any, Any]] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                err = m.error()
                if err is None:
                    out.append((m.key(), m.value()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    return out
        msg = f"Kafka topic {topic!r} partition {partition}: no end of partition within {timeout}s"
        raise StateUnavailableError(msg)
    finally:
        c.close()


class _Quiet:
    def log(self, level: int, msg: str, *args: Any) -> None:
        pass


class TridentKafkaUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``TridentKafkaStateFactory``: a record per
    tuple, its key and value from the factory's ``key_field`` and ``value_field``."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add a record per tuple."""
        kf, vf = state.f.key_field, state.f.value_field
        for t in tuples:
            state.add(None if kf is None else t[kf], t[vf])



# -- bolts ---------------------------------------------------------------------------------------

class KafkaCommitter(BaseTransactionalBolt, Committer):
    """A committer of a transactional topology that writes each tuple as a record
    (``key_field``, ``value_field`` of the factory) through ``context.state(factory)``:
    the same exactly-once mechanism as the Trident state. Subscribe it like any bolt::

        b.set_committer_bolt("to-kafka", KafkaCommitter(factory), 2).fields_grouping("count", Fields("word"))
    """

    def __init__(self, factory: TridentKafkaStateFactory) -> None:
        self.factory = factory

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        """Open (or reuse) the task's state; the framework begins its commit now."""
        self.state = context.state(self.factory)

    def execute(self, tuple: Any) -> None:
        """One record."""
        f = self.factory
        self.state.add(None if f.key_field is None else tuple[f.key_field], tuple[f.value_field])

    def finish_batch(self) -> None:
        """Nothing: the framework commits the state after this (in txid order)."""

    def declare_output_fields(self, declarer: Any) -> None:
        """No output."""


class KafkaBolt(BaseRichBolt):
    """Storm's ``KafkaBolt`` for core topologies: each tuple becomes a record on ``topic``
    (``key_field``/``value_field``, ``serializer``), sent by an idempotent producer; the
    tuple is acked once the broker has the record (at the end of the task's micro-batch)
    and failed if it could not be delivered, so its spout replays it. At least once: a
    replayed tuple is written again."""

    def __init__(self, bootstrap: str, topic: str, *, key_field: str | None = None, value_field: str = "value",
                 serializer: Callable[[Any], bytes | None] = default_serializer,
                 producer_config: dict[str, Any] | None = None) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.key_field, self.value_field, self.serializer = key_field, value_field, serializer
        self.producer_config = dict(producer_config or {})

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector; open (once per process) the producer."""
        self.collector = collector
        self.producer = _producer(self.bootstrap, tuple(sorted(self.producer_config.items())))
        self.sent: list[tuple[Any, list[str]]] = []

    def execute(self, tuple: Any) -> None:
        """Send one record; a value the serializer refuses fails the tuple (reported)."""
        try:
            k = None if self.key_field is None else self.serializer(tuple[self.key_field])
            v = self.serializer(tuple[self.value_field])
        except Exception as e:  # noqa: BLE001 - the serializer's error, reported
            self.collector.report_error(e)
            self.collector.fail(tuple)
            return
        errors: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        while True:
            try:
                self.producer.produce(self.topic, value=v, key=k, on_delivery=delivered)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent.append((tuple, errors))

    def cleanup(self) -> None:
        """The micro-batch ends: wait for the broker, ack what it has, fail the rest."""
        self.producer.flush(30)
        for t, errors in self.sent:
            (self.collector.fail if errors else self.collector.ack)(t)
        self.sent = []

    def declare_output_fields(self, declarer: Any) -> None:
        """No output."""


_producers: dict[Any, Any] = {}


def _producer(bootstrap: str, config: tuple[Any, ...]) -> Any:
    from confluent_kafka import Producer

    key = (bootstrap, config)
    p = _producers.get(key)
    if p is None:
        p = _producers[key] = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                        "linger.ms": 5, "logger": _Quiet(), **dict(config)})
    return p
