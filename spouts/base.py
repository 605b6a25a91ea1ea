"""The spout interfaces, re-exported: they live in ``transactional.spout`` (the client API, as
Storm keeps them), so the engine learns a spout's kind without importing ``spouts``."""

from transactional.spout import (
    Coordinator,
    EmitCollector,
    Emitter,
    Meta,
    OpaquePartitionedTransactionalSpout,
    OutputDeclarer,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedTransactionalSpout,
    SpoutContext,
    TransactionalSpout,
)

__all__ = [
    "Coordinator", "EmitCollector", "Emitter", "Meta", "OpaquePartitionedTransactionalSpout", "OutputDeclarer",
    "PartitionedCoordinator", "PartitionedEmitter", "PartitionedTransactionalSpout", "SpoutContext",
    "TransactionalSpout",
]
