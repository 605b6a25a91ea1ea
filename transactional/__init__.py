"""spark-trident: Apache Storm's transactional topologies on PySpark.

Build a topology with ``TransactionalTopologyBuilder``, run it with ``run_topology``.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transactional.bolt import (
        BaseBasicBolt,
        BaseBatchBolt,
        BaseTransactionalBolt,
        BasicOutputCollector,
        BatchOutputCollector,
        Committer,
    )
    from transactional.config import TopologyConfig
    from transactional.core import BaseRichBolt, BaseStatefulBolt, OutputCollector, TopologyBuilder
    from transactional.exceptions import (
        ConfigError,
        FailedException,
        InvalidTupleError,
        TopologyError,
        TopologyFailedError,
        TridentError,
    )
    from transactional.join import JoinBolt
    from transactional.local_cluster import LocalCluster
    from transactional.ops.run import run_topology
    from transactional.result import RunResult
    from transactional.ticks import is_tick
    from transactional.topology import Topology, TransactionalTopologyBuilder
    from transactional.tuples import Fields, TransactionAttempt, Tuple, Values
    from transactional.windowing import BaseStatefulWindowedBolt, BaseWindowedBolt, Count, Duration

__all__ = [
    "TransactionalTopologyBuilder", "Topology", "TransactionAttempt", "Fields", "Values", "Tuple",
    "BaseBasicBolt", "BaseBatchBolt", "BaseTransactionalBolt", "Committer",
    "BatchOutputCollector", "BasicOutputCollector", "FailedException",
    "TopologyConfig", "run_topology", "RunResult",
    "TopologyBuilder", "BaseRichBolt", "BaseStatefulBolt", "OutputCollector",
    "TridentError", "ConfigError", "TopologyError", "InvalidTupleError", "TopologyFailedError",
    "is_tick", "BaseWindowedBolt", "BaseStatefulWindowedBolt", "Count", "Duration", "JoinBolt",
    "LocalCluster",
]


# Every name is imported on first use (PEP 562), so that ``import transactional.exceptions``
# (which state/ and spouts/ do) loads neither pyspark nor the engine.
_WHERE = {
    "run_topology": "transactional.ops.run",
    "BaseBasicBolt": "transactional.bolt", "BaseBatchBolt": "transactional.bolt",
    "BaseTransactionalBolt": "transactional.bolt", "BasicOutputCollector": "transactional.bolt",
    "BatchOutputCollector": "transactional.bolt", "Committer": "transactional.bolt",
    "TopologyConfig": "transactional.config", "RunResult": "transactional.result",
    "LocalCluster": "transactional.local_cluster",
    **{n: "transactional.core" for n in ("TopologyBuilder", "BaseRichBolt", "BaseStatefulBolt", "OutputCollector")},
    "is_tick": "transactional.ticks", "JoinBolt": "transactional.join",
    **{n: "transactional.windowing" for n in ("BaseWindowedBolt", "BaseStatefulWindowedBolt", "Count", "Duration")},
    "Topology": "transactional.topology", "TransactionalTopologyBuilder": "transactional.topology",
    "Fields": "transactional.tuples", "TransactionAttempt": "transactional.tuples",
    "Tuple": "transactional.tuples", "Values": "transactional.tuples",
    **{n: "transactional.exceptions" for n in ("ConfigError", "FailedException", "InvalidTupleError",
                                               "TopologyError", "TopologyFailedError", "TridentError")},
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        msg = f"module 'transactional' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
