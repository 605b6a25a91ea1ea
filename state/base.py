"""Coordinator state: a small tree of JSON values per topology (docs/design.md §5).

``TransactionalState`` is what the coordinator reads and writes; backends only do I/O.
Paths are relative to the topology's root (``/<root>/<topology_id>/``) and use ``/``
between parts, e.g. ``"committed"`` or ``"meta/12"``. Values are JSON (dict, list, str,
int, float, bool, None) -- never pickle: nothing read back is ever executed.

The layout the engine keeps (``transactional/engine/store.py`` writes it; docs/zookeeper.md)::

    committed      {"txid": 12, "meta": <meta of 12>, "partitions": {p: latest meta}}
    meta/<txid>    {"meta": ..., "attempts": n, "commit_started": [a, ...]}  uncommitted
    epoch          n: the newest driver epoch (user-state writes are fenced with it)
    maps           {"<name>": "transactional" | "opaque"}: the maps the topology used
    lock           the driver lock (backend specific)

Backends: ``memory://`` (this module; embedded default, not durable) and
``zk://host:port[,host:port]/<root>`` (``state/zookeeper/``).
"""

from __future__ import annotations

import abc
import json
import math
import threading
from collections.abc import Callable
from typing import Any, cast

from state.errors import LockHeldError, StateError, StateValueError

JSON = Any
#: the largest value a znode takes (ZooKeeper's jute.maxbuffer, less room for the request);
#: every backend refuses larger values, so a topology tried on ``memory://`` runs on ZooKeeper
MAX_VALUE_BYTES = 1_000_000
#: what a stored value may hold, for messages
JSON_TYPES = "dicts with string keys, lists, strings, finite numbers, booleans and None"


def json_problem(value: Any, root: str = "") -> str | None:
    """Where and why JSON cannot hold ``value`` -- e.g. ``"['0']['seen'] is a set ({1, 2})"``
    -- or None when it can. The one rule of what coordinator state stores (``encode_json``)
    and of what a spout's coordinator may plan (``transactional.engine.spout_planner``); fields are
    named from ``root``. Tuples are stored as lists, and int, float, bool and None keys
    as strings, as ``json`` does.

    >>> json_problem({"0": {"start": 0, "seen": {1, 2}}}), json_problem({"0": [1.5, None]})
    ("['0']['seen'] is a set ({1, 2})", None)
    """
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return _problem(value, root, set()) or f"{root or 'the value'} is not JSON"
    return None


def _problem(v: Any, where: str, path: set[int]) -> str | None:
    at = where or "the value"
    if v is None or isinstance(v, (str, bool, int)):
        return None
    if isinstance(v, float):
        return None if math.isfinite(v) else f"{at} is {v!r} (JSON has no NaN or infinity)"
    if isinstance(v, (list, tuple, dict)):
        if id(v) in path:
            return f"{at} contains itself (a circular reference)"
        path.add(id(v))
        try:
            return _items_problem(v, where, path)
        finally:
            path.discard(id(v))
    return f"{at} is a {type(v).__name__} ({_short(v)})"


def _items_problem(v: list[Any] | tuple[Any, ...] | dict[Any, Any], where: str, path: set[int]) -> str | None:
    """The first problem of a container's keys (a dict's) and items (``_problem``)."""
    items = v.items() if isinstance(v, dict) else enumerate(v)
    for k, item in items:
        if isinstance(v, dict) and not (k is None or isinstance(k, (str, int, float, bool))):
            return f"{where or 'the value'} has the key {_short(k)} of type {type(k).__name__} (JSON keys are strings)"
        found = _problem(item, f"{where}[{k!r}]", path)
        if found:
            return found
    return None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def encode_json(path: str, value: JSON) -> str:
    """The JSON text every backend stores for ``value`` at ``path``; raises
    ``StateValueError`` naming the path and the field JSON cannot hold, and
    ``StateError`` for a value over ``MAX_VALUE_BYTES`` -- the same on every backend."""
    problem = json_problem(value)
    if problem is not None:
        msg = (f"value for state path {path!r} is not JSON: {problem}; coordinator state holds "
               f"JSON values only ({JSON_TYPES})")
        raise StateValueError(msg)
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    if len(text.encode("utf-8")) > MAX_VALUE_BYTES:
        msg = (f"value for state path {path!r} is {len(text.encode('utf-8'))} bytes; ZooKeeper takes at most "
               f"{MAX_VALUE_BYTES}: keep batch metadata small (offsets, not records)")
        raise StateError(msg)
    return text


