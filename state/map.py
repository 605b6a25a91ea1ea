"""User state: map backings (I/O only) and the exactly-once wrappers (DESIGN §5).

The rules live once, in two small pure functions over stored values, and every backing
gets them:

* ``TransactionalMap`` stores ``{"txid": t, "val": v}``. A key whose stored txid equals
  the batch's was already updated by this batch (a replay after a crash mid-commit):
  the update is skipped.
* ``OpaqueMap`` stores ``{"txid": t, "attempt": a, "curr": c, "prev": p}``. Same txid:
  the batch was (partly) applied by an earlier attempt that may have seen *different*
  tuples, so ``curr = update(prev)``. New txid: ``prev = curr; curr = update(curr)`` --
  unless attempt ``a`` of txid ``t`` is *superseded*: its commit started and failed, and
  another attempt of ``t`` committed without touching this key (it emitted a different
  batch). Then ``curr`` holds tuples that were never committed, and the committed value
  is ``prev``. (Trident's OpaqueMap lacks this and counts such tuples twice; the
  coordinator records superseded attempts, see ``transactional/_store.py``.)
* In both, a stored txid newer than the batch's raises ``StateAheadError``.

The ``==`` test is sound because commits are strictly ordered and only the newest
uncommitted txid can have partial writes.
"""

from __future__ import annotations

import threading
from typing import (Any, Callable, Container, Generic, Hashable, Mapping, Protocol, Sequence, TypeVar,
                    runtime_checkable)
from urllib.parse import urlparse

from transactional.exceptions import ConfigError, StateAheadError, StateCorruptError

V = TypeVar("V")
Updater = Callable[[Any], Any]
Combine = Callable[[Any, Any], Any]   # fn(old_or_None, arg) -> new


@runtime_checkable
class MapBacking(Protocol):
    """Where a map's stored values live. I/O only: no exactly-once logic here.

    Both calls take and return whole batches (one round trip each for a remote store).
    Values are JSON-compatible dicts produced by the wrappers.
    """

    def multi_get(self, keys: list) -> list:
        """Stored values for ``keys``, in order; None where absent."""
        ...

    def multi_put(self, keys: list, values: list) -> None:
        """Store ``values[i]`` at ``keys[i]``, atomically for the batch where the store can."""
        ...


class MemoryMapBacking:
    """A dict. The embedded default (``state="memory://"``): maps live in the driver.

    >>> m = MemoryMapBacking(); m.multi_put(["a"], [{"txid": 1, "val": 2}]); m.multi_get(["a", "b"])
    [{'txid': 1, 'val': 2}, None]
    """

    def __init__(self) -> None:
        self.data: dict[Hashable, Any] = {}
        self.round_trips = 0  # multi_get/multi_put calls, like a remote store's

    def multi_get(self, keys: list) -> list:
        self.round_trips += 1
        get = self.data.get
        return [get(k) for k in keys]

    def multi_put(self, keys: list, values: list) -> None:
        self.round_trips += 1
        self.data.update(zip(keys, values))


# -- the rules, as pure functions over stored values ------------------------------------

_ONE = object()   # "fn takes one argument": transactional_apply(key, stored, txid, updater)


def transactional_apply(key: Any, stored: Any, txid: int, fn: Combine | Updater, arg: Any = _ONE,
                        attempt: int | None = None,
                        superseded: Mapping[int, Container[int]] = {}) -> tuple[Any, Any, bool]:
    """Apply ``fn(old, arg)`` (or ``fn(old)`` when no ``arg``) for batch ``txid`` to a
    stored ``{txid, val}``.

    Returns ``(new_stored, user_value, changed)``.
    """
    if arg is _ONE:
        fn, arg = _call, fn
    if stored is None:
        val = fn(None, arg)
        return {"txid": txid, "val": val}, val, True
    if not isinstance(stored, dict) or "txid" not in stored or "val" not in stored:
        raise StateCorruptError(f"key {key!r} holds {stored!r}, not a TransactionalMap value "
                                "{'txid': ..., 'val': ...}; was it written by something else? "
                                "Use another state name or delete the key")
    st = stored["txid"]
    if st == txid:
        return stored, stored["val"], False  # this batch was already applied
    if st > txid:
        raise StateAheadError(_ahead(key, st, txid))
    val = fn(stored["val"], arg)
    return {"txid": txid, "val": val}, val, True


