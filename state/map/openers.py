"""Opening maps: the map kinds by name, and backings by URL."""

from __future__ import annotations

import threading
from typing import Any, cast

from state.keys import key_prefix
from state.map.backing import MapBacking, MemoryMapBacking
from state.map.base import MapState
from state.map.counter import CounterMap
from state.map.fence import FenceCell
from state.map.flavours import NonTransactionalMap, OpaqueMap, TransactionalMap

#: The map kinds by name: ``TopologyContext.map_state(name, kind)`` takes a name or a bool.
MAP_KINDS: dict[str, type[MapState[Any]]] = {
    TransactionalMap.kind: TransactionalMap,
    OpaqueMap.kind: OpaqueMap,
    NonTransactionalMap.kind: NonTransactionalMap,
    CounterMap.kind: CounterMap,
}


def map_class(kind: bool | str) -> type[MapState[Any]]:
    """The map class for ``kind``: False (``TransactionalMap``), True (``OpaqueMap``), or a
    name of ``MAP_KINDS``.

    >>> map_class(True).__name__, map_class("non-transactional").__name__
    ('OpaqueMap', 'NonTransactionalMap')
    """
    if isinstance(kind, bool):
        return OpaqueMap if kind else TransactionalMap
    cls = MAP_KINDS.get(kind)
    if cls is None:
        msg = f"unknown map kind {kind!r}; use one of {sorted(MAP_KINDS)} (or opaque=True/False)"
        raise ValueError(msg)
    return cls


# -- backings by URL -----------------------------------------------------------------------

_memory_backings: dict[str, MemoryMapBacking] = {}
_memory_fences: dict[str, FenceCell] = {}
_memory_guard = threading.Lock()


def open_map_backing(url: str, namespace: str, *, fence_scope: str | None = None,
                     **options: Any) -> MapBacking:
    """The backing named by ``url`` for ``namespace`` (``<topology_id>:<state name>``;
    schemes: ``state/backends.py``).

    ``fence_scope``: the name whose fence guards the backing's writes (the engine passes
    the topology id, so one epoch raised when a driver starts fences all its maps);
    default: the namespace itself.

    ``memory://`` -> one ``MemoryMapBacking`` per namespace in this process (the driver);
    ``redis://[user:password@]host:port/db`` and ``rediss://`` -> ``RedisMapBacking``.
    """
    from state.backends import USER_STATE, opener

    backing = opener(USER_STATE, url)(url, namespace, fence_scope=fence_scope or namespace, **options)
    return cast(MapBacking, backing)


def open_memory_backing(url: str, namespace: str, *, fence_scope: str, **options: Any) -> MemoryMapBacking:
    """``memory://``: the one ``MemoryMapBacking`` of ``namespace`` in this process (a
    namespace is ``<scope>:<name>`` here as in every backing: ``state.keys.key_prefix``)."""
    key_prefix(namespace)
    with _memory_guard:
        fence = _memory_fences.setdefault(fence_scope, FenceCell())
        b = _memory_backings.get(namespace)
        if b is None:
            b = _memory_backings[namespace] = MemoryMapBacking(fence, namespace)
        return b


def reset_memory_maps(prefix: str = "") -> None:
    """Forget in-memory maps (and their fences) whose namespace starts with ``prefix``. For tests."""
    with _memory_guard:
        for d in (_memory_backings, _memory_fences):
            for k in [k for k in d if k.startswith(prefix)]:
                del d[k]

