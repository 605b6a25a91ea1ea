"""Opening maps: the map kinds by name, and backings by URL."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, cast

from state.errors import ConfigError
from state.keys import check_state_name, key_prefix
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


# -- one policy: a topology's map by name ------------------------------------------------------

def map_kind(name: str, kind: bool | str, known: Mapping[str, str], by: str | None = None) -> type[MapState[Any]]:
    """The map class of ``kind`` (see ``map_class``) for map ``name`` of a topology whose
    maps have the kinds ``known`` (name -> kind): one name, one kind. A name used as
    another kind raises ``ConfigError`` naming both (``by``: who asks, for the message).

    >>> map_kind("counts", True, {"counts": "opaque"}).__name__
    'OpaqueMap'
    """
    check_state_name(name)
    cls = map_class(kind)
    was = known.get(name)
    if was is not None and was != cls.kind:
        asker = f" by {by}" if by else ""
        msg = (f"map state {name!r} is {_a(was)} map of this topology, and is asked for{asker} as "
               f"{_a(cls.kind)} map ({cls.__name__}); one name, one kind: use a new state name for the other kind")
        raise ConfigError(msg)
    return cls


def _a(word: str) -> str:
    return f"{'an' if word[:1] in tuple('aeiou') else 'a'} {word}"


def open_map(name: str, kind: bool | str, *, url: str, scope: str, known: Mapping[str, str],
             options: Mapping[str, Any] | None = None, writer: str = "driver", shared_writes: bool = False,
             by: str | None = None) -> MapState[Any]:
    """Map ``name`` of topology ``scope`` as ``kind``, checked by ``map_kind`` against the
    topology's ``known`` kinds: the driver's maps and a committer task's on an executor are
    opened by this one policy. The backing of ``url`` (with ``options``) is namespaced
    ``<scope>:<name>`` and fenced by the scope's fence (one epoch raised when a driver
    starts fences every map of the topology). ``writer`` names who writes through the map
    (its record for ``rollback``); ``shared_writes``: one of several writers of an attempt
    (committer tasks on executors), whose writes claim their keys.

    >>> m = open_map("counts", "opaque", url="memory://", scope="doc-open", known={})
    >>> type(m).__name__, m.name, m.backing.namespace
    ('OpaqueMap', 'counts', 'doc-open:counts')
    >>> reset_memory_maps("doc-open")
    """
    cls = map_kind(name, kind, known, by)
    backing = open_map_backing(url, f"{scope}:{name}", fence_scope=scope, **(options or {}))
    m = cls(backing, name, writer=writer)
    m.shared_writes = shared_writes
    return m


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