def opaque_apply(key: Any, stored: Any, txid: int, fn: Combine | Updater, arg: Any = _ONE,
                 attempt: int | None = None,
                 superseded: Mapping[int, Container[int]] = {}) -> tuple[Any, Any, bool]:
    """Apply ``fn(old, arg)`` (or ``fn(old)``) for attempt ``attempt`` of batch ``txid``
    to a stored ``{txid, attempt, curr, prev}``; ``superseded`` maps txid -> attempts
    whose commit failed and was redone by another attempt."""
    if arg is _ONE:
        fn, arg = _call, fn
    if stored is None:
        val = fn(None, arg)
        return {"txid": txid, "attempt": attempt, "curr": val, "prev": None}, val, True
    if not isinstance(stored, dict) or not {"txid", "curr", "prev"} <= stored.keys():
        raise StateCorruptError(f"key {key!r} holds {stored!r}, not an OpaqueMap value "
                                "{'txid': ..., 'curr': ..., 'prev': ...}; was it written by "
                                "something else? Use another state name or delete the key")
    st = stored["txid"]
    if st == txid:  # an earlier attempt of this batch wrote here: rebuild on prev
        prev = stored["prev"]
        val = fn(prev, arg)
        return {"txid": txid, "attempt": attempt, "curr": val, "prev": prev}, val, True
    if st > txid:
        raise StateAheadError(_ahead(key, st, txid))
    base = opaque_committed(stored, superseded)
    val = fn(base, arg)
    return {"txid": txid, "attempt": attempt, "curr": val, "prev": base}, val, True


def opaque_committed(stored: dict, superseded: Mapping[int, Container[int]]) -> Any:
    """The committed value of a stored opaque value of an older txid."""
    if stored.get("attempt") is not None and stored["attempt"] in superseded.get(stored["txid"], ()):
        return stored["prev"]
    return stored["curr"]


def _ahead(key: Any, stored_txid: int, txid: int) -> str:
    return (f"key {key!r} was written by txid {stored_txid}, newer than the batch being "
            f"committed (txid {txid}): another driver is writing this state, or the "
            "topology id was reused with fresh coordinator state. Stop the other writer "
            "or use a new topology_id / state name")


COMBINERS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda old, new: new if old is None else old + new,
    "count": lambda old, new: new if old is None else old + new,
    "min": lambda old, new: new if old is None else min(old, new),
    "max": lambda old, new: new if old is None else max(old, new),
    "replace": lambda old, new: new,
}


