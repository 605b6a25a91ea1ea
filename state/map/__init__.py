"""User state: map backings (I/O only) and the exactly-once wrappers (docs/design.md §5).

The rules live once, as small immutable values (``TransactionalValue``, ``OpaqueValue``,
``CounterRecord`` in ``state/map/rules.py``, after Storm's ``TransactionalValue`` /
``OpaqueValue``: ``from_stored``, ``get(txid)``, ``update(txid, attempt, new)``,
``to_stored``) that every read and write path uses; every backing only stores what the
wrappers hand it. The package: ``rules`` (the values), ``fence``, ``updates`` (the one
write a map takes, ``MapState.apply``), ``write`` (one txid's writes of several maps),
``backing`` (the protocol, its optional capabilities and the memory backing), ``cache``,
``base`` (``MapState``), ``flavours``, ``counter`` and ``openers``.

**A read in txid t sees the state as of t-1** -- a state query, an updater's old value,
a new-values stream -- whatever an earlier attempt of t already wrote, for every
exactly-once flavour and wherever the commit runs (Trident's ``OpaqueValue.get(txid)``).
So a replay of t reads what its first attempt read, and what it derives is counted once.
Each stored value keeps what that answer needs:

* ``TransactionalMap`` stores ``{"txid": t, "val": v, "prev": p}``; ``OpaqueMap`` stores
  ``{"txid": t, "attempt": a, "curr": c, "prev": p}``. The value *before* batch t is
  ``prev`` when the stored txid is t (an earlier attempt of t wrote it) and ``val`` /
  ``curr`` when it is older (``TransactionalValue.get`` / ``OpaqueValue.get``). The batch builds
  on that base; reads inside the batch see it unless this attempt updated the key. A
  transactional replay so recomputes the identical batch from ``prev`` and stores what
  the first attempt stored. (A ``{"txid", "val"}`` without ``prev``, written by an older
  version, keeps the old rule when its txid is the batch's: the update is skipped.)
* ``CounterMap`` stores plain numbers, the last txid it added (``APPLIED_KEY``) and, for
  that txid, the value before it of every key it added to (``PRIOR_KEY``, written in the
  same atomic add): ``CounterRecord.get``.
* In all, a stored txid newer than the batch's raises ``StateAheadError``.

**One write per map and txid.** Inside a commit (``begin_commit`` .. ``commit``) a map
buffers its updates: the first touch of a key reads its stored value once (one
``multi_get`` per call for the keys not seen yet in this txid); every update of the key
in the txid -- repeated inside one call, from several committer tasks, from several
committers sharing the map -- applies to the value so far; ``flush`` writes every
changed key in one atomic ``multi_put``. So a key is stored at most once per txid and
map, and a failure anywhere in the commit phase before ``flush`` leaves nothing behind.

**One txid in all of its maps or in none.** ``commit_maps`` commits several maps of a
txid as one: each map's write (``prepare_write``) is checked storable and encoded for its
backing before any is written (``UnstorableValueError`` names the map, key and value),
then the writes of the maps sharing a store (a backing's ``write_group``: one Redis
server, the memory maps of one fence) go in one atomic, fenced step (the backing's
``write``). The engine commits every map of a txid this way, on the driver and in each
committer task on executors.

**Fencing.** Each write carries a ``Fence(epoch, txid)``: the epoch of the driver (every
new holder of a topology's lock takes a higher one, durably) and the batch's txid. The
backing refuses, atomically and writing nothing, a write from an older epoch whatever
its txid (a paused driver resumed after another took over) and one older than a txid
already written (``StateAheadError``). The rule is ``fence_refusal``; the memory backing
applies it in Python, the Redis backing in its write script.

**Roll back instead of a superseded list.** An opaque attempt of txid t whose ``flush``
ran but which did not commit (a later map's write or another task failed, the driver
died before recording t) leaves values ``{txid: t, attempt: a1}`` that hold tuples never
committed. Each opaque flush therefore also stores which keys it wrote, in the same
atomic write: the record ``~written:<writer>`` of the flushing writer (the driver, or
one committer task on an executor). Before another attempt of t commits (the engine
knows one is needed: an earlier attempt of t began its commit), ``rollback`` puts every
key a failed attempt's record lists back to its committed value before t (``{txid: t,
attempt: None, curr: prev, prev: prev}``). Nothing is left for readers to interpret:
once t is recorded as committed, a plain ``redis-cli GET`` sees only committed values,
and no bookkeeping grows with the run.
"""

from __future__ import annotations

from state.map.backing import MapBacking, MemoryMapBacking
from state.map.base import CommitScope, MapState
from state.map.cache import CACHE_LIMIT, CachedMap
from state.map.counter import CounterMap
from state.map.fence import Fence, FenceCell, conflict_error, fence_error, fence_refusal
from state.map.flavours import NonTransactionalMap, OpaqueMap, TransactionalMap
from state.map.openers import (
    MAP_KINDS,
    map_class,
    map_kind,
    open_map,
    open_map_backing,
    open_memory_backing,
    reset_memory_maps,
)
from state.map.rules import (
    APPLIED_KEY,
    COMBINERS,
    PRIOR_KEY,
    WRITTEN_KEY,
    Combine,
    CounterRecord,
    OpaqueValue,
    TransactionalValue,
    Updater,
    V,
    unstorable_error,
    written_key,
)
from state.map.updates import Combined, MapUpdate, Updated
from state.map.write import MapWrite, commit_maps, tagged, write_maps

__all__ = [
    "MapBacking",
    "MemoryMapBacking",
    "CommitScope",
    "MapState",
    "CACHE_LIMIT",
    "CachedMap",
    "CounterMap",
    "Fence",
    "fence_refusal",
    "fence_error",
    "conflict_error",
    "FenceCell",
    "TransactionalMap",
    "OpaqueMap",
    "NonTransactionalMap",
    "MAP_KINDS",
    "map_class",
    "map_kind",
    "open_map",
    "open_map_backing",
    "open_memory_backing",
    "reset_memory_maps",
    "V",
    "Updater",
    "Combine",
    "WRITTEN_KEY",
    "APPLIED_KEY",
    "PRIOR_KEY",
    "written_key",
    "TransactionalValue",
    "OpaqueValue",
    "CounterRecord",
    "unstorable_error",
    "COMBINERS",
    "MapWrite",
    "MapUpdate",
    "Updated",
    "Combined",
    "tagged",
    "write_maps",
    "commit_maps",
]
