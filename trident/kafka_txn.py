"""Each txid of a ``TridentKafkaStateFactory(..., transactions=True)`` task as one Kafka
transaction (docs/states.md, "Kafka").

Task ``i`` of state ``s`` has the producer ``transactional.id`` ``trident:<s>:task<i>``:
opening it (``init_transactions``) aborts what an earlier producer of that id left open
and **fences** that producer (a stale driver's next write fails: ``LeadershipLostError``).
A commit of txid ``t``:

1. reads the txid marker: the offset the consumer group ``trident-txid:<s>:task<i>`` has
   committed on the task's first partition, with ``epoch=<e>`` as its metadata. Equal to
   ``t``: this txid's transaction committed before the driver died; its replay writes
   nothing. Newer: ``StateAheadError``; a newer epoch: ``LeadershipLostError``;
2. ``begin_transaction``; every record of the batch; the marker moved to ``t`` in the
   same transaction (``send_offsets_to_transaction``); ``commit_transaction``.

Consumers with ``isolation.level=read_committed`` then see each txid of a task whole or
not at all -- **on a broker that hides aborted records**. ``probe(bootstrap)`` tells
whether the broker has transactions at all; whether it isolates aborted records cannot
be asked of a broker without writing to a topic: the Tansu broker the tests use has
transactions, fencing and transactional offsets, but shows aborted records to
``read_committed`` consumers (then the header mechanism, the default, is the exact one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from state.errors import ConfigError, LeadershipLostError, StateAheadError, StateUnavailableError
from transactional.engine.faults import crash_point

__all__ = ["KafkaTransactions", "transactional_id", "marker_group"]


def transactional_id(state_id: str, task: int) -> str:
    """The producer ``transactional.id`` of a state's task."""
    return f"trident:{state_id}:task{task}"


def marker_group(state_id: str, task: int) -> str:
    """The consumer group whose committed offset is the task's last committed txid."""
    return f"trident-txid:{state_id}:task{task}"


class KafkaTransactions:
    """One task's transactional producer and txid marker (module docstring)."""

    def __init__(self, bootstrap: str, topic: str, state_id: str, task: int, marker_partition: int,
                 epoch: int | None, config: dict[str, Any], timeout: float) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer

        self.topic, self.task, self.epoch, self.timeout = topic, task, epoch, timeout
        self.marker_partition = marker_partition
        self.id = transactional_id(state_id, task)
        self.producer = Producer({**config, "transactional.id": self.id})
        try:
            self.producer.init_transactions(timeout)
        except KafkaException as e:
            msg = (f"Kafka at {bootstrap!r} refused a transactional producer for topic {topic!r} ({e}): the broker "
                   "does not support Kafka transactions; leave transactions=False (exact by record headers)")
            raise ConfigError(msg) from None
        quiet = {"logger": config["logger"]} if "logger" in config else {}
        self.marker = Consumer({"bootstrap.servers": bootstrap, "group.id": marker_group(state_id, task),
                                "enable.auto.commit": False, "isolation.level": "read_committed", **quiet})

    def last_txid(self) -> tuple[int, int]:
        """``(txid, epoch)`` of the task's last committed transaction (``(0, 0)``: none)."""
        from confluent_kafka import TopicPartition

        (tp,) = self.marker.committed([TopicPartition(self.topic, self.marker_partition)], timeout=self.timeout)
        if tp.offset < 0:
            return 0, 0
        meta = dict(kv.split("=", 1) for kv in (tp.metadata or "").split(",") if "=" in kv)
        return int(tp.offset), int(meta.get("epoch", 0))

    def commit(self, txid: int, produce_all: Callable[[Any], None]) -> None:
        """Steps 1-2 of the module docstring; ``produce_all(producer)`` produces the batch."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        fenced = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}

        # Step 1.
        stored, stored_epoch = self.last_txid()
        if self.epoch is not None and stored_epoch > self.epoch:
            msg = (f"Kafka topic {self.topic!r}: a newer driver (epoch {stored_epoch}) writes it; this driver "
                   f"(epoch {self.epoch}) lost its lock and writes nothing")
            raise LeadershipLostError(msg)
        if stored > txid:
            msg = (f"Kafka topic {self.topic!r} task {self.task} committed txid {stored}, newer than the batch's "
                   f"{txid}: another topology writes it, or the topology id was reused")
            raise StateAheadError(msg)
        if stored == txid:
            return
        # Step 2.
        p = self.producer
        try:
            p.begin_transaction()
            produce_all(p)
            crash_point("kafka.before_commit_transaction", txid=txid, task=self.task)
            marker = TopicPartition(self.topic, self.marker_partition, txid, f"epoch={self.epoch or 0}")
            p.send_offsets_to_transaction([marker], self.marker.consumer_group_metadata(), self.timeout)
            p.commit_transaction(self.timeout)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is not None and (err.fatal() or err.code() in fenced):
                msg = (f"Kafka topic {self.topic!r}: producer {self.id!r} was fenced by a newer one ({err}); this "
                       "driver lost its lock and writes nothing")
                raise LeadershipLostError(msg) from None
            try:
                p.abort_transaction(self.timeout)
            except KafkaException:
                pass
            msg = f"Kafka topic {self.topic!r}: txid {txid}'s transaction failed: {e}"
            raise StateUnavailableError(msg) from None

    def close(self) -> None:
        """Close the marker reader."""
        self.marker.close()