class MapState(Generic[V]):
    """What a committer uses: Trident's ``MapState`` in Python. Users do not subclass it.

    Call order per batch (the framework calls the first and last around the committer's
    ``finish_batch``): ``begin_commit(txid)``, any ``multi_update``/``multi_get``,
    ``commit(txid)``. Each ``multi_update`` is one read and one write of the backing.
    """

    _apply: Callable[..., tuple[Any, Any, bool]]
    _user_value_key: str

    def __init__(self, backing: MapBacking) -> None:
        self.backing = backing
        self._txid: int | None = None
        self._attempt: int | None = None
        self.superseded: dict[int, set[int]] = {}

    def begin_commit(self, txid: int, attempt: int | None = None,
                     superseded: Mapping[int, Container[int]] | None = None) -> None:
        """Start applying batch ``txid`` (attempt ``attempt``; ``superseded`` as in
        ``opaque_apply``, kept by the coordinator)."""
        self._txid, self._attempt = txid, attempt
        if superseded is not None:
            self.superseded = superseded  # type: ignore[assignment]

    def commit(self, txid: int) -> None:
        self._txid = None

    def multi_get(self, keys: Sequence) -> list[V | None]:
        """Current user values (the wrapper's txid/prev stripped); None where absent."""
        keys = list(keys)
        return [None if s is None else self._user_value(self._check(key, s))
                for key, s in zip(keys, self.backing.multi_get(keys))]

    def _user_value(self, stored: dict) -> Any:
        return stored[self._user_value_key]

    def multi_update(self, keys: Sequence, updaters: Sequence[Updater] | Updater) -> list[V]:
        """Apply ``updaters[i](old_or_None) -> new`` to ``keys[i]`` for the current batch,
        exactly once across replays; returns the new values. One updater may serve all."""
        keys = list(keys)
        if callable(updaters):
            return self._apply_all(keys, _call, [updaters] * len(keys))
        if len(updaters) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(updaters)} updaters")
        return self._apply_all(keys, _call, updaters)

    def multi_combine(self, keys: Sequence, values: Sequence, combiner: str | Combine = "sum") -> list[V]:
        """Fold ``values[i]`` into ``keys[i]`` with a combiner: ``"sum"``, ``"count"``
        (sum of counts), ``"min"``, ``"max"``, ``"replace"`` or ``f(old_or_None, new)``.

        >>> m = TransactionalMap(MemoryMapBacking()); m.begin_commit(1)
        >>> m.multi_combine(["a", "b"], [2, 3])
        [2, 3]
        >>> m.commit(1); m.begin_commit(2); m.multi_combine(["a"], [5], "max")
        [5]
        """
        fn = COMBINERS.get(combiner) if isinstance(combiner, str) else combiner
        if fn is None:
            raise ValueError(f"unknown combiner {combiner!r}; use one of {sorted(COMBINERS)} or a function")
        keys = list(keys)
        if len(values) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        return self._apply_all(keys, fn, values)

    def _apply_all(self, keys: list, fn: Combine, args: Sequence) -> list[V]:
        """One read and (when anything changed) one write of the backing."""
        if self._txid is None:
            raise RuntimeError("map updated outside a commit: update it from a committer's "
                               "finish_batch (the framework calls begin_commit around it)")
        stored = self.backing.multi_get(keys)
        txid, attempt, superseded, apply = self._txid, self._attempt, self.superseded, type(self)._apply
        out_keys, out_vals, result = [], [], []
        for key, s, arg in zip(keys, stored, args):
            new_stored, val, changed = apply(key, s, txid, fn, arg, attempt, superseded)
            result.append(val)
            if changed:
                out_keys.append(key)
                out_vals.append(new_stored)
        if out_keys:
            self.backing.multi_put(out_keys, out_vals)
        return result

    def get(self, key: Any) -> V | None:
        return self.multi_get([key])[0]

    def _check(self, key: Any, stored: Any) -> Any:
        if not isinstance(stored, dict) or "txid" not in stored or self._user_value_key not in stored:
            raise StateCorruptError(f"key {key!r} holds {stored!r}, not a {type(self).__name__} "
                                    "value; use another state name or delete the key")
        return stored


def _call(old: Any, update: Updater) -> Any:
    return update(old)


class TransactionalMap(MapState[V]):
    """Exactly-once map for transactional spouts (a replay re-emits the identical batch).

    >>> m = TransactionalMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_update(["a"], [lambda v: (v or 0) + 1])
    [1]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 1])   # replay of txid 1: skipped
    [1]
    """

    _apply = staticmethod(transactional_apply)
    _user_value_key = "val"


class OpaqueMap(MapState[V]):
    """Exactly-once map for opaque spouts (a replay may emit a different batch).

    >>> m = OpaqueMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_update(["a"], [lambda v: (v or 0) + 5])
    [5]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 3])   # txid 1 again, another batch
    [3]
    """

    _apply = staticmethod(opaque_apply)
    _user_value_key = "curr"

    def _user_value(self, stored: dict) -> Any:
        if self._txid is not None and stored["txid"] == self._txid:
            return stored["curr"]
        return opaque_committed(stored, self.superseded)


# -- backings by URL -----------------------------------------------------------------------

_memory_backings: dict[str, MemoryMapBacking] = {}
_memory_guard = threading.Lock()


def open_map_backing(url: str, namespace: str, **options: Any) -> MapBacking:
    """The backing named by ``url`` for ``namespace`` (``<topology_id>:<state name>``).

    ``memory://`` -> one ``MemoryMapBacking`` per namespace in this process (the driver);
    ``redis://[user:password@]host:port/db`` and ``rediss://`` -> ``RedisMapBacking``.
    """
    scheme = urlparse(url).scheme
    if scheme == "memory":
        with _memory_guard:
            return _memory_backings.setdefault(namespace, MemoryMapBacking())
    if scheme in ("redis", "rediss"):
        from state.redis import RedisMapBacking  # the only redis importer

        return RedisMapBacking.from_url(url, namespace, **options)
    raise ConfigError(f"state URL {url!r} is not supported; use 'memory://' or "
                      "'redis://[user:password@]host:port/db' (or rediss:// for TLS)")


def reset_memory_maps(prefix: str = "") -> None:
    """Forget in-memory maps whose namespace starts with ``prefix``. For tests."""
    with _memory_guard:
        for k in [k for k in _memory_backings if k.startswith(prefix)]:
            del _memory_backings[k]
