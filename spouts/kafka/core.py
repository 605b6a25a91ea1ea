"""``KafkaSpout``: a core (at-least-once) spout over Kafka (docs/design.md §7).

Each spout task reads its share of the topic's partitions (partition ``p`` goes to task
``p % num_tasks``) from the consumer group's committed offsets, and emits one tuple per
record with the message id ``(partition, offset)``. The offset committed for a partition
is always its lowest emitted-and-unacked offset (or the next one to read when nothing is
unacked): it never passes a message whose tree has not completed, so a restarted spout
reads again every message that was not acked, and nothing is lost. A failed message is
emitted again from memory (each pending message is kept until acked). Commits go to
Kafka (``OffsetCommit``) at most every ``commit_interval_secs`` and at ``close``.
Partitions are assigned, not subscribed: the group has no members to rebalance.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from spouts.base import OutputDeclarer, SpoutContext
from spouts.core import BaseRichSpout, SpoutOutputCollector
from spouts.kafka.records import RECORD_FIELDS, Deserializer, deserializer_for, record_values
from transactional.exceptions import ConfigError, SpoutError
from transactional.tuples import Fields


class _Partition:
    __slots__ = ("next", "pending", "committed")

    def __init__(self, start: int) -> None:
        self.next = start                          # the next offset to read
        self.pending: dict[int, tuple[Any, ...]] = {}   # emitted, not acked: offset -> values
        self.committed = start                     # what Kafka holds for the group

    def safe(self) -> int:
        """The offset it is safe to commit: the lowest unacked, else the next to read."""
        return min(self.pending) if self.pending else self.next


class KafkaSpout(BaseRichSpout):
    """At-least-once reading of ``topic`` for the consumer group ``group_id``.

    ``fields``: record attributes to emit (among ``RECORD_FIELDS``), default the value;
    ``deserializer`` / ``key_deserializer``: ``'bytes'``, ``'utf-8'``, ``'json'`` or a
    callable; ``start``: where a partition with no committed offset begins
    (``'earliest'`` or ``'latest'``); ``count``: the most records read per
    ``next_tuple``."""

    #: ``trident verify`` refuses it, saying why (docs/verify.md)
    replayable: bool | str = ("it reads a Kafka topic from its consumer group's committed offsets, so a second run "
                              "starts where the first one ended instead of reading the same input")

    def __init__(self, bootstrap_servers: str | Sequence[str], topic: str, group_id: str, *,
                 fields: Sequence[str] = ("value",), deserializer: str | Deserializer = "utf-8",
                 key_deserializer: str | Deserializer = "bytes", start: str = "earliest",
                 count: int = 500, poll_timeout_secs: float = 0.05, commit_interval_secs: float = 1.0,
                 client_config: dict[str, Any] | None = None) -> None:
        if not isinstance(bootstrap_servers, str):
            bootstrap_servers = ",".join(bootstrap_servers)
        bad = [f for f in fields if f not in RECORD_FIELDS]
        if not bootstrap_servers or not topic or not group_id or not fields or bad:
            msg = (f"KafkaSpout needs bootstrap_servers, a topic, a group_id and fields among {RECORD_FIELDS}; "
                   f"got {bootstrap_servers!r}, {topic!r}, {group_id!r}, {tuple(fields)!r}")
            raise ConfigError(msg)
        if start not in ("earliest", "latest") or count < 1 or commit_interval_secs < 0:
            msg = (f"start must be 'earliest' or 'latest', count >= 1 and commit_interval_secs >= 0; "
                   f"got {start!r}, {count!r}, {commit_interval_secs!r}")
            raise ConfigError(msg)
        self.bootstrap_servers, self.topic, self.group_id = bootstrap_servers, topic, group_id
        self.fields = tuple(fields)
        self.value_of = deserializer_for(deserializer, "deserializer")
        self.key_of = deserializer_for(key_deserializer, "key_deserializer")
        self.start, self.count = start, count
        self.poll_timeout_secs, self.commit_interval_secs = poll_timeout_secs, commit_interval_secs
        self.client_config = dict(client_config or {})
        self._consumer: Any = None
        self._collector: SpoutOutputCollector | None = None
        self._parts: dict[int, _Partition] = {}
        self._replay: deque[tuple[int, int]] = deque()
        self._next_commit = 0.0

    def open(self, conf: dict[str, Any], context: SpoutContext, collector: SpoutOutputCollector) -> None:
        """Assign this task's partitions at the group's committed offsets."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        self._collector = collector
        cfg = {"bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id,
               "enable.auto.commit": False, "enable.auto.offset.store": False,
               "auto.offset.reset": self.start, **self.client_config}
        self._consumer = Consumer(cfg)
        try:
            md = self._consumer.list_topics(self.topic, timeout=10)
            partitions = sorted(md.topics[self.topic].partitions)
            mine = [p for p in partitions if p % context.num_tasks == context.task_index]
            committed = self._consumer.committed([TopicPartition(self.topic, p) for p in mine], timeout=10)
        except KafkaException as e:
            msg = f"KafkaSpout cannot read topic {self.topic!r} at {self.bootstrap_servers}: {e}"
            raise SpoutError(msg) from e
        assign = []
        for tp in committed:
            start = tp.offset if tp.offset >= 0 else self._boundary(tp.partition)
            self._parts[tp.partition] = _Partition(start)
            assign.append(TopicPartition(self.topic, tp.partition, start))
        self._consumer.assign(assign)

    def _boundary(self, partition: int) -> int:
        from confluent_kafka import TopicPartition

        low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=10)
        return int(low if self.start == "earliest" else high)

    def next_tuple(self) -> None:
        """Emit failed messages again, else up to ``count`` new records; commit the safe
        offsets when ``commit_interval_secs`` has passed."""
        assert self._collector is not None and self._consumer is not None, "open() first"
        emit = self._collector.emit
        if self._replay:
            for _ in range(min(self.count, len(self._replay))):
                p, off = self._replay.popleft()
                values = self._parts[p].pending.get(off)
                if values is not None:
                    emit(values, msg_id=(p, off))
        else:
            for m in self._consumer.consume(self.count, timeout=self.poll_timeout_secs):
                if m.error() is not None:
                    continue
                part = self._parts.get(m.partition())
                if part is None or m.offset() < part.next:
                    continue
                values = record_values(m, self.fields, self.key_of, self.value_of)
                part.pending[m.offset()] = values
                part.next = m.offset() + 1
                emit(values, msg_id=(m.partition(), m.offset()))
        if time.monotonic() >= self._next_commit:
            self.commit()

    def ack(self, msg_id: Any) -> None:
        """The record's tree completed: it no longer holds its partition's offset back."""
        p, off = msg_id
        self._parts[p].pending.pop(off, None)

    def fail(self, msg_id: Any) -> None:
        """The record's tree failed or timed out: emit it again."""
        p, off = msg_id
        if off in self._parts[p].pending:
            self._replay.append((p, off))

    def commit(self) -> dict[int, int]:
        """Commit each partition's safe offset (its lowest unacked one) where it moved;
        returns the committed offsets."""
        from confluent_kafka import TopicPartition

        moved = [(p, part.safe()) for p, part in self._parts.items() if part.safe() != part.committed]
        if moved:
            self._consumer.commit(offsets=[TopicPartition(self.topic, p, off) for p, off in moved],
                                  asynchronous=False)
            for p, off in moved:
                self._parts[p].committed = off
        self._next_commit = time.monotonic() + self.commit_interval_secs
        return {p: part.committed for p, part in self._parts.items()}

    def close(self) -> None:
        """Commit the safe offsets and disconnect."""
        if self._consumer is not None:
            self.commit()
            self._consumer.close()
            self._consumer = None

    def declare_output_fields(self, declarer: OutputDeclarer) -> None:
        """The record attributes in ``fields``."""
        declarer.declare(Fields(*self.fields))
