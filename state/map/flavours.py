"""The exactly-once flavours that store a value per key: ``TransactionalMap``, ``OpaqueMap``
and the at-least-once ``NonTransactionalMap``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from state.keys import decode_key
from state.map.backing import MemoryMapBacking  # noqa: F401 - the doctests use it
from state.map.base import CommitScope, MapState
from state.map.fence import Fence
from state.map.rules import OpaqueValue, TransactionalValue, V, written_key
from state.map.ttl import DEFAULT_GRACE_SECS, EXPIRES


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
        befores, same = TransactionalValue.befores(keys, stored, txid)
        self._value.update(zip(keys, befores, strict=True))
        self._base.update(zip(keys, befores, strict=True))
        for i in same:                # written by an earlier attempt of txid
            e, s = keys[i], stored[i]
            if TransactionalValue.from_stored(e, s).applied(txid):
                self._skip.add(e)
            else:
                self._earlier[e] = s

    def _committed_value(self, key: Any, stored: Any) -> Any:
        return TransactionalValue.from_stored(key, stored).committed(self.last_committed)

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return TransactionalValue.from_stored(key, stored).get(txid, key)

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value, base = list(self._dirty), self._value, self._base
        stored = self._expiring(TransactionalValue.stored_updates(scope.txid, scope.attempt, [value[k] for k in keys],
                                                                  [base[k] for k in keys]), scope)
        earlier = self._earlier
        if earlier and not self.shared_writes:    # a replay: what it stored already stays
            kept = [(k, s) for k, s in zip(keys, stored, strict=True) if earlier.get(k) != s]
            keys, stored = [k for k, _ in kept], [s for _, s in kept]
        if self.shared_writes:
            return keys, [self._stamp(s, scope) for s in stored]
        return keys, stored


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
        befores = OpaqueValue.befores(keys, stored, txid)
        self._value.update(zip(keys, befores, strict=True))
        self._base.update(zip(keys, befores, strict=True))

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return OpaqueValue.from_stored(key, stored).get(txid, key)

    def _committed_value(self, key: Any, stored: Any) -> Any:
        return OpaqueValue.from_stored(key, stored).committed(self.last_committed)

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        t, a = scope.txid, scope.attempt
        keys, value, base = list(self._dirty), self._value, self._base
        values: list[Any] = self._expiring(
            OpaqueValue.stored_updates(t, a, [value[k] for k in keys], [base[k] for k in keys]), scope)
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
            v = OpaqueValue.from_stored(decode_key(k), s)
            if v.failed(scope.txid, scope.attempt):
                keys.append(k)
                back = v.rolled_back().to_stored()
                values.append(back if EXPIRES not in s else {**back, EXPIRES: s[EXPIRES]})
        if keys:
            self._put_back(keys, values, Fence(scope.epoch, scope.txid))
        return len(keys)

    def _put_back(self, keys: list[str], values: list[Any], fence: Fence) -> None:
        """Write rolled-back values; with a TTL, each keeps the expiry it had (the store
        deletes it ``grace`` after, as its write did)."""
        put = self.backing.multi_put
        if not self.caps.expires_keys or not any(EXPIRES in v for v in values):
            put(keys, values, fence)
            return
        grace = int(DEFAULT_GRACE_SECS * 1000) if self.ttl is None else self.ttl.grace_ms
        groups: dict[int | None, list[int]] = {}
        for i, v in enumerate(values):
            groups.setdefault(v.get(EXPIRES), []).append(i)
        for exp, idx in groups.items():
            delete_at = None if exp is None else exp + grace
            put([keys[i] for i in idx], [values[i] for i in idx], fence, delete_at=delete_at)  # type: ignore[call-arg]


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
        self._value.update(zip(keys, map(self._unwrap, stored), strict=True))

    def _unwrap(self, stored: Any) -> Any:
        """A stored value as the user's: with a TTL the map stores ``{"~val": v, "exp": ms}``."""
        return stored["~val"] if self.ttl is not None and type(stored) is dict and "~val" in stored else stored

    def _committed_value(self, key: Any, stored: Any) -> Any:
        return self._unwrap(stored)

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return self._unwrap(stored)

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value = list(self._dirty), self._value
        if self.ttl is not None:
            return keys, self._expiring([{"~val": value[k]} for k in keys], scope)
        return keys, [value[k] for k in keys]

