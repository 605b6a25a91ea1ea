"""``KeyValueState``: the state of Storm's stateful bolts, checkpointed in three steps
(docs/design.md §7; Storm's state management).

A bolt's ``put`` and ``delete`` go to *pending* changes. At a checkpoint the framework
calls ``prepare_commit(txid)``: the pending changes become the *prepared* ones, written to
the store beside the committed state (not over it). Once every stateful bolt prepared,
``commit(txid)`` applies the prepared changes to the committed state atomically and
records ``txid``; ``rollback()`` drops pending and prepared changes, back to the last
commit. ``get`` sees pending, then prepared, then committed values.

Recovery after a crash, as Storm's checkpoint spout drives it: a state opened again finds
its prepared changes in the store; if the checkpoint was prepared by every bolt,
``commit(txid)`` applies them, otherwise ``rollback()`` discards them. A commit of a txid
committed before does nothing (a recovery that commits again is harmless).

Providers: ``memory://`` (one store per namespace in this process) and ``redis://``
(a hash of committed values, a hash of prepared ones and the committed txid; the commit
is one MULTI/EXEC). Keys are encoded as the maps encode them (``state/keys.py``), values
as JSON.

**Epoch fencing**, as the maps have it (docs/design.md §5): a state opened with
``fence_scope`` and ``epoch`` (the engine gives the topology id and its driver's epoch)
writes -- prepare, commit, rollback -- only while no newer epoch wrote in that scope, and
raises the scope's fence to its epoch with each write (``raise_fence`` does it alone, at
a driver's start); a write of an older driver is refused with ``LeadershipLostError``,
atomically, whatever it carries. So a driver paused mid-checkpoint and resumed after
another took over commits nothing.

>>> s = open_key_value_state("memory://", "doc:words")
>>> s.put("cat", 2); s.get("cat"), s.get("dog", 0)
(2, 0)
>>> s.prepare_commit(1); s.commit(1); s.committed_txid()
1
>>> s.put("cat", 5); s.rollback(); s.get("cat")
2
"""

from __future__ import annotations

import json
import threading
from typing import Any

from state.errors import ConfigError, LeadershipLostError, StateCorruptError
from state.keys import decode_key, encode_key, hashable_key

_DELETED = object()        # a pending or prepared delete
DELETED = _DELETED         # the same, as subclasses in other modules see it
_TOMBSTONE = b"\x00deleted"  # a prepared delete in Redis (not valid JSON: never a value)
TXID_FIELD = "~txid"       # the prepared txid in the prepare hash (encoded keys never equal it)
FULL_READ_LIMIT = 200_000  # a Redis state of at most this many keys is read whole at its first miss


