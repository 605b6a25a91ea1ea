"""Trident for Python: Storm's fluent stream API, compiled onto the transactional engine
(docs/trident.md). Every name a Trident program uses imports from here, as in the docs:
the operations' base classes, the built-ins (``Count``, ``FilterNull``, ``SnapshotGet``
...), the State API (``State``, ``StateFactory``, the map factories), the windows
(``TumblingCountWindow``, ``InMemoryWindowsStoreFactory``, ``Duration`` ...).

>>> from trident import TridentTopology, FixedBatchSpout, Count, state
>>> from transactional import Fields, TopologyConfig, run_topology
>>> spout = FixedBatchSpout(Fields("sentence"), 2, ("the cow",), ("the moon",), ("a cow",))
>>> t = TridentTopology("doc-wordcount")
>>> counts = (t.new_stream("sentences", spout)
...           .flat_map(lambda s: [(w,) for w in s["sentence"].split()], Fields("word"))
...           .group_by(Fields("word"))
...           .persistent_aggregate(state.transactional("counts"), Count(), Fields("count")))
>>> r = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False))
>>> r.map_state("counts").multi_get(["the", "cow", "moon", "a"])
[2, 2, 1, 1]
"""

from trident import state
from trident.builtin import (
    Count,
    Debug,
    Equals,
    FilterNull,
    FirstN,
    MapGet,
    Max,
    MaxBy,
    Min,
    MinBy,
    Negate,
    SnapshotGet,
    Sum,
    TupleCollectionGet,
)
from trident.operation import (
    Aggregator,
    BaseAggregator,
    BaseFilter,
    BaseFunction,
    BaseQueryFunction,
    BaseStateUpdater,
    BatchFunction,
    CombinerAggregator,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
    TridentCollector,
    TridentTuple,
)
from trident.spout import FixedBatchSpout
from trident.state import (
    BackingMapStateFactory,
    IBackingMap,
    MapStateFactory,
    NonTransactionalMapFactory,
    OpaqueMapFactory,
    State,
    StateFactory,
    StateType,
    TransactionalMapFactory,
    TridentState,
    register_map_backing,
)
from trident.stream import ChainedAggregatorDeclarer, GroupedStream, Stream
from trident.topology import TridentTopology
from trident.windowing import (
    Duration,
    InMemoryWindowsStoreFactory,
    RedisWindowsStoreFactory,
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    WindowConfig,
    WindowsStoreFactory,
)

__all__ = [
    "TridentTopology", "Stream", "GroupedStream", "ChainedAggregatorDeclarer", "TridentState",
    "Function", "BaseFunction", "Filter", "BaseFilter", "MapFunction", "FlatMapFunction", "BatchFunction",
    "CombinerAggregator", "ReducerAggregator", "Aggregator", "BaseAggregator",
    "QueryFunction", "BaseQueryFunction", "StateUpdater", "BaseStateUpdater",
    "TridentTuple", "TridentCollector",
    "Count", "Sum", "Max", "Min", "FirstN", "MapGet", "Debug",
    "FilterNull", "Equals", "Negate", "SnapshotGet", "MinBy", "MaxBy", "TupleCollectionGet",
    "FixedBatchSpout", "MapStateFactory", "StateType", "state",
    "State", "StateFactory", "IBackingMap", "BackingMapStateFactory", "TransactionalMapFactory", "OpaqueMapFactory",
    "NonTransactionalMapFactory", "register_map_backing",
    "WindowConfig", "TumblingCountWindow", "SlidingCountWindow", "TumblingDurationWindow", "SlidingDurationWindow",
    "WindowsStoreFactory", "InMemoryWindowsStoreFactory", "RedisWindowsStoreFactory", "Duration",
]
