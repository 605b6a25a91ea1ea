"""``MapState``: what a committer uses, the buffering of one txid's updates of a map and its
write, common to every flavour (``state.map``'s docstring)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, cast

from state.keys import encode_key
from state.map.backing import BackingCapabilities, EncodesValues, MapBacking
from state.map.cache import CachedMap
from state.map.fence import Fence, conflict_error
from state.map.rules import COMBINERS, Combine, Updater, V, unstorable_error
from state.map.ttl import Ttl
from state.map.updates import Combined, MapUpdate, Updated
from state.map.write import MapWrite, commit_maps, write_maps


@dataclass(frozen=True)
class CommitScope:
    """What a map's writes belong to: batch ``txid``, its ``attempt``, the driver's
    ``epoch``, the txid's recorded time ``time_ms`` (what a TTL is decided by:
    ``state.map.ttl``)."""

    txid: int
    attempt: int | None = None
    epoch: int | None = None
    time_ms: int | None = None


class MapState(CachedMap, Generic[V]):
    """What a committer uses: Trident's ``MapState`` in Python. Users do not subclass it.

    Call order per batch (the framework makes the first and last calls around the commit
    phase): ``begin_commit(txid, attempt, epoch=...)``, any ``apply`` (the one write door;
    ``multi_update`` / ``multi_combine`` are its Storm-named forms) / ``multi_get``,
    ``commit(txid)`` (which ``flush``-es: one atomic, fenced write of every key changed in
    the txid) or ``abort()`` (writes nothing).
    """

    kind = "map"
    #: the fields of a stored wrapper dict that hold user values (None: the stored value
    #: is the user's value)
    _user_fields: tuple[str, ...] | None = None

    def __init__(self, backing: MapBacking, name: str | None = None, writer: str = "driver") -> None:
        self.backing = backing
        self.name: str = name or self.caps.namespace or type(self).__name__
        #: who writes through this map object (one committer task, or the driver): names
        #: the record of what it wrote, for ``rollback``
        self.writer = writer
        #: one of several writers of an attempt (committer tasks on executors): writes
        #: claim their keys, and a key another writer claimed is refused (``Fence.writer``)
        self.shared_writes = False
        self.scope: CommitScope | None = None
        #: the map's time to live (``state.map.ttl``), None: its keys never expire
        self.ttl: Ttl | None = None
        #: the recorded time of the last txid whose commit began here (reads outside a
        #: commit decide expiry by it; the wall clock before any)
        self.now_ms: int | None = None
        #: the last txid known committed (set by the engine): reads outside a commit show
        #: values as of it; None: whatever was written last
        self.last_committed: int | None = None
        #: what the backing holds for keys this object read or wrote (encoded key -> stored
        #: value), valid while it is the only writer: the driver's maps, fenced by its
        #: epoch (any other writer has a newer epoch, and then this object's next write
        #: is refused whatever it read). Keys found here are not read again: Trident's
        #: ``CachedMap``. Dropped on a new epoch, a failed write, a rollback, and when it
        #: outgrows ``CACHE_LIMIT``; never used with ``shared_writes``.
        self._cache: dict[str, Any] = {}
        self._cache_epoch: int | None = None
        self._reset()

    @property
    def backing(self) -> MapBacking:
        """Where the map's values live; setting it finds its capabilities once (``caps``)."""
        return self._backing

    @backing.setter
    def backing(self, backing: MapBacking) -> None:
        #: what the backing can do beyond ``MapBacking`` (``BackingCapabilities``)
        self.caps = BackingCapabilities.of(backing)
        self._backing = backing

    def _reset(self) -> None:
        # the keys (encoded) touched in this txid: their value so far, the value before the
        # txid, the ones an earlier attempt already applied (a TransactionalMap value of
        # the form without "prev"), the ones this attempt changed (in order)
        self._value: dict[str, Any] = {}
        self._base: dict[str, Any] = {}
        self._skip: set[str] = set()
        self._dirty: dict[str, None] = {}

    # -- the commit scope ----------------------------------------------------------------------
    def begin_commit(self, txid: int, attempt: int | None = None, *, epoch: int | None = None,
                     time_ms: int | None = None) -> None:
        """Start applying batch ``txid`` (see ``CommitScope``); drops anything buffered."""
        self.scope = CommitScope(txid, attempt, epoch, time_ms)
        if time_ms is not None:
            self.now_ms = time_ms
        if epoch != self._cache_epoch or epoch is None:
            self._cache = {}
            # a backing in this process's memory is as fast as a cache of it
            self._cache_epoch = epoch if self.caps.remote else None
        self._reset()

    def flush(self) -> None:
        """Write every key changed in this txid in one atomic, fenced ``multi_put`` (checked
        storable first: ``UnstorableValueError`` names the key and value, nothing written)."""
        part = self.prepare_write()
        if part is None:
            return
        try:
            write_maps([part])
        except BaseException:
            self._cache = {}        # written or not: unknown
            raise
        self._written(part)

    def prepare_write(self) -> MapWrite | None:
        """This txid's write of the map (None: nothing changed), checked storable and
        encoded for the backing; nothing is written (``write_maps`` writes it)."""
        scope = self._require_scope("flushed")
        keys, values = self._writes(scope)
        if not keys:
            return None
        writer = self.writer if self.shared_writes else None
        trusted = 0
        cache = self._cache
        if cache:      # keys the cache knows go last: the backing need not check them
            # (a key read as absent may hold a non-string value MGET cannot show)
            fresh = [i for i, k in enumerate(keys) if cache.get(k) is None]
            if len(fresh) < len(keys):
                order = fresh + [i for i, k in enumerate(keys) if cache.get(k) is not None]
                trusted = len(keys) - len(fresh)
                keys, values = [keys[i] for i in order], [values[i] for i in order]
        encoded = (self._encoded(cast(EncodesValues, self.backing).encode_values, keys, values, scope)
                   if self.caps.encodes_values else values)
        delete_at = None if self.ttl is None or scope.time_ms is None else self.ttl.delete_at(scope.time_ms)
        return MapWrite(self.name, self.backing, "put", keys, encoded,
                        Fence(scope.epoch, scope.txid, scope.attempt, writer), trusted, values, delete_at,
                        scope.time_ms, self.caps)

    def _encoded(self, encode: Callable[[list[Any]], Any], keys: list[str], values: list[Any],
                 scope: CommitScope) -> Any:
        """``encode(values)``; a value it cannot encode raises ``UnstorableValueError``
        naming the key and the user's value."""
        try:
            return encode(values)
        except Exception:
            for k, v in zip(keys, values, strict=True):
                try:
                    encode([v])
                except Exception as e:  # noqa: BLE001 - whatever the serializer raises
                    user = v
                    if type(v) is dict and self._user_fields:
                        for f in self._user_fields:
                            try:
                                encode([v.get(f)])
                            except Exception:  # noqa: BLE001
                                user = v.get(f)
                                break
                    raise unstorable_error(self.name, scope.txid, k, user, f"{type(e).__name__}: {e}") from None
            raise

    def _written(self, part: MapWrite) -> None:
        """``part`` is stored: remember what the backing now holds, nothing is dirty."""
        if part.stored is not None:
            self._remember(part.keys, part.stored)
        self._dirty = {}

    def rollback(self, writers: Sequence[str]) -> int:
        """Before this attempt commits its txid: put back what failed attempts of the txid
        wrote (see the module docstring); ``writers``: every writer that may have written.
        Returns how many keys were put back. Only ``OpaqueMap`` has anything to do."""
        return 0

    def commit(self, txid: int) -> None:
        """``flush``, then end the commit of ``txid`` (``commit_maps`` commits several
        maps as one)."""
        commit_maps([self], txid)

    def abort(self) -> None:
        """End the current commit without writing anything buffered."""
        self.scope = None
        self._reset()

    def _require_txid(self, txid: int, what: str) -> None:
        scope = self._require_scope("updated")
        if scope.txid != txid:
            msg = f"{what}({txid}) of map {self.name!r} in the commit of txid {scope.txid}"
            raise RuntimeError(msg)

    def _require_scope(self, what: str) -> CommitScope:
        if self.scope is None:
            msg = (
                f"map {self.name!r} {what} outside a commit: update it from a "
                "committer's finish_batch (the framework calls begin_commit around it)"
            )
            raise RuntimeError(msg)
        return self.scope

    # -- reads and updates ---------------------------------------------------------------------
    def multi_get(self, keys: Sequence[Any]) -> list[V | None]:
        """The values of ``keys`` (None where absent). Inside a commit: as this txid left
        them so far (the committed value before it for keys it has not changed); outside:
        the last committed values."""
        keys = list(keys)
        enc = _encode_all(keys)
        if self.scope is None:
            stored = self.backing.multi_get(enc)
            if self.ttl is not None:
                stored = self.ttl.live(stored, self.now_ms if self.now_ms is not None else int(time.time() * 1000))
            return [None if s is None else self._committed_value(k, s)
                    for k, s in zip(keys, stored, strict=True)]
        self._touch(enc)
        value = self._value
        return [value[e] for e in enc]

    def get(self, key: Any) -> V | None:
        """The value of one ``key``, as ``multi_get([key])[0]``."""
        return self.multi_get([key])[0]

    def multi_get_committed(self, keys: Sequence[Any]) -> list[V | None]:
        """The committed values of ``keys`` before the current txid, whatever this txid
        has updated so far (outside a commit: ``multi_get``). Trident's state queries read
        this: the state every batch before this one left."""
        if self.scope is None:
            return self.multi_get(keys)
        keys = list(keys)
        txid, enc = self.scope.txid, _encode_all(keys)
        stored = self.backing.multi_get(enc)
        if self.ttl is not None:
            stored = self.ttl.live(stored, self.scope.time_ms)
            if self.ttl.from_read:
                self._touch(enc)          # read: written again by this txid, its expiry moved
        return [None if s is None else self._base_value(k, s, txid)
                for k, s in zip(keys, stored, strict=True)]

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        """The value before batch ``txid`` of a stored value (as ``_load`` takes it)."""
        raise NotImplementedError

    def apply(self, update: MapUpdate, txid: int | None = None) -> list[V] | None:
        """The map's one write door: ``update`` (``Updated``: per-key updaters;
        ``Combined``: per-key values and a combiner, as lists or columns) applied in the
        current commit, exactly once across replays (``txid``, when given, must be the
        commit's). Returns the new values, or None for a ``Combined`` without
        ``new_values`` (a map may then write without reading, as ``CounterMap`` does).
        Trident's persistence, ``multi_update`` and ``multi_combine`` all write through it.

        >>> from state.map import Combined, MemoryMapBacking, TransactionalMap
        >>> m = TransactionalMap(MemoryMapBacking()); m.begin_commit(4)
        >>> m.apply(Combined(["a", "b"], [2, 3]), 4), m.apply(Combined(["a"], [5], "max"), 4)
        ([2, 3], [5])
        """
        if txid is not None:
            self._require_txid(txid, update.verb)
        if isinstance(update, Updated):
            return self._update(list(update.keys), update.updaters)
        new = self._combine(_as_list(update.keys), _as_list(update.values), update.combiner)
        return new if update.new_values else None

    def multi_update(self, keys: Sequence[Any], updaters: Sequence[Updater] | Updater) -> list[V]:
        """``apply(Updated(keys, updaters))``: ``updaters[i](old_or_None) -> new`` applied
        to ``keys[i]`` for the current batch, exactly once across replays; returns the new
        values. One updater may serve all."""
        return cast(list[V], self.apply(Updated(keys, updaters)))

    def multi_combine(self, keys: Sequence[Any], values: Sequence[Any], combiner: str | Combine = "sum") -> list[V]:
        """``apply(Combined(keys, values, combiner))``: fold ``values[i]`` into ``keys[i]``
        with a combiner (``Combined``).

        >>> from state.map import MemoryMapBacking, TransactionalMap
        >>> m = TransactionalMap(MemoryMapBacking()); m.begin_commit(1)
        >>> m.multi_combine(["a", "b", "a"], [2, 3, 1])
        [2, 3, 3]
        >>> m.commit(1); m.begin_commit(2); m.multi_combine(["a"], [5], "max")
        [5]
        """
        return cast(list[V], self.apply(Combined(keys, values, combiner)))

    def _update(self, keys: list[Any], updaters: Sequence[Updater] | Updater) -> list[V]:
        """``Updated``'s write (``apply``)."""
        if callable(updaters):
            return self._apply_all(keys, _call, [updaters] * len(keys))
        if len(updaters) != len(keys):
            msg = f"{len(keys)} keys but {len(updaters)} updaters"
            raise ValueError(msg)
        return self._apply_all(keys, _call, updaters)

    def _combine(self, keys: list[Any], values: list[Any], combiner: str | Combine) -> list[V]:
        """``Combined``'s write (``apply``), the new values read back."""
        fn = COMBINERS.get(combiner) if isinstance(combiner, str) else combiner
        if fn is None:
            msg = f"unknown combiner {combiner!r}; use one of {sorted(COMBINERS)} or a function"
            raise ValueError(msg)
        if len(values) != len(keys):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        return self._apply_all(keys, fn, values)

    def _apply_all(self, keys: list[Any], fn: Combine, args: Sequence[Any]) -> list[V]:
        self._require_scope("updated")
        enc = _encode_all(keys)
        self._touch(enc)
        value, skip, dirty = self._value, self._skip, self._dirty
        out: list[V] = []
        append = out.append
        if skip:
            for e, arg in zip(enc, args, strict=True):
                if e not in skip:
                    value[e] = fn(value[e], arg)
                    dirty[e] = None
                append(value[e])
        else:                       # the hot path: no key of this txid was applied before
            for e, arg in zip(enc, args, strict=True):
                v = value[e] = fn(value[e], arg)
                append(v)
            dirty.update(dict.fromkeys(enc))
        return out

    def _touch(self, enc: list[str]) -> None:
        """Read the keys of ``enc`` not seen yet in this txid: one ``multi_get``."""
        value = self._value
        missing = list(dict.fromkeys(enc if not value else [e for e in enc if e not in value]))
        if not missing:
            return
        scope = self.scope
        assert scope is not None
        cache = self._cache
        if cache:
            hits = [e for e in missing if e in cache]
            if hits:
                self._load_live(hits, [cache[e] for e in hits], scope)
                if len(hits) == len(missing):
                    return
                missing = [e for e in missing if e not in cache]
        stored = self.backing.multi_get(missing)
        if self.shared_writes:
            for e, s in zip(missing, stored, strict=True):
                self._check_claim(e, s, scope)
        self._load_live(missing, stored, scope)
        self._remember(missing, stored)

    def _load_live(self, keys: list[str], stored: list[Any], scope: CommitScope) -> None:
        """``_load`` what has not expired by the txid's time (``state.map.ttl``); with
        ``ttl_from="read"`` a live key read is written again by this txid."""
        ttl = self.ttl
        if ttl is None:
            self._load(keys, stored, scope.txid)
            return
        self._load(keys, ttl.live(stored, scope.time_ms), scope.txid)
        if ttl.from_read:
            value, skip = self._value, self._skip
            self._dirty.update((e, None) for e in keys if value.get(e) is not None and e not in skip)

    def _expiring(self, stored: list[Any], scope: CommitScope) -> list[Any]:
        """``stored`` (wrapper dicts) with the time they expire, for a map with a TTL."""
        return stored if self.ttl is None else self.ttl.stamp(stored, scope.time_ms)

    def _check_claim(self, key: str, stored: Any, scope: CommitScope) -> None:
        """One of several writers of an attempt finds a key another writer of the same
        attempt already wrote: its update would be skipped or overwrite the other's share."""
        if (isinstance(stored, dict) and stored.get("txid") == scope.txid
                and stored.get("attempt") == scope.attempt and stored.get("writer") not in (None, self.writer)):
            where = f"map {self.name!r}"
            raise conflict_error(where, key, stored["writer"],
                                 Fence(scope.epoch, scope.txid, scope.attempt, self.writer))

    def _stamp(self, value: dict[str, Any], scope: CommitScope) -> dict[str, Any]:
        """A stored value, with its attempt and writer when several writers share the attempt."""
        if self.shared_writes:
            value["attempt"] = scope.attempt
            value["writer"] = self.writer
        return value

    # -- what each wrapper stores --------------------------------------------------------------
    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        """Take the stored values of ``keys`` as this txid's starting point."""
        raise NotImplementedError

    def _committed_value(self, key: Any, stored: Any) -> Any:
        raise NotImplementedError

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        raise NotImplementedError


def _as_list(column: Any) -> list[Any]:
    """A column (a sequence or a ``pyarrow`` array) as a list."""
    to_pylist = getattr(column, "to_pylist", None)
    return list(column) if to_pylist is None else cast(list[Any], to_pylist())


def _call(old: Any, update: Updater) -> Any:
    return update(old)


def _encode_all(keys: list[Any]) -> list[str]:
    """``encode_key`` of each key (a plain str not starting with ``~`` is its own)."""
    try:   # the common case, checked in C: every key a str, none starting with "~"
        if "\0~" not in "\0" + "\0".join(keys):
            return keys
    except TypeError:
        pass
    return [k if type(k) is str and k[:1] != "~" else encode_key(k) for k in keys]
