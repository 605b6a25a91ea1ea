"""The exactly-once flavours that store a value per key: ``TransactionalMap``, ``OpaqueMap``
and the at-least-once ``NonTransactionalMap``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from state.keys import decode_key
from state.map.backing import MemoryMapBacking  # noqa: F401 - the doctests use it
from state.map.base import CommitScope, MapState
from state.map.fence import Fence
from state.map.rules import V, _checked, opaque_base, transactional_base, written_key


class TransactionalMap(MapState[V]):
    """Exactly-once map for transactional spouts (a replay re-emits the identical batch).

    A replay of txid t (after its write, before it was recorded) builds on the value
    before t again (``prev``), so it reads and stores what the first attempt did.

    >>> m = TransactionalMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_update(["a"], [lambda v: (v or 0) + 1]); m.commit(1)
    [1]
    >>> m.begin_commit(1); m.multi_get(["a"])    # replay of txid 1: the value before it
    [None]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 1])
    [1]
    """

    kind = "transactional"
    _user_fields = ("val", "prev")

    def _reset(self) -> None:
        super()._reset()
        # what an earlier attempt of this txid stored (a replay): not written again if the
        # replay computes the same
        self._earlier: dict[str, Any] = {}

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        value, base, skip = self._value, self._base, self._skip
        for e, s in zip(keys, stored, strict=True):
            if s is None:
                b = None
            elif type(s) is dict and "val" in s and type(s.get("txid")) is int and s["txid"] < txid:
                b = s["val"]
            else:                     # written by an earlier attempt of txid, ahead, or not ours
                b, applied = transactional_base(decode_key(e), s, txid)
                if applied:
                    skip.add(e)
                elif s["txid"] == txid:
                    self._earlier[e] = s
            value[e] = base[e] = b

    def _committed_value(self, key: Any, stored: Any) -> Any:
        s = _checked(key, stored, ("txid", "val"), "TransactionalMap")
        if self.last_committed is not None and s["txid"] > self.last_committed and "prev" in s:
            return s["prev"]   # written by a txid not committed (yet)
        return s["val"]

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return transactional_base(key, stored, txid)[0]

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value, base, t = list(self._dirty), self._value, self._base, scope.txid
        earlier = self._earlier
        if earlier and not self.shared_writes:    # a replay: what it stored already stays
            keys = [k for k in keys if earlier.get(k) != {"txid": t, "val": value[k], "prev": base[k]}]
        if self.shared_writes:
            return keys, [self._stamp({"txid": t, "val": value[k], "prev": base[k]}, scope) for k in keys]
        return keys, [{"txid": t, "val": value[k], "prev": base[k]} for k in keys]


class OpaqueMap(MapState[V]):
    """Exactly-once map for opaque spouts (a replay may emit a different batch).

    >>> m = OpaqueMap(MemoryMapBacking())
    >>> m.begin_commit(1, 1); m.multi_update(["a"], [lambda v: (v or 0) + 5]); m.flush()
    [5]
    >>> m.begin_commit(1, 2); m.multi_get(["a"])    # attempt 1 never committed: its 5 is not seen
    [None]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 3]); m.commit(1); m.get("a")
    [3]
    3
    """

    kind = "opaque"
    _user_fields = ("curr", "prev")

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        value, base = self._value, self._base
        for e, s in zip(keys, stored, strict=True):
            if s is None:
                b = None
            elif type(s) is dict and "curr" in s and type(s.get("txid")) is int and s["txid"] < txid:
                b = s["curr"]
            else:
                b = opaque_base(decode_key(e), s, txid)
            value[e] = base[e] = b

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return opaque_base(key, stored, txid)

    def _committed_value(self, key: Any, stored: Any) -> Any:
        s = _checked(key, stored, ("txid", "curr", "prev"), "OpaqueMap")
        if self.last_committed is not None and s["txid"] > self.last_committed:
            return s["prev"]   # written by a txid not committed (yet)
        return s["curr"]

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        t, a = scope.txid, scope.attempt
        keys, value, base = list(self._dirty), self._value, self._base
        values: list[Any] = [{"txid": t, "attempt": a, "curr": value[k], "prev": base[k]} for k in keys]
        if self.shared_writes:
            values = [self._stamp(v, scope) for v in values]
        if keys:
            # what this writer wrote, for the rollback if this attempt does not commit
            values.append({"txid": t, "attempt": a, "keys": list(keys)})
            keys.append(written_key(self.writer))
        return keys, values

    def rollback(self, writers: Sequence[str]) -> int:
        """Put back ``prev`` on the keys that failed attempts of the current txid wrote (found
        through the ``writers``' records), so this attempt updates the committed values.
        Returns how many keys were put back."""
        scope = self._require_scope("rolled back")
        self._cache = {}
        records = self.backing.multi_get([written_key(w) for w in writers])
        left = sorted({k for r in records if isinstance(r, dict) and r.get("txid") == scope.txid
                       and r.get("attempt") != scope.attempt for k in r.get("keys", ())})
        if not left:
            return 0
        keys, values = [], []
        for k, s in zip(left, self.backing.multi_get(left), strict=True):
            if s is None:
                continue
            s = _checked(decode_key(k), s, ("txid", "curr", "prev"), "OpaqueMap")
            if s["txid"] == scope.txid and s.get("attempt") not in (None, scope.attempt):
                keys.append(k)
                values.append({"txid": scope.txid, "attempt": None, "curr": s["prev"], "prev": s["prev"]})
        if keys:
            self.backing.multi_put(keys, values, Fence(scope.epoch, scope.txid))
        return len(keys)


class NonTransactionalMap(MapState[V]):
    """A map that stores plain values (Trident's non-transactional state): a replay of a
    batch whose earlier attempt wrote it applies the batch again. At-least-once, not
    exactly-once; for state whose updates are idempotent (``"replace"``, ``"max"``).

    >>> m = NonTransactionalMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_combine(["a"], [2]); m.commit(1)
    [2]
    >>> m.begin_commit(1); m.multi_combine(["a"], [2]); m.commit(1); m.get("a")   # replayed: counted twice
    [4]
    4
    """

    kind = "non-transactional"

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        self._value.update(zip(keys, stored, strict=True))

    def _committed_value(self, key: Any, stored: Any) -> Any:
        return stored

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return stored

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value = list(self._dirty), self._value
        return keys, [value[k] for k in keys]

