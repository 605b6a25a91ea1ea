"""Spouts: the three transactional spout interfaces and the spouts that implement them, and
the core (at-least-once) spout interface with ``RedisStreamSpout``."""

from typing import Any

from spouts.base import (
    Coordinator,
    Emitter,
    OpaquePartitionedTransactionalSpout,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from spouts.core import MEMORY_SPOUT_LOGS, BaseRichSpout, MemorySpout, SpoutOutputCollector
from spouts.memory import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout
from spouts.redis_stream import RedisStreamSpout

__all__ = [
    "TransactionalSpout", "PartitionedTransactionalSpout", "OpaquePartitionedTransactionalSpout",
    "Coordinator", "Emitter", "PartitionedCoordinator", "PartitionedEmitter",
    "MemoryTransactionalSpout", "OpaqueMemoryTransactionalSpout",
    "KafkaTransactionalSpout", "OpaqueKafkaTransactionalSpout",
    "BaseRichSpout", "SpoutOutputCollector", "MemorySpout", "MEMORY_SPOUT_LOGS", "RedisStreamSpout", "KafkaSpout",
]


def __getattr__(name: str) -> Any:  # Kafka spouts need the optional Kafka client: import on use
    if name in ("KafkaTransactionalSpout", "OpaqueKafkaTransactionalSpout"):
        from spouts import kafka

        return getattr(kafka, name)
    if name == "KafkaSpout":
        from spouts.kafka.core import KafkaSpout

        return KafkaSpout
    raise AttributeError(name)