class TransactionalState(abc.ABC):
    """The coordinator's durable store for one topology. Users do not subclass this;
    backend authors do.

    The engine calls these from the driver only, from one thread at a time.
    """

    topology_id: str
    #: ``acquire_lock(wait=True)`` waits for the holder to let go (False: it raises at once)
    waits_for_lock: bool = False

    @abc.abstractmethod
    def get(self, path: str) -> JSON | None:
        """The JSON value at ``path``, or None when absent."""

    @abc.abstractmethod
    def set(self, path: str, value: JSON) -> None:
        """Durably write ``value`` at ``path`` (creating parents); returns once durable."""

    @abc.abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path`` and its children; absent is not an error."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names of the direct children of ``path`` (unsorted); [] when absent."""

    @abc.abstractmethod
    def acquire_lock(self, owner: str, *, wait: bool, timeout: float | None) -> None:
        """Become the one driver allowed to commit for this topology.

        ``owner`` names this driver (host:pid) for messages and ``trident status``.
        ``wait=False``: raise ``LockHeldError`` naming the holder at once if held.
        ``wait=True``: block up to ``timeout`` seconds (None: forever), then raise it.
        """

    @abc.abstractmethod
    def release_lock(self) -> None:
        """Give the lock up (idempotent)."""

    def lock_holder(self) -> str | None:
        """Who holds the lock now (the ``owner`` given to ``acquire_lock``), or None."""
        return None

    def check_lock(self) -> None:  # noqa: B027 - optional hook: a lock that cannot be lost needs no check
        """Raise ``LeadershipLostError`` if this driver no longer holds its lock (e.g. its
        ZooKeeper session expired). Called before every commit. Backends that can pause
        (connection suspended) block here until connected again or the lock is lost."""

    def watch(self, path: str, callback: Callable[[JSON | None], None]) -> bool:
        """Call ``callback(value)`` with the value at ``path`` now and whenever it changes
        (None when absent), from a thread of the backend's; False when the backend cannot
        watch (the caller then reads the value itself)."""
        return False

    def close(self) -> None:
        """Release the lock and the connection."""
        self.release_lock()


