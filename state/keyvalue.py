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

**Time to live** (``ttl=Ttl.of(ttl_secs, ttl_from, grace_secs)``, ``state/map/ttl.py``; the
engine gives a stateful bolt's ``"topology.state.ttl.secs"`` settings): the framework tells
the state the time of the checkpoint its changes go into (``at(time_ms)``: the driver's clock
when that checkpoint opened); a committed key whose expiry is at or before it reads as
absent, and each value a checkpoint writes expires ``ttl`` after the checkpoint's time
(``ttl_from="read"``: a key read is written again, so its expiry moves). The time is stored
with the prepared changes, so a recovery that commits them decides as the first attempt
did, whatever the wall clock says then. The store deletes a key ``grace`` after it expired:
the memory store on its commits, Redis in the commit's MULTI/EXEC (a sorted set of when
each field goes, swept up to ``SWEEP_LIMIT`` fields a commit; Redis 7.0 has no expiry of
a hash's fields). A value with an expiry is stored as ``\x01<exp ms>\x01<JSON>``.

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
from dataclasses import dataclass, field
from typing import Any

from state.errors import ConfigError, LeadershipLostError, StateCorruptError
from state.keys import decode_key, encode_key, hashable_key
from state.map.ttl import Ttl

_DELETED = object()        # a pending or prepared delete
DELETED = _DELETED         # the same, as subclasses in other modules see it
_TOMBSTONE = b"\x00deleted"  # a prepared delete in Redis (not valid JSON: never a value)
TXID_FIELD = "~txid"       # the prepared txid in the prepare hash (encoded keys never equal it)
TIME_FIELD = "~time"       # the prepared checkpoint's time (ms) in the prepare hash
FULL_READ_LIMIT = 200_000  # a Redis state of at most this many keys is read whole at its first miss
SWEEP_LIMIT = 5_000        # expired fields a Redis commit deletes at most
_EXP_MARK = b"\x01"       # a stored value with its expiry: \x01<exp ms>\x01<JSON> (JSON never starts so)


@dataclass
class Prepared:
    """A checkpoint's prepared changes: its txid, the values (``_DELETED`` for a delete),
    each written value's expiry (ms; TTL states) and the checkpoint's time."""

    txid: int
    changes: dict[str, Any]
    exps: dict[str, int] = field(default_factory=dict)
    time_ms: int | None = None


class KeyValueState:
    """Storm's ``KeyValueState``: ``get(key, default)``, ``put(key, value)``,
    ``delete(key)``, with ``prepare_commit(txid)``, ``commit(txid)`` and ``rollback()``
    for the framework (and ``at(time_ms)``, the checkpoint's time, for a state with a
    ``ttl``). Subclasses store the committed and the prepared changes."""

    def __init__(self, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 ttl: Ttl | None = None) -> None:
        self.namespace = namespace
        self.fence_scope = fence_scope
        self.epoch = epoch
        self.ttl = ttl
        #: prefixes of keys the ``ttl`` does not apply to (written without an expiry): the
        #: engine's own records beside the bolt's keys, e.g. a persistent window's
        self.untimed: tuple[str, ...] = ()
        self._now: int | None = None          # the open checkpoint's time (ms), from ``at``
        self._pending: dict[str, Any] = {}
        self._pending_exp: dict[str, int] = {}   # pending puts that keep an expiry of their own (a move)
        self._reads: dict[str, Any] = {}         # ttl_from="read": live committed keys read since the checkpoint
        # committed values read or written by this state: one writer per namespace (a task),
        # so they stay true until it commits again; ``_complete``: the cache holds them all
        self._cache: dict[str, Any] = {}
        self._exp: dict[str, int] = {}           # the expiry of cached committed values that have one
        self._complete = False
        self._prep: Prepared | None = self._load_prepared()

    @property
    def _prepared(self) -> dict[str, Any]:
        return self._prep.changes if self._prep else {}

    # -- the bolt's API --------------------------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key`` as this bolt left it (pending, prepared, then committed; a
        committed value that expired by the checkpoint's time is absent)."""
        e = encode_key(key)
        for layer in (self._pending, self._prepared):
            if e in layer:
                v = layer[e]
                return default if v is _DELETED else v
        if e not in self._cache:
            if self._complete:
                return default
            found, v, exp = self._committed(e)
            self._cache[e] = v if found else _DELETED
            if exp is not None:
                self._exp[e] = exp
        v = self._cache[e]
        if v is _DELETED or self._expired(e):
            return default
        if self.ttl is not None and self.ttl.from_read:
            self._reads[e] = v
        return v

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` (saved at the next checkpoint). Values must be JSON-serializable."""
        e = encode_key(key)
        self._pending[e] = value
        self._pending_exp.pop(e, None)

    def delete(self, key: Any) -> None:
        """Remove ``key`` (at the next checkpoint)."""
        e = encode_key(key)
        self._pending[e] = _DELETED
        self._pending_exp.pop(e, None)

    # -- time to live ----------------------------------------------------------------------
    def at(self, time_ms: int | None) -> None:
        """The time (ms) of the checkpoint the changes from now on go into: reads decide
        expiry by it, the next ``prepare_commit`` stamps it (module docstring)."""
        self._now = time_ms

    def put_expiring(self, key: Any, value: Any, expires_at: int | None) -> None:
        """``put`` keeping an expiry of its own (a key moved to another task keeps its
        time to live); ``expires_at`` None: the checkpoint's, as ``put``."""
        self.put(key, value)
        if expires_at is not None:
            self._pending_exp[encode_key(key)] = expires_at

    def _expired(self, e: str) -> bool:
        exp = self._exp.get(e)
        return exp is not None and self._now is not None and exp <= self._now

    def _stamp(self, changes: dict[str, Any]) -> dict[str, int]:
        """The expiry of each value of ``changes`` written at the checkpoint's time."""
        if self.ttl is None or self._now is None:
            return dict(self._pending_exp)
        exp = self.ttl.expires_at(self._now)
        untimed = self.untimed
        return {e: self._pending_exp.get(e, exp) for e, v in changes.items()
                if v is not _DELETED and not (untimed and e.startswith(untimed))}

    # -- the framework's ---------------------------------------------------------------------
    def prepare_commit(self, txid: int) -> None:
        """Write the pending changes (and, ``ttl_from="read"``, the keys read) to the store
        as checkpoint ``txid``'s, beside the committed state, with the checkpoint's time."""
        prep = self._prep
        if prep is not None and prep.txid != txid:
            msg = (f"state {self.namespace!r} holds prepared txid {prep.txid}; commit or roll "
                   f"it back before preparing txid {txid}")
            raise StateCorruptError(msg)
        new = {**self._reads, **self._pending}
        exps = {**(prep.exps if prep else {}), **self._stamp(new)}
        changes = {**(prep.changes if prep else {}), **new}
        exps = {e: x for e, x in exps.items() if changes.get(e, _DELETED) is not _DELETED}
        time_ms = prep.time_ms if prep and prep.time_ms is not None else self._now
        nxt = Prepared(txid, changes, exps, time_ms)
        self._store_prepared(nxt)
        self._prep, self._pending, self._pending_exp, self._reads = nxt, {}, {}, {}

    def commit(self, txid: int) -> None:
        """Apply checkpoint ``txid``'s prepared changes to the committed state, at once
        (nothing, if ``txid`` was committed before and nothing is prepared)."""
        prep = self._prep
        if prep is None:
            done = self.committed_txid()
            if done is not None and done >= txid:
                return
            msg = f"state {self.namespace!r}: commit of txid {txid}, which was not prepared"
            raise StateCorruptError(msg)
        if prep.txid != txid:
            msg = f"state {self.namespace!r}: commit of txid {txid}, but txid {prep.txid} is prepared"
            raise StateCorruptError(msg)
        for e in self._store_commit(prep):
            self._cache.pop(e, None)
            self._exp.pop(e, None)
        self._cache.update(prep.changes)
        for e in prep.changes:
            if e in prep.exps:
                self._exp[e] = prep.exps[e]
            else:
                self._exp.pop(e, None)
        self._prep = None

    def rollback(self) -> None:
        """Drop the pending and the prepared changes: back to the last commit."""
        self._store_rollback()
        self._pending, self._pending_exp, self._reads, self._prep = {}, {}, {}, None

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
        return self._prep.txid if self._prep else None

    def prepared_time(self) -> int | None:
        """The time (ms) of the prepared checkpoint, as its prepare stored it (TTL states)."""
        return self._prep.time_ms if self._prep else None

    def committed_txid(self) -> int | None:
        """The last committed txid (None before the first commit)."""
        raise NotImplementedError

    def items(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)`` as this bolt left it (lists in keys come back as tuples;
        committed values expired by the checkpoint's time left out)."""
        return [(k, v) for k, v, _ in self.expiring_items()]

    def expiring_items(self) -> list[tuple[Any, Any, int | None]]:
        """``items`` with each value's expiry (ms; None: none, or not written yet)."""
        now = self._now
        merged = {e: (v, exp) for e, v, exp in self._committed_items() if exp is None or now is None or exp > now}
        prep = self._prep
        for layer, exps in ((self._prepared, prep.exps if prep else {}), (self._pending, self._pending_exp)):
            for e, v in layer.items():
                if v is _DELETED:
                    merged.pop(e, None)
                else:
                    merged[e] = (v, exps.get(e))
        return [(hashable_key(decode_key(e)), v, exp) for e, (v, exp) in merged.items()]

    # -- storage ---------------------------------------------------------------------------
    def _committed(self, e: str) -> tuple[bool, Any, int | None]:
        """(found, value, expiry) of ``e`` in the committed state."""
        raise NotImplementedError

    def _committed_items(self) -> list[tuple[str, Any, int | None]]:
        raise NotImplementedError

    def _load_prepared(self) -> Prepared | None:
        raise NotImplementedError

    def _store_prepared(self, prep: Prepared) -> None:
        raise NotImplementedError

    def _store_commit(self, prep: Prepared) -> list[str]:
        """Apply ``prep`` and record its txid at once; the keys deleted as expired (those
        whose expiry plus the grace is at or before the prepared time)."""
        raise NotImplementedError

    def _store_rollback(self) -> None:
        raise NotImplementedError

    def _store_fence(self) -> None:
        raise NotImplementedError


class _MemoryStore:
    def __init__(self) -> None:
        self.committed: dict[str, Any] = {}
        self.exps: dict[str, int] = {}       # committed values' expiries (TTL states)
        self.txid: int | None = None
        self.prepared: Prepared | None = None


_STORES: dict[str, _MemoryStore] = {}
_FENCES: dict[str, int] = {}         # fence scope -> the newest epoch that wrote
_STORES_GUARD = threading.RLock()


class MemoryKeyValueState(KeyValueState):
    """``memory://``: one store per namespace in this process; a state opened again in
    the same process (a restarted run) finds what was committed and prepared."""

    @classmethod
    def from_url(cls, url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 ttl: Ttl | None = None, **options: Any) -> MemoryKeyValueState:
        """The state of ``namespace`` in this process (``memory://``; no options)."""
        return cls(namespace, fence_scope=fence_scope, epoch=epoch, ttl=ttl)

    def __init__(self, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 ttl: Ttl | None = None) -> None:
        with _STORES_GUARD:
            self._store = _STORES.setdefault(namespace, _MemoryStore())
        super().__init__(namespace, fence_scope=fence_scope, epoch=epoch, ttl=ttl)

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

    def _committed(self, e: str) -> tuple[bool, Any, int | None]:
        st = self._store
        return (True, st.committed[e], st.exps.get(e)) if e in st.committed else (False, None, None)

    def _committed_items(self) -> list[tuple[str, Any, int | None]]:
        st = self._store
        return [(e, v, st.exps.get(e)) for e, v in st.committed.items()]

    def _load_prepared(self) -> Prepared | None:
        p = self._store.prepared
        return Prepared(p.txid, dict(p.changes), dict(p.exps), p.time_ms) if p else None

    def _store_prepared(self, prep: Prepared) -> None:
        with _STORES_GUARD:
            self._store_fence()
            self._store.prepared = Prepared(prep.txid, dict(prep.changes), dict(prep.exps), prep.time_ms)

    def _store_commit(self, prep: Prepared) -> list[str]:
        with _STORES_GUARD:
            self._store_fence()
            return self._apply(prep)

    def _apply(self, prep: Prepared) -> list[str]:
        st = self._store
        swept: list[str] = []
        if self.ttl is not None and prep.time_ms is not None:
            gone = prep.time_ms - self.ttl.grace_ms
            swept = [e for e, x in st.exps.items() if x <= gone and e not in prep.changes]
            for e in swept:
                st.committed.pop(e, None)
                st.exps.pop(e, None)
        for e, v in prep.changes.items():
            st.exps.pop(e, None)
            if v is _DELETED:
                st.committed.pop(e, None)
            else:
                st.committed[e] = v
                if e in prep.exps:
                    st.exps[e] = prep.exps[e]
        st.txid, st.prepared = prep.txid, None
        return swept

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
                 epoch: int | None = None, ttl: Ttl | None = None) -> None:
        self.client = client
        self._tried_full = False
        self._hash_key, self._prepare_key, self._txid_key, self._fence_key = self.key_names(namespace, fence_scope)
        self._expires_key = f"{self._hash_key}:~expires"     # TTL states: field -> when Redis deletes it (ms)
        super().__init__(namespace, fence_scope=fence_scope, epoch=epoch, ttl=ttl)

    @staticmethod
    def key_names(namespace: str, fence_scope: str | None) -> tuple[str, str, str, str]:
        """The Redis keys of a state: its hash, its prepare hash, its txid, its fence."""
        return namespace, f"{namespace}:~prepare", f"{namespace}:~txid", f"{fence_scope}:~kvfence"

    @classmethod
    def from_url(cls, url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                 ttl: Ttl | None = None, **client_options: Any) -> RedisKeyValueState:
        """A state in the Redis at ``url`` (``redis://[user:password@]host:port/db``)."""
        from state.redis import client_from_url

        return cls(client_from_url(url, **client_options), namespace, fence_scope=fence_scope, epoch=epoch, ttl=ttl)

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

    def _decode(self, e: str, raw: bytes) -> tuple[Any, int | None]:
        """A stored value and its expiry (module docstring)."""
        exp: int | None = None
        try:
            if raw[:1] == _EXP_MARK:
                stamp, _, raw = raw[1:].partition(_EXP_MARK)
                exp = int(stamp)
            return json.loads(raw), exp
        except ValueError as err:
            msg = (f"Redis hash {self.namespace!r} field {e!r} holds {raw[:40]!r}, not the JSON a "
                   "KeyValueState writes; use another namespace or delete the key")
            raise StateCorruptError(msg) from err

    @staticmethod
    def _encode(v: Any, exp: int | None) -> bytes:
        body = json.dumps(v).encode()
        return body if exp is None else _EXP_MARK + str(exp).encode() + _EXP_MARK + body

    def _committed(self, e: str) -> tuple[bool, Any, int | None]:
        if not self._tried_full:
            # a state small enough is read whole at the first miss: one round trip instead
            # of one per key (a word count touches most of its keys in every checkpoint)
            self._tried_full = True
            if self.client.hlen(self._hash_key) <= FULL_READ_LIMIT:
                for k, v, x in self._committed_items():
                    self._cache[k] = v
                    if x is not None:
                        self._exp[k] = x
                self._complete = True
                v = self._cache.get(e, _DELETED)
                return (False, None, None) if v is _DELETED else (True, v, self._exp.get(e))
        raw = self.client.hget(self._hash_key, e)
        return (False, None, None) if raw is None else (True, *self._decode(e, raw))

    def _committed_items(self) -> list[tuple[str, Any, int | None]]:
        return [(k.decode(), *self._decode(k.decode(), v)) for k, v in self.client.hgetall(self._hash_key).items()]

    def _load_prepared(self) -> Prepared | None:
        raw = self.client.hgetall(self._prepare_key)
        if not raw:
            return None
        txid = int(raw.pop(TXID_FIELD.encode()))
        t = raw.pop(TIME_FIELD.encode(), None)
        prep = Prepared(txid, {}, {}, None if t is None else int(t))
        for k, v in raw.items():
            e = k.decode()
            if v == _TOMBSTONE:
                prep.changes[e] = _DELETED
                continue
            prep.changes[e], exp = self._decode(e, v)
            if exp is not None:
                prep.exps[e] = exp
        return prep

    def _store_prepared(self, prep: Prepared) -> None:
        fields: dict[str, Any] = {e: _TOMBSTONE if v is _DELETED else self._encode(v, prep.exps.get(e))
                                  for e, v in prep.changes.items()}
        fields[TXID_FIELD] = str(prep.txid)
        if prep.time_ms is not None:
            fields[TIME_FIELD] = str(prep.time_ms)

        def ops(pipe: Any) -> None:
            pipe.delete(self._prepare_key)
            pipe.hset(self._prepare_key, mapping=fields)
        self._write(ops)

    def _expired_fields(self, prep: Prepared) -> list[str]:
        """The fields whose deletion time (expiry + grace) is at or before the prepared
        checkpoint's time, at most ``SWEEP_LIMIT`` (this state is their only writer)."""
        if self.ttl is None or prep.time_ms is None:
            return []
        got = self.client.zrangebyscore(self._expires_key, "-inf", prep.time_ms, start=0, num=SWEEP_LIMIT)
        return [f.decode() for f in got if f.decode() not in prep.changes]

    def _store_commit(self, prep: Prepared) -> list[str]:
        puts = {e: self._encode(v, prep.exps.get(e)) for e, v in prep.changes.items() if v is not _DELETED}
        dels = [e for e, v in prep.changes.items() if v is _DELETED]
        swept = self._expired_fields(prep)
        grace = self.ttl.grace_ms if self.ttl is not None else 0
        goes = {e: x + grace for e, x in prep.exps.items() if e in puts}
        unstamped = [e for e in puts if e not in goes] if self.ttl is not None else []

        def ops(pipe: Any) -> None:
            if swept:
                pipe.hdel(self._hash_key, *swept)
            if puts:
                pipe.hset(self._hash_key, mapping=puts)
            if dels:
                pipe.hdel(self._hash_key, *dels)
            if swept or dels or unstamped:
                pipe.zrem(self._expires_key, *swept, *dels, *unstamped)
            if goes:
                pipe.zadd(self._expires_key, goes)
            pipe.delete(self._prepare_key)
            pipe.set(self._txid_key, str(prep.txid))
        self._write(ops)
        return swept

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
                 ttl: Ttl | None = None, **client_options: Any) -> RedisClusterKeyValueState:
        """A state in the cluster at ``url`` (``redis+cluster://host:port,host:port``)."""
        for part in (namespace, fence_scope or ""):
            if "{" in part or "}" in part:
                msg = f"Redis Cluster state: {part!r} has a brace; use names without '{{' and '}}'"
                raise ConfigError(msg)
        from state.redis_cluster import cluster_client_from_url

        return cls(cluster_client_from_url(url, **client_options), namespace, fence_scope=fence_scope, epoch=epoch,
                   ttl=ttl)


def open_key_value_state(url: str, namespace: str, *, fence_scope: str | None = None, epoch: int | None = None,
                         ttl: Ttl | None = None, **options: Any) -> KeyValueState:
    """The ``KeyValueState`` of ``namespace`` (e.g. ``<topology>:<bolt>:<task>``) in the
    store named by ``url`` (``state.backends``: ``memory://``, ``redis://``/``rediss://``,
    ``redis+cluster://``, or a scheme registered with ``register_map_backing``, whose map
    backing then holds it: ``state.keyvalue_map``); its writes fenced by ``epoch`` in
    ``fence_scope`` when both are given; its keys expiring by ``ttl`` (module docstring)."""
    from state.backends import KEY_VALUE, opener

    try:
        open_ = opener(KEY_VALUE, url)
    except ConfigError:
        from state.user_backing import registered_schemes

        msg = (f"no KeyValueState provider for {url!r}; use memory:// or redis://host:port/db "
               f"(redis+cluster://host:port,host:port for a Redis Cluster; known schemes: {registered_schemes()})")
        raise ConfigError(msg) from None
    if ttl is not None:
        options["ttl"] = ttl
    state: KeyValueState = open_(url, namespace, fence_scope=fence_scope, epoch=epoch, **options)
    return state
