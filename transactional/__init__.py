"""spark-trident: Apache Storm's transactional topologies on PySpark.

Build a topology with ``TransactionalTopologyBuilder``, run it with ``run_topology``.
"""

from transactional.bolt import (BaseBasicBolt, BaseBatchBolt, BaseTransactionalBolt,
                                BasicOutputCollector, BatchOutputCollector, Committer)
from transactional.config import TopologyConfig
from transactional.exceptions import (ConfigError, FailedException, InvalidTupleError,
                                      TopologyError, TopologyFailedError, TridentError)
from transactional.result import RunResult
from transactional.topology import Topology, TransactionalTopologyBuilder
from transactional.tuples import Fields, TransactionAttempt, Tuple, Values

__all__ = [
    "TransactionalTopologyBuilder", "Topology", "TransactionAttempt", "Fields", "Values", "Tuple",
    "BaseBasicBolt", "BaseBatchBolt", "BaseTransactionalBolt", "Committer",
    "BatchOutputCollector", "BasicOutputCollector", "FailedException",
    "TopologyConfig", "run_topology", "RunResult",
    "TridentError", "ConfigError", "TopologyError", "InvalidTupleError", "TopologyFailedError",
]


def __getattr__(name: str):
    # imported on first use: the runner imports state/ and spouts/, which import this package
    if name == "run_topology":
        from transactional._runner import run_topology

        return run_topology
    raise AttributeError(f"module 'transactional' has no attribute {name!r}")