class KeyValueState:
    """Storm's ``KeyValueState``: ``get(key, default)``, ``put(key, value)``,
    ``delete(key)``, with ``prepare_commit(txid)``, ``commit(txid)`` and ``rollback()``
    for the framework. Subclasses store the committed and the prepared changes."""

    def __init__(self, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None) -> None:
        self.namespace = namespace
        self.fence_scope = fence_scope
        self.epoch = epoch
        self._pending: dict[str, Any] = {}
        # committed values read or written by this state: one writer per namespace (a task),
        # so they stay true until it commits again; ``_complete``: the cache holds them all
        self._cache: dict[str, Any] = {}
        self._complete = False
        prepared = self._load_prepared()
        self._prepared_txid: int | None = prepared[0] if prepared else None
        self._prepared: dict[str, Any] = prepared[1] if prepared else {}

    # -- the bolt's API --------------------------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` as this bolt left it (pending, prepared, then committed)."""
        e = encode_key(key)
        for layer in (self._pending, self._prepared, self._cache):
            if e in layer:
                v = layer[e]
                return default if v is _DELETED else v
        if self._complete:
            return default
        found, v = self._committed(e)
        self._cache[e] = v if found else _DELETED
        return v if found else default

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` (saved at the next checkpoint). Values must be JSON-serializable."""
        self._pending[encode_key(key)] = value

    def delete(self, key: Any) -> None:
        """Remove ``key`` (at the next checkpoint)."""
        self._pending[encode_key(key)] = _DELETED

    # -- the framework's ---------------------------------------------------------------------
    def prepare_commit(self, txid: int) -> None:
        """Write the pending changes to the store as checkpoint ``txid``'s, beside the
        committed state."""
        if self._prepared_txid is not None and self._prepared_txid != txid:
            msg = (f"state {self.namespace!r} holds prepared txid {self._prepared_txid}; commit or roll "
                   f"it back before preparing txid {txid}")
            raise StateCorruptError(msg)
        changes = {**self._prepared, **self._pending}
        self._store_prepared(txid, changes)
        self._prepared_txid, self._prepared, self._pending = txid, changes, {}

    def commit(self, txid: int) -> None:
        """Apply checkpoint ``txid``'s prepared changes to the committed state, at once
        (nothing, if ``txid`` was committed before and nothing is prepared)."""
        if self._prepared_txid is None:
            done = self.committed_txid()
            if done is not None and done >= txid:
                return
            msg = f"state {self.namespace!r}: commit of txid {txid}, which was not prepared"
            raise StateCorruptError(msg)
        if self._prepared_txid != txid:
            msg = f"state {self.namespace!r}: commit of txid {txid}, but txid {self._prepared_txid} is prepared"
            raise StateCorruptError(msg)
        self._store_commit(txid, self._prepared)
        self._cache.update(self._prepared)
        self._prepared_txid, self._prepared = None, {}

    def rollback(self) -> None:
        """Drop the pending and the prepared changes: back to the last commit."""
        self._store_rollback()
        self._pending, self._prepared, self._prepared_txid = {}, {}, None

    def raise_fence(self) -> None:
        """Raise the scope's fence to this state's epoch now (a new driver's first act),
        or raise ``LeadershipLostError`` if a newer epoch holds it."""
        if self.epoch is not None:
            self._store_fence()

    def _refused(self, newer: int) -> LeadershipLostError:
        msg = (f"state {self.namespace!r}: a driver with epoch {newer} has written state of {self.fence_scope!r} "
               f"since this one (epoch {self.epoch}) took the lock; this driver lost its lock and writes nothing more")
        return LeadershipLostError(msg)

    def prepared_txid(self) -> int | None:
        """The txid whose changes are prepared and not committed, if any."""
        return self._prepared_txid

    def committed_txid(self) -> int | None:
        """The last committed txid (None before the first commit)."""
        raise NotImplementedError

    def items(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)`` as this bolt left it (lists in keys come back as tuples)."""
        merged = dict(self._committed_items())
        for layer in (self._prepared, self._pending):
            for e, v in layer.items():
                if v is _DELETED:
                    merged.pop(e, None)
                else:
                    merged[e] = v
        return [(hashable_key(decode_key(e)), v) for e, v in merged.items()]

    # -- storage ---------------------------------------------------------------------------
    def _committed(self, e: str) -> tuple[bool, Any]:
        raise NotImplementedError

    def _committed_items(self) -> list[tuple[str, Any]]:
        raise NotImplementedError

    def _load_prepared(self) -> tuple[int, dict[str, Any]] | None:
        raise NotImplementedError

    def _store_prepared(self, txid: int, changes: dict[str, Any]) -> None:
        raise NotImplementedError

    def _store_commit(self, txid: int, changes: dict[str, Any]) -> None:
        raise NotImplementedError

    def _store_rollback(self) -> None:
        raise NotImplementedError

    def _store_fence(self) -> None:
        raise NotImplementedError


class _MemoryStore:
    def __init__(self) -> None:
        self.committed: dict[str, Any] = {}
        self.txid: int | None = None
        self.prepared: tuple[int, dict[str, Any]] | None = None


_STORES: dict[str, _MemoryStore] = {}
_FENCES: dict[str, int] = {}         # fence scope -> the newest epoch that wrote
_STORES_GUARD = threading.RLock()


class MemoryKeyValueState(KeyValueState):
    """``memory://``: one store per namespace in this process; a state opened again in
    the same process (a restarted run) finds what was committed and prepared."""

    @classmethod
    def from_url(cls, url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 **options: Any) -> MemoryKeyValueState:
        """The state of ``namespace`` in this process (``memory://``; no options)."""
        return cls(namespace, fence_scope=fence_scope, epoch=epoch)

    def __init__(self, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None) -> None:
        with _STORES_GUARD:
            self._store = _STORES.setdefault(namespace, _MemoryStore())
        super().__init__(namespace, fence_scope=fence_scope, epoch=epoch)

    def _store_fence(self) -> None:
        """Check and raise the scope's fence (hold ``_STORES_GUARD``)."""
        if self.epoch is None or self.fence_scope is None:
            return
        with _STORES_GUARD:
            newer = _FENCES.get(self.fence_scope, 0)
            if newer > self.epoch:
                raise self._refused(newer)
            _FENCES[self.fence_scope] = self.epoch

    def committed_txid(self) -> int | None:
        """The last committed txid (None before the first commit)."""
        return self._store.txid

    def _committed(self, e: str) -> tuple[bool, Any]:
        return (True, self._store.committed[e]) if e in self._store.committed else (False, None)

    def _committed_items(self) -> list[tuple[str, Any]]:
        return list(self._store.committed.items())

    def _load_prepared(self) -> tuple[int, dict[str, Any]] | None:
        p = self._store.prepared
        return (p[0], dict(p[1])) if p else None

    def _store_prepared(self, txid: int, changes: dict[str, Any]) -> None:
        with _STORES_GUARD:
            self._store_fence()
            self._store.prepared = (txid, dict(changes))

    def _store_commit(self, txid: int, changes: dict[str, Any]) -> None:
        with _STORES_GUARD:
            self._store_fence()
            self._apply(txid, changes)

    def _apply(self, txid: int, changes: dict[str, Any]) -> None:
        st = self._store
        for e, v in changes.items():
            if v is _DELETED:
                st.committed.pop(e, None)
            else:
                st.committed[e] = v
        st.txid, st.prepared = txid, None

    def _store_rollback(self) -> None:
        with _STORES_GUARD:
            self._store_fence()
            self._store.prepared = None


class RedisKeyValueState(KeyValueState):
    """``redis://``: committed values in the hash ``<namespace>``, prepared changes in
    ``<namespace>:~prepare`` (with the txid under ``~txid``; a delete as a tombstone),
    the last committed txid in ``<namespace>:~txid``. A commit applies the prepared
    changes, drops the prepare hash and records the txid in one MULTI/EXEC. Reads go
    through a cache of the committed values (this state is their only writer); a hash of
    at most ``FULL_READ_LIMIT`` keys is read whole at the first miss, a larger one key by
    key."""

    def __init__(self, client: Any, namespace: str, *, fence_scope: str | None = None,
                 epoch: int | None = None) -> None:
        self.client = client
        self._tried_full = False
        self._hash_key, self._prepare_key, self._txid_key, self._fence_key = self.key_names(namespace, fence_scope)
        super().__init__(namespace, fence_scope=fence_scope, epoch=epoch)

    @staticmethod
    def key_names(namespace: str, fence_scope: str | None) -> tuple[str, str, str, str]:
        """The Redis keys of a state: its hash, its prepare hash, its txid, its fence."""
        return namespace, f"{namespace}:~prepare", f"{namespace}:~txid", f"{fence_scope}:~kvfence"

    @classmethod
    def from_url(cls, url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 **client_options: Any) -> RedisKeyValueState:
        """A state in the Redis at ``url`` (``redis://[user:password@]host:port/db``)."""
        from state.redis import client_from_url

        return cls(client_from_url(url, **client_options), namespace, fence_scope=fence_scope, epoch=epoch)

    def _write(self, ops: Any) -> None:
        """``ops(pipe)`` in one MULTI/EXEC; fenced (module docstring): the fence key is
        WATCHed, read, and raised in the same transaction, so a newer driver's write in
        between makes it read again and refuse."""
        if self.epoch is None or self.fence_scope is None:
            pipe = self.client.pipeline(transaction=True)
            ops(pipe)
            pipe.execute()
            return

        def fenced(pipe: Any) -> None:
            newer = int(pipe.get(self._fence_key) or 0)
            if newer > (self.epoch or 0):
                raise self._refused(newer)
            pipe.multi()
            if newer < (self.epoch or 0):
                pipe.set(self._fence_key, str(self.epoch))
            ops(pipe)

        self.client.transaction(fenced, self._fence_key)

    def _store_fence(self) -> None:
        self._write(lambda pipe: None)

    def committed_txid(self) -> int | None:
        """The last committed txid (None before the first commit)."""
        v = self.client.get(self._txid_key)
        return None if v is None else int(v)

    def _decode(self, e: str, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError as err:
            msg = (f"Redis hash {self.namespace!r} field {e!r} holds {raw[:40]!r}, not the JSON a "
                   "KeyValueState writes; use another namespace or delete the key")
            raise StateCorruptError(msg) from err

    def _committed(self, e: str) -> tuple[bool, Any]:
        if not self._tried_full:
            # a state small enough is read whole at the first miss: one round trip instead
            # of one per key (a word count touches most of its keys in every checkpoint)
            self._tried_full = True
            if self.client.hlen(self._hash_key) <= FULL_READ_LIMIT:
                self._cache.update(self._committed_items())
                self._complete = True
                v = self._cache.get(e, _DELETED)
                return (False, None) if v is _DELETED else (True, v)
        raw = self.client.hget(self._hash_key, e)
        return (False, None) if raw is None else (True, self._decode(e, raw))

    def _committed_items(self) -> list[tuple[str, Any]]:
        return [(k.decode(), self._decode(k.decode(), v)) for k, v in self.client.hgetall(self._hash_key).items()]

    def _load_prepared(self) -> tuple[int, dict[str, Any]] | None:
        raw = self.client.hgetall(self._prepare_key)
        if not raw:
            return None
        txid = int(raw.pop(TXID_FIELD.encode()))
        return txid, {k.decode(): _DELETED if v == _TOMBSTONE else self._decode(k.decode(), v)
                      for k, v in raw.items()}

    def _store_prepared(self, txid: int, changes: dict[str, Any]) -> None:
        fields: dict[str, Any] = {e: _TOMBSTONE if v is _DELETED else json.dumps(v) for e, v in changes.items()}
        fields[TXID_FIELD] = str(txid)

        def ops(pipe: Any) -> None:
            pipe.delete(self._prepare_key)
            pipe.hset(self._prepare_key, mapping=fields)
        self._write(ops)

    def _store_commit(self, txid: int, changes: dict[str, Any]) -> None:
        puts = {e: json.dumps(v) for e, v in changes.items() if v is not _DELETED}
        dels = [e for e, v in changes.items() if v is _DELETED]

        def ops(pipe: Any) -> None:
            if puts:
                pipe.hset(self._hash_key, mapping=puts)
            if dels:
                pipe.hdel(self._hash_key, *dels)
            pipe.delete(self._prepare_key)
            pipe.set(self._txid_key, str(txid))
        self._write(ops)

    def _store_rollback(self) -> None:
        self._write(lambda pipe: pipe.delete(self._prepare_key))


class RedisClusterKeyValueState(RedisKeyValueState):
    """``KeyValueState`` on Redis Cluster: ``RedisKeyValueState``'s keys, each with the hash
    tag of the namespace's topology id (its part before the first ``:``):
    ``{<topology>}<namespace>``, ..., and the fence ``{<topology>}<fence scope>:~kvfence``, so
    a state's commit and its fence check are one MULTI/EXEC on one slot. A topology's
    key-value states share that slot (one node); its map states spread over the cluster."""

    @staticmethod
    def key_names(namespace: str, fence_scope: str | None) -> tuple[str, str, str, str]:
        """The state's keys, in the slot of ``{<topology id>}``."""
        tag = "{" + namespace.split(":", 1)[0] + "}"
        return (f"{tag}{namespace}", f"{tag}{namespace}:~prepare", f"{tag}{namespace}:~txid",
                f"{tag}{fence_scope}:~kvfence")

    @classmethod
    def from_url(cls, url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 **client_options: Any) -> RedisClusterKeyValueState:
        """A state in the cluster at ``url`` (``redis+cluster://host:port,host:port``)."""
        for part in (namespace, fence_scope or ""):
            if "{" in part or "}" in part:
                msg = f"Redis Cluster state: {part!r} has a brace; use names without '{{' and '}}'"
                raise ConfigError(msg)
        from state.redis_cluster import cluster_client_from_url

        return cls(cluster_client_from_url(url, **client_options), namespace, fence_scope=fence_scope, epoch=epoch)


def open_key_value_state(url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                         **options: Any) -> KeyValueState:
    """The ``KeyValueState`` of ``namespace`` (e.g. ``<topology>:<bolt>:<task>``) in the
    store named by ``url`` (``state.backends``: ``memory://``, ``redis://``/``rediss://``,
    ``redis+cluster://``, or a scheme registered with ``register_map_backing``, whose map
    backing then holds it: ``state.keyvalue_map``); its writes fenced by ``epoch`` in
    ``fence_scope`` when both are given (module docstring)."""
    from state.backends import KEY_VALUE, opener

    try:
        open_ = opener(KEY_VALUE, url)
    except ConfigError:
        from state.user_backing import registered_schemes

        msg = (f"no KeyValueState provider for {url!r}; use memory:// or redis://host:port/db "
               f"(redis+cluster://host:port,host:port for a Redis Cluster; known schemes: {registered_schemes()})")
        raise ConfigError(msg) from None
    state: KeyValueState = open_(url, namespace, fence_scope=fence_scope, epoch=epoch, **options)
    return state