class MemoryTransactionalState(TransactionalState):
    """The embedded default: a dict in the driver, shared by every run in this process
    for the same topology id (so a second ``run_topology`` continues where the first
    stopped, as a restart with ZooKeeper would). Not durable across processes.

    >>> s = MemoryTransactionalState("demo-doctest")
    >>> s.set("meta/1", {"meta": [0, 3]}); s.get("meta/1"), s.children("meta")
    ({'meta': [0, 3]}, ['1'])
    >>> s.delete("meta")
    """

    _stores: dict[str, dict[str, str]] = {}
    _locks: dict[str, str] = {}
    _watches: dict[tuple[str, str], list[Callable[[JSON | None], None]]] = {}
    _guard = threading.Lock()

    def __init__(self, topology_id: str) -> None:
        self.topology_id = topology_id
        with self._guard:
            self._data = self._stores.setdefault(topology_id, {})
        self._owner: str | None = None

    @classmethod
    def open(cls, url: str, topology_id: str, **options: Any) -> MemoryTransactionalState:
        """``memory://``: the state of ``topology_id`` in this process (no options)."""
        return cls(topology_id)

    @classmethod
    def reset(cls, topology_id: str | None = None) -> None:
        """Forget stored state (all topologies when None). For tests."""
        with cls._guard:
            if topology_id is None:
                cls._stores.clear()
                cls._locks.clear()
                cls._watches.clear()
            else:
                cls._stores.pop(topology_id, None)
                cls._locks.pop(topology_id, None)
                for k in [k for k in cls._watches if k[0] == topology_id]:
                    del cls._watches[k]

    def get(self, path: str) -> JSON | None:
        """The value stored at ``path`` (decoded afresh from its JSON text), or None when absent."""
        raw = self._data.get(_norm(path))
        return None if raw is None else json.loads(raw)

    def set(self, path: str, value: JSON) -> None:
        """Store ``value`` at ``path`` as JSON text (``encode_json``), so a value ZooKeeper
        would refuse fails here too, with the same error."""
        self._data[_norm(path)] = encode_json(path, value)  # JSON on the way in, as ZooKeeper
        for callback in list(self._watches.get((self.topology_id, _norm(path)), ())):
            callback(json.loads(self._data[_norm(path)]))

    def watch(self, path: str, callback: Callable[[JSON | None], None]) -> bool:
        """Call ``callback`` with the value at ``path`` now and on every ``set`` of it
        (in the setting thread)."""
        with self._guard:
            self._watches.setdefault((self.topology_id, _norm(path)), []).append(callback)
        callback(self.get(path))
        return True

    @classmethod
    def topology_ids(cls) -> list[str]:
        """The topology ids with state in this process."""
        with cls._guard:
            return sorted(tid for tid, data in cls._stores.items() if data)

    def delete(self, path: str) -> None:
        """Remove ``path`` and every path below it; absent is not an error."""
        p = _norm(path)
        for k in [k for k in self._data if k == p or k.startswith(p + "/")]:
            del self._data[k]

    def children(self, path: str) -> list[str]:
        """Names of the direct children of ``path``, sorted; [] when absent."""
        p = _norm(path)
        prefix = p + "/" if p else ""
        return sorted({k[len(prefix):].split("/", 1)[0] for k in self._data if k.startswith(prefix)})

    def acquire_lock(self, owner: str, *, wait: bool, timeout: float | None) -> None:
        """Take the topology's lock for ``owner``; raise ``LockHeldError`` at once when another run
        in this process holds it (``wait`` and ``timeout`` are ignored)."""
        with self._guard:
            holder = self._locks.get(self.topology_id)
            if holder is not None and holder != owner:
                msg = (
                    f"topology {self.topology_id!r} is being run by {holder} in this process; "
                    "wait for that run to finish or use another topology_id"
                )
                raise LockHeldError(msg)
            self._locks[self.topology_id] = owner
            self._owner = owner

    def release_lock(self) -> None:
        """Give up the lock if this object holds it (idempotent)."""
        with self._guard:
            if self._owner is not None and self._locks.get(self.topology_id) == self._owner:
                del self._locks[self.topology_id]
            self._owner = None

    def lock_holder(self) -> str | None:
        """The owner holding the topology's lock in this process, or None."""
        return self._locks.get(self.topology_id)

    def check_lock(self) -> None:
        """Never raises: a lock in this process cannot be lost."""
        return None


def _norm(path: str) -> str:
    return "/".join(p for p in path.split("/") if p)


def open_transactional_state(url: str, topology_id: str, **options: Any) -> TransactionalState:
    """The coordinator state named by ``url`` for ``topology_id`` (schemes:
    ``state/backends.py``).

    ``memory://`` -> MemoryTransactionalState; ``zk://h:p[,h:p]/<root>`` ->
    ``state.zookeeper.ZooKeeperTransactionalState`` (``options`` go to it, e.g. ``auth``,
    ``connect_timeout``).
    """
    from state.backends import COORDINATION, opener

    return cast(TransactionalState, opener(COORDINATION, url)(url, topology_id, **options))


def last_committed_txid(coordination: str, topology_id: str) -> int:
    """The last txid ``topology_id`` committed under ``coordination`` (0: none yet): the
    coordinator's ``committed`` record, read once (``trident verify``, ``trident.cut``)."""
    s = open_transactional_state(coordination, topology_id)
    try:
        c = s.get("committed")
        return int(c["txid"]) if c else 0
    finally:
        s.close()
