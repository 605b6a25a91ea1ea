"""``CounterMap``: numbers that batches add to, once per txid, in one write."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

from state.errors import ConfigError, StateCorruptError
from state.keys import decode_key
from state.map.backing import (
    Counting,
    EncodesColumns,
    EncodesDeltas,
    MemoryMapBacking,  # noqa: F401 - the doctests use it
)
from state.map.base import MapState, _encode_all
from state.map.fence import Fence
from state.map.rules import Combine, CounterRecord, Updater, V, unstorable_error
from state.map.updates import Combined, MapUpdate
from state.map.write import MapWrite


class CounterMap(MapState[V]):
    """Numbers that batches add to: ``multi_combine(keys, deltas, "sum")`` buffers the
    additions of a txid, and ``flush`` adds them in the store in one atomic, fenced write
    that also records the txid (``APPLIED_KEY``); a txid added before is skipped whole. So
    counts are exactly-once for transactional spouts (a replay adds the identical batch)
    without reading a key: the commit costs one write, not a read and a write of every
    key (Trident's ``TransactionalMap`` keeps a txid per key because Storm's multi-put is
    not atomic; here the write is). Values are plain numbers in the store.

    The add also records, for that txid, each key's value before it (``PRIOR_KEY``), so
    reads in txid t see the values as of t-1 even when an earlier attempt of t added
    already (``CounterRecord.get``): a replay reads what its first attempt read.

    Only for a single writer per txid (``commit_placement="driver"``) and transactional
    spouts; reads inside a commit see the value before the txid plus its additions.

    >>> m = CounterMap(MemoryMapBacking())
    >>> m.begin_commit(1, epoch=1); m.multi_combine(["a", "b", "a"], [2, 3, 1]); m.commit(1)
    [3, 3, 3]
    >>> m.begin_commit(1, epoch=1); m.multi_combine(["a"], [2]); m.commit(1); m.get("a")   # replay
    [2]
    3
    """

    kind = "counter"

    def _reset(self) -> None:
        super()._reset()
        self._deltas: dict[str, Any] = {}
        self._columns: tuple[Any, Any] | None = None     # _add_columns' arrays, not yet in _deltas

    def apply(self, update: MapUpdate, txid: int | None = None) -> list[V] | None:
        """``MapState.apply``; a ``Combined`` sum without ``new_values`` is added without
        reading a key (``pyarrow`` arrays written from the arrays when the backing can:
        ``EncodesColumns``). ``Updated`` is refused: counters only add.

        >>> from state.map import Combined
        >>> m = CounterMap(MemoryMapBacking()); m.begin_commit(1, epoch=1)
        >>> m.apply(Combined(["a", "b"], [2, 3], new_values=False), 1); m.commit(1); m.multi_get(["a", "b"])
        [2, 3]
        """
        if not isinstance(update, Combined) or update.new_values or update.combiner not in ("sum", "count"):
            return super().apply(update, txid)
        if txid is not None:
            self._require_txid(txid, update.verb)
        keys, values = update.keys, update.values
        if hasattr(keys, "to_pylist") and hasattr(values, "to_pylist"):
            self._add_columns(keys, values)
        else:
            self._add(list(keys), list(values))
        return None

    def _add_columns(self, keys: Any, deltas: Any) -> None:
        """``_add`` for a ``pyarrow`` array of distinct string keys (an aggregation's
        groups) and one of integer deltas: kept as arrays, and written from them when the
        backing can (``encode_columns``: no Python object per key on the way).
        Anything else (other types, nulls, keys starting with ``~``, earlier additions in
        the txid) takes the ``_add`` path."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self._require_scope("updated")
        plain = (not self._deltas and self._columns is None and len(keys) == len(deltas)
                 and (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type))
                 and pa.types.is_integer(deltas.type) and not keys.null_count and not deltas.null_count
                 and not pc.any(pc.starts_with(keys, "~")).as_py())
        if plain:
            self._columns = (keys, deltas)
        else:
            self._add(keys.to_pylist(), deltas.to_pylist(), distinct=True)

    def _take_columns(self) -> None:
        if self._columns is not None:
            keys, deltas = self._columns
            self._columns = None
            self._add(keys.to_pylist(), deltas.to_pylist(), distinct=True)

    def begin_commit(self, txid: int, attempt: int | None = None, *, epoch: int | None = None,
                     time_ms: int | None = None) -> None:
        """Start adding batch ``txid``'s numbers."""
        if self.shared_writes:
            msg = (f"counter map {self.name!r} has several writers per txid (committers on executors); "
                   "counter maps need commit_placement='driver' (or use a transactional map)")
            raise ConfigError(msg)
        super().begin_commit(txid, attempt, epoch=epoch, time_ms=time_ms)

    def _combine(self, keys: list[Any], values: list[Any], combiner: str | Combine) -> list[V]:
        """Add ``values[i]`` to ``keys[i]`` in this txid (``combiner`` must be ``"sum"`` or
        ``"count"``); returns the values as this txid leaves them (one read of the keys
        not read before in the txid)."""
        if combiner not in ("sum", "count"):
            msg = f"a counter map adds numbers; combiner {combiner!r} is not 'sum' (use a transactional map)"
            raise ValueError(msg)
        self._require_scope("updated")
        self._take_columns()
        if len(values) != len(keys):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        enc = _encode_all(keys)
        deltas = self._deltas
        for e, v in zip(enc, values, strict=True):
            if type(v) not in (int, float):
                raise unstorable_error(self.name, self._require_scope("updated").txid, e, v,
                                       "a counter map adds numbers; use a transactional or opaque map")
            deltas[e] = deltas.get(e, 0) + v
        return self._current(enc)

    def _add(self, keys: Sequence[Any], deltas: Sequence[Any], *, distinct: bool = False) -> None:
        """``_combine(keys, deltas)`` without reading the new values back
        (``distinct``: the caller vouches that no key repeats, e.g. an aggregation's)."""
        self._require_scope("updated")
        self._take_columns()
        d = self._deltas
        enc = _encode_all(list(keys))
        if not d and len(enc) == len(deltas) and (distinct or len(set(enc)) == len(enc)):
            self._deltas = dict(zip(enc, deltas, strict=True))       # the common case: one task's distinct keys
            return
        for e, v in zip(enc, deltas, strict=True):
            d[e] = d.get(e, 0) + v

    def _update(self, keys: list[Any], updaters: Sequence[Updater] | Updater) -> list[V]:
        """Not for counters: they only add (``Combined(keys, deltas, "sum")``)."""
        msg = f"counter map {self.name!r} only adds numbers: use multi_combine(keys, deltas, 'sum')"
        raise TypeError(msg)

    def multi_get(self, keys: Sequence[Any]) -> list[V | None]:
        """Inside a commit: the values before this txid plus its additions so far;
        outside: the committed values (as of ``last_committed`` when it is known)."""
        enc = _encode_all(list(keys))
        if self.scope is None:
            lc = self.last_committed
            if lc is None:             # whatever was added last
                stored, _ = self._counter_get(enc, 0)
                return [self._number(e, s) for e, s in zip(enc, stored, strict=True)]
            stored, rec = self._counter_get(enc, lc + 1)
            txid = lc + 1 if rec.applied == lc + 1 else rec.applied + 1
            return [self._number(e, rec.get(e, s, txid)) for e, s in zip(enc, stored, strict=True)]
        return self._current(enc)

    def multi_get_committed(self, keys: Sequence[Any]) -> list[V | None]:
        """The values before the current txid, whatever an earlier attempt of it added
        (outside a commit: ``multi_get``)."""
        if self.scope is None:
            return self.multi_get(keys)
        enc = _encode_all(list(keys))
        return self._before(enc, self.scope.txid)

    def _counter_get(self, enc: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        return self._counting().counter_get(enc, txid)

    def _counting(self) -> Counting:
        """The backing, as a ``Counting`` one (``ConfigError`` when it cannot hold counters)."""
        if not self.caps.counting:
            msg = f"map state backing {type(self.backing).__name__} cannot hold counter maps"
            raise ConfigError(msg)
        return cast(Counting, self.backing)

    def _before(self, enc: list[str], txid: int) -> list[Any]:
        """The values of ``enc`` before batch ``txid`` (one read: values and record)."""
        stored, rec = self._counter_get(enc, txid)
        return [self._number(e, rec.get(e, s, txid)) for e, s in zip(enc, stored, strict=True)]

    def _current(self, enc: list[str]) -> list[Any]:
        self._take_columns()
        scope = self._require_scope("read")
        uniq = list(dict.fromkeys(enc))
        base = dict(zip(uniq, self._before(uniq, scope.txid), strict=True))
        d = self._deltas
        out = []
        for e in enc:
            s, x = base.get(e), d.get(e)
            out.append(s if x is None else (x if s is None else s + x))
        return out

    def _number(self, key: str, value: Any) -> Any:
        return None if value is None else self._committed_value(decode_key(key), value)

    def prepare_write(self) -> MapWrite | None:
        """This txid's additions (None: none), checked to be numbers (``UnstorableValueError``
        names the first that is not) and encoded for the backing; nothing is written."""
        scope = self._require_scope("flushed")
        fence = Fence(scope.epoch, scope.txid, scope.attempt)
        caps = self.caps
        if self._columns is not None and caps.encodes_columns:
            keys, deltas = self._columns      # integers, checked by _add_columns
            return MapWrite(self.name, self.backing, "add", keys,
                            cast(EncodesColumns, self.backing).encode_columns(keys, deltas), fence, caps=caps)
        self._take_columns()
        if not self._deltas:
            return None
        keys, deltas = list(self._deltas), list(self._deltas.values())
        kinds = set(map(type, deltas))        # one pass in C; bool is not a number here
        if not kinds <= {int, float} or (float in kinds and not all(map(math.isfinite, deltas))):
            k, d = next((k, d) for k, d in zip(keys, deltas, strict=True)
                        if type(d) not in (int, float) or not math.isfinite(d))
            raise unstorable_error(self.name, scope.txid, k, d, "a counter map adds finite numbers (int or "
                                   "float); use a transactional or opaque map for other values")
        self._counting()
        encoded = cast(EncodesDeltas, self.backing).encode_deltas(keys, deltas) if caps.encodes_deltas else deltas
        return MapWrite(self.name, self.backing, "add", keys, encoded, fence, caps=caps)

    def _written(self, part: MapWrite) -> None:
        self._deltas = {}
        self._columns = None

    def _committed_value(self, key: Any, stored: Any) -> Any:
        if type(stored) not in (int, float):
            msg = f"key {key!r} holds {stored!r}, not a number of a counter map; use another state name"
            raise StateCorruptError(msg)
        return stored

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        raise NotImplementedError   # counter reads go through _before (they need the record)

