"""State: the coordinator's ``TransactionalState`` and exactly-once user maps."""

from typing import Any

from state.base import MemoryTransactionalState, TransactionalState, open_transactional_state
from state.keyvalue import KeyValueState, open_key_value_state
from state.map import (
    CounterMap,
    MapBacking,
    MapState,
    MemoryMapBacking,
    NonTransactionalMap,
    OpaqueMap,
    TransactionalMap,
    map_class,
    open_map_backing,
)

__all__ = [
    "TransactionalState", "MemoryTransactionalState", "open_transactional_state",
    "MapBacking", "MapState", "TransactionalMap", "OpaqueMap", "NonTransactionalMap", "CounterMap", "map_class", "MemoryMapBacking", "open_map_backing",
    "RedisMapBacking", "KeyValueState", "open_key_value_state",
]


def __getattr__(name: str) -> Any:
    if name == "RedisMapBacking":
        from state.redis import RedisMapBacking

        return RedisMapBacking
    raise AttributeError(name)
