"""Spouts: the three transactional spout interfaces and the spouts that implement them."""

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
from spouts.memory import MemoryTransactionalSpout, OpaqueMemoryTransactionalSpout

__all__ = [
    "TransactionalSpout", "PartitionedTransactionalSpout", "OpaquePartitionedTransactionalSpout",
    "Coordinator", "Emitter", "PartitionedCoordinator", "PartitionedEmitter",
    "MemoryTransactionalSpout", "OpaqueMemoryTransactionalSpout",
    "KafkaTransactionalSpout", "OpaqueKafkaTransactionalSpout",
]


def __getattr__(name: str) -> Any:  # Kafka spouts need the optional Kafka client: import on use
    if name in ("KafkaTransactionalSpout", "OpaqueKafkaTransactionalSpout"):
        from spouts import kafka

        return getattr(kafka, name)
    raise AttributeError(name)
