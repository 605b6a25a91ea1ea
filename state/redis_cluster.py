"""Map states on Redis Cluster (``redis+cluster://host:port,host:port``): a map's keys spread
over the cluster's hash slots, a txid's write taken atomically by each node, fenced per
slot (docs/redis.md, "Redis Cluster").

Key layout: a map key is stored under the same name as on one Redis
(``<prefix><key>``, ``state/redis.py``), so keys spread over every slot. What the
single-server layout keeps once per namespace is kept once per slot, in that slot (a
hash tag ``{<tag>}`` whose CRC16 is the slot)::

    <scope>:~fence{<tag>}          the fence of the slot: "<epoch>:<txid>"
    <scope>:~claims:<t>:<a>{<tag>} claims of an attempt's writers, per slot
    <prefix>~applied{<tag>}        CounterMap: the last txid added to the slot's keys
    <prefix>~prior{<tag>}          CounterMap: that txid's record, for the slot's keys

A write (``write``) groups every map's keys by slot (a part: one map, one slot, with the
slot's fence) and the parts by the node serving the slot, and sends each node one
``EVALSHA`` of ``LUA_CLUSTER_MULTI``, all nodes at once (a thread per node): each node
checks every part's fence and takes all its parts or none. ``wait_replicas`` (default 1)
makes each node's write wait (``WAIT``) until that many replicas have it before the call
returns, so a failover after the txid is recorded does not lose it; a node whose
replicas do not all take it within ``wait_timeout`` is written again (idempotently)
until they do or ``retry_timeout`` passes. A shard whose replica is down therefore stalls
the commit (the batch fails and is replayed) until a replica is back: a master alone
could acknowledge a write that a failover then loses (``wait_replicas=0`` accepts that). A node that answers
``MOVED``/``ASK``/``TRYAGAIN``, an error about a key it no longer serves, or no answer
(a master that died) is retried, after the slot map is read again, until
``retry_timeout``; then ``StateUnavailableError`` fails the batch, which is replayed: the
parts a node took already are taken again idempotently (per-key txids, per-slot counter
markers).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Hashable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlparse

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, ClusterError, RedisClusterException, TryAgainError

from state.errors import ConfigError, StateCorruptError, StateUnavailableError
from state.map import APPLIED_KEY, PRIOR_KEY, CounterRecord, Fence, MapWrite, tagged
from state.redaction import redact_url
from state.redis import RedisMapBacking, Serializer, _default_retry, _glob_escape, _is_data_key, _s
from state.redis_cluster_scripts import LUA_CLUSTER_COUNTER_GET, LUA_CLUSTER_MULTI
from state.redis_scripts import Reply

__all__ = ["RedisClusterMapBacking", "SlotCounterRecord", "cluster_client_from_url", "open_cluster_backing",
           "parse_cluster_url", "slot_tag", "SLOTS"]

SLOTS = 16384
_TAGS: list[str] = []
_tags_guard = threading.Lock()


def slot_tag(slot: int) -> str:
    """A short string whose hash slot is ``slot``: ``"{" + slot_tag(s) + "}"`` in a key
    puts the key in slot ``s``.

    >>> key_slot(slot_tag(0).encode()), key_slot(slot_tag(16383).encode())
    (0, 16383)
    """
    if not _TAGS:
        with _tags_guard:
            if not _TAGS:
                table: list[str | None] = [None] * SLOTS
                left, i = SLOTS, 0
                while left:
                    tag = f"{i:x}"
                    s = key_slot(tag.encode())
                    if table[s] is None:
                        table[s] = tag
                        left -= 1
                    i += 1
                _TAGS.extend(cast(list[str], table))
    return _TAGS[slot]


def _tagged(key: str, slot: int) -> str:
    return f"{key}{{{slot_tag(slot)}}}"


def parse_cluster_url(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The nodes and credentials of ``redis+cluster://[user:password@]host:port[,host:port...]``.

    >>> parse_cluster_url("redis+cluster://a:1,b:2")
    ([('a', 1), ('b', 2)], {})
    """
    u = urlparse(url)
    example = "'redis+cluster://[user:password@]host:port,host:port'"
    if u.scheme != "redis+cluster":
        msg = f"Redis Cluster URL {redact_url(url)!r} must start with redis+cluster:// (e.g. {example})"
        raise ConfigError(msg)
    creds, _, hosts = u.netloc.rpartition("@")
    nodes = []
    for hp in hosts.split(","):
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit():
            msg = f"Redis Cluster URL {redact_url(url)!r}: node {hp!r} is not host:port (e.g. {example})"
            raise ConfigError(msg)
        nodes.append((host, int(port)))
    if u.path.strip("/") not in ("", "0"):
        msg = f"Redis Cluster URL {redact_url(url)!r} names database {u.path.strip('/')!r}; a cluster has only db 0"
        raise ConfigError(msg)
    auth: dict[str, Any] = {}
    if creds:
        user, _, pw = creds.partition(":")
        auth = {"password": unquote(pw)} if pw else {}
        if user:
            auth["username"] = unquote(user)
    return nodes, auth


def cluster_client_from_url(url: str, *, connect_timeout: float = 10.0, **options: Any) -> RedisCluster:
    """A redis-py ``RedisCluster`` for ``redis+cluster://...`` (bytes replies, bounded
    timeouts); ``StateUnavailableError`` when no node answers."""
    nodes, auth = parse_cluster_url(url)
    opts = {"socket_connect_timeout": connect_timeout, "socket_timeout": 30.0, "retry": _default_retry(),
            **auth, **options}
    try:
        startup = [ClusterNode(h, p) for h, p in nodes]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=startup, **opts)
    except (redis.RedisError, RedisClusterException, OSError) as e:
        if isinstance(e, redis.AuthenticationError):
            msg = f"Redis Cluster {redact_url(url)} refused the credentials ({e}); check the password in the URL"
            raise ConfigError(msg) from None
        msg = (f"Redis Cluster {redact_url(url)} is unreachable ({type(e).__name__}: {e}); start it or fix "
               "the state URL (redis+cluster://host:port,host:port)")
        raise StateUnavailableError(msg) from None


#: errors after which a node's write is tried again on a fresh slot map (nothing was written:
#: the script reads every key before writing, and a redirect runs nothing)
_REROUTE = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "non local key", "LOADING", "READONLY")


_CLUSTER_ERRORS = (ClusterError, RedisClusterException)


@dataclass
class _Part:
    """One map's keys of one slot: what ``LUA_FENCED_MULTI`` takes as a part."""

    write: MapWrite
    backing: RedisClusterMapBacking
    op: str
    slot: int
    keys: list[str]
    args: list[Any]


class RedisClusterMapBacking(RedisMapBacking):
    """A ``MapBacking`` over a Redis Cluster (see the module docstring): ``multi_get`` reads
    each slot's keys from its node, writes go to every node at once, each node's part
    atomic and fenced per slot. Made by the engine from ``state="redis+cluster://..."``;
    picklable like ``RedisMapBacking`` (a copy reconnects on first use)."""

    @classmethod
    def from_url(cls, url: str, namespace: str, *, serializer: Serializer | None = None,
                 connect_timeout: float = 10.0, fenced: bool = True, fence_scope: str | None = None,
                 check: bool = True, wait_replicas: int = 1, wait_timeout: float = 5.0,
                 retry_timeout: float = 30.0, **client_options: Any) -> RedisClusterMapBacking:
        """The backing of ``redis+cluster://[user:password@]host:port[,host:port...]`` (one
        reachable node is enough; the others are found). ``wait_replicas``: replicas each
        node's write waits for (0: none), at most ``wait_timeout`` s; ``retry_timeout``: how long a write follows
        redirects and failovers before the batch fails."""
        nodes, _ = parse_cluster_url(url)
        for part in (namespace, fence_scope or ""):
            if "{" in part or "}" in part:
                msg = (f"Redis Cluster state: {part!r} has a brace, which would pin its keys to one hash "
                       "slot; use a topology id and state names without '{' and '}'")
                raise ConfigError(msg)
        self = cls.__new__(cls)
        opts = {"socket_connect_timeout": connect_timeout, "socket_timeout": 30.0, **client_options}
        address = "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in nodes)
        self._setup(namespace, serializer, fenced, fence_scope, url=url, options=opts, address=address)
        self.wait_replicas, self.wait_timeout, self.retry_timeout = wait_replicas, wait_timeout, retry_timeout
        if check:
            self.check(connect_timeout)
        return self

    # -- connection ------------------------------------------------------------------------------
    def _new_client(self, **override: Any) -> Any:
        assert self._url is not None
        return cluster_client_from_url(self._url, **{**self._options, **override})

    @property
    def cluster(self) -> RedisCluster:
        """The redis-py ``RedisCluster`` (created on first use after unpickling)."""
        return cast(RedisCluster, self.client)

    def check(self, timeout: float = 10.0) -> None:
        """Reach the cluster and PING every master; ``StateUnavailableError`` naming the
        address when it cannot, ``ConfigError`` on refused credentials."""
        client = self.cluster
        self._io("connecting to", lambda: client.ping(target_nodes=RedisCluster.PRIMARIES))

    def close(self) -> None:
        """Close every node's connections (a later call reconnects)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @property
    def write_group(self) -> Hashable:
        """The maps of one cluster are written together: one script per node."""
        return ("redis-cluster", self.address)

    # -- reads -----------------------------------------------------------------------------------
    def multi_get(self, keys: list[str]) -> list[Any]:
        """Stored values of ``keys`` (None where absent): one ``MGET`` per slot, the
        slots of a node pipelined (redis-py's ``mget_nonatomic``)."""
        if not keys:
            return []
        rkeys = [self._prefix + k for k in keys]
        self.round_trips += 1
        raw = self._io("reading", self.cluster.mget_nonatomic, rkeys)
        return [None if r is None else self._load(k, r) for k, r in zip(rkeys, raw, strict=True)]

    def counter_get(self, keys: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        """The numbers at ``keys`` and the counter records of their slots (a
        ``SlotCounterRecord``: each key answered by its own slot's record), one script
        per node."""
        prefix = self._prefix
        by_slot: dict[int, list[int]] = {}
        for i, k in enumerate(keys):
            by_slot.setdefault(key_slot((prefix + k).encode()), []).append(i)
        values: list[Any] = [None] * len(keys)
        records: dict[int, CounterRecord] = {}
        groups = {s: [prefix + keys[i] for i in idx] for s, idx in by_slot.items()}
        self.round_trips += 1
        for slot, (applied, rec, raw) in self._counter_groups(groups, txid):
            for i, r in zip(by_slot[slot], raw, strict=True):
                values[i] = None if r is None else self._load(prefix + keys[i], r)
            records[slot] = self._record(applied, rec, dict(zip(groups[slot], (keys[i] for i in by_slot[slot]),
                                                               strict=True)))
        return values, SlotCounterRecord(records, {k: key_slot((prefix + k).encode()) for k in keys})

    def _record(self, applied: Any, rec: Any, want: dict[str, str]) -> CounterRecord:
        try:
            marker = int(applied or 0)
            if not rec or rec[0] is None:
                return CounterRecord(marker)
            batch, olds = json.loads(rec[1])[0], json.loads(rec[2]) or []
            before = {want[k]: None if v is False else self._load(k, v.encode())
                      for k, v in zip(batch, olds, strict=True) if k in want}
            return CounterRecord(marker, int(rec[0]), before)
        except (ValueError, TypeError, IndexError):
            msg = (f"a counter record of {self.namespace!r} at {self.address} holds {applied!r} / {rec!r:.200}, "
                   "not what a counter map writes. Use another state name or delete the keys")
            raise StateCorruptError(msg) from None

    def _counter_groups(self, groups: dict[int, list[str]], txid: int) -> Iterator[tuple[int, Any]]:
        """Each slot's ``LUA_COUNTER_GET`` reply, one ``LUA_CLUSTER_COUNTER_GET`` per node."""
        prefix = self._prefix

        def args(slots: list[int]) -> list[Any]:
            out: list[Any] = [str(txid)]
            for s in slots:
                ks = [_tagged(prefix + APPLIED_KEY, s), _tagged(prefix + PRIOR_KEY, s), *groups[s]]
                out += [len(ks), *ks]
            return out

        replies = self._on_nodes(list(groups), lambda slots: (LUA_CLUSTER_COUNTER_GET, args(slots), 0), "reading")
        for slots, reply in replies:
            yield from zip(slots, reply, strict=True)

    # -- writes ----------------------------------------------------------------------------------
    def multi_put(self, keys: list[str], values: list[Any], fence: Fence | None = None, trusted: int = 0,
                  delete_at: int | None = None) -> None:
        """Store ``values[i]`` at ``keys[i]``: each node's share atomically, fenced per slot
        (``write``). With no keys and a fence, raise the fence of every slot. ``delete_at``:
        Redis deletes the keys then (a map with a TTL: ``PEXPIREAT`` in the same script)."""
        if len(keys) != len(values):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        f = fence if self.fenced else None
        if not keys and f is None:
            return
        self.write([MapWrite(self.namespace, self, "put", list(keys), self.encode_values(values),
                             f or Fence(None, None), trusted, delete_at=delete_at)])

    def _add(self, batch: bytes | str, mode: str, fence: Fence) -> bool:
        """Counter adds go through ``write``; True (a slot that took the txid before skips it)."""
        self.write([MapWrite(self.namespace, self, "add", [], (batch, mode), fence)])
        return True

    def _slot_parts(self, p: MapWrite) -> list[_Part]:
        """``p`` split by slot, each part with its slot's fence, claims, counter keys."""
        fence = p.fence if self.fenced and (p.fence.epoch is not None or p.fence.txid is not None) else None
        if p.op == "put":
            return self._put_parts(p, fence)
        batch, mode = p.values
        names, deltas = json.loads(batch)
        by_slot: dict[int, tuple[list[str], list[str]]] = {}
        for k, d in zip(names, deltas, strict=True):
            ks, ds = by_slot.setdefault(key_slot(k.encode()), ([], []))
            ks.append(k)
            ds.append(d)
        parts = []
        for s, (ks, ds) in by_slot.items():
            keys, args = self._add_call(json.dumps([ks, ds]), mode, p.fence)
            keys = [_tagged(keys[0], s), _tagged(keys[1], s), _tagged(keys[2], s)]
            parts.append(_Part(p, self, "add", s, keys, args))
        return parts

    def _put_parts(self, p: MapWrite, fence: Fence | None) -> list[_Part]:
        prefix = self._prefix
        n = len(p.keys)
        by_slot: dict[int, list[int]] = {}
        for i, k in enumerate(p.keys):
            by_slot.setdefault(key_slot((prefix + k).encode()), []).append(i)
        if not by_slot and fence is not None:
            by_slot = {s: [] for s in range(SLOTS)}     # only the fence: raise it in every slot
        parts = []
        first_trusted = n - max(0, min(p.trusted, n))
        for s, idx in by_slot.items():
            trusted = sum(1 for i in idx if i >= first_trusted)
            idx.sort(key=lambda i: i >= first_trusted)          # the trusted keys last, as the script expects
            keys, args = self._put_call([p.keys[i] for i in idx], [p.values[i] for i in idx], fence, trusted,
                                        p.delete_at)
            claims = keys[1] if keys[1] != keys[0] else None
            keys[0] = _tagged(keys[0], s)
            keys[1] = keys[0] if claims is None else _tagged(claims, s)
            parts.append(_Part(p, self, "put", s, keys, args))
        return parts

    def write(self, parts: Sequence[MapWrite]) -> None:
        """Write several maps' parts of a txid: split by slot, one ``LUA_CLUSTER_MULTI`` per
        node, the nodes at once (module docstring). A part refused (fence, claims, a key's
        type) raises its error, tagged with its map's name: nothing of the refusing
        node's parts is written (other nodes may have taken theirs: the batch fails and
        its replay takes them again, idempotently)."""
        by_slot: dict[int, list[_Part]] = {}
        for p in parts:
            b = cast(RedisClusterMapBacking, p.backing)
            for sp in b._slot_parts(p):
                by_slot.setdefault(sp.slot, []).append(sp)
        if not by_slot:
            return
        self.round_trips += 1

        def call(slots: list[int]) -> tuple[str, list[Any], int]:
            ps = sorted((sp for s in slots for sp in by_slot[s]), key=lambda sp: len(sp.keys))
            header = json.dumps([[sp.op, len(sp.keys), len(sp.args)] for sp in ps])
            keys = [k for sp in ps for k in sp.keys]
            calls[tuple(slots)] = ps
            return LUA_CLUSTER_MULTI, [len(keys), *keys, header, *(a for sp in ps for a in sp.args)], self.wait_replicas

        calls: dict[tuple[int, ...], list[_Part]] = {}
        with tagged(", ".join(dict.fromkeys(p.name for p in parts))):
            replies = self._on_nodes(list(by_slot), call, "writing")
        for slots, reply in replies:
            if int(reply[0]) != Reply.WRITTEN:
                sp = calls[tuple(slots)][int(reply[0]) - 1]
                with tagged(sp.write.name):
                    if int(reply[1]) != Reply.ADDED_BEFORE:
                        sp.backing._raise_for(reply[1:], sp.write.fence if sp.backing.fenced else None)

    # -- per-node calls --------------------------------------------------------------------------
    def on_nodes(self, slots: list[int], make: Any, what: str) -> list[tuple[list[int], Any]]:
        """Run a script on every node serving ``slots``, the nodes at once, re-routed and
        retried as the backing's own writes are: ``make(slots_of_node)`` returns
        ``(script, argv, wait_replicas, anchor)``, ``anchor`` a key of one slot of the node
        (the script is flagged ``allow-cross-slot-keys`` and takes its keys in ARGV).
        Returns ``(slots, reply)`` per node. For modules that add scripts over the same
        layout (``state.staged``)."""
        return self._on_nodes(slots, make, what)

    def _on_nodes(self, slots: list[int], make: Any, what: str) -> list[tuple[list[int], Any]]:
        """Run ``make(slots_of_node) -> (script, argv, wait_replicas)`` on every node serving
        ``slots``, the nodes at once; re-route and retry what a node could not take (module
        docstring) until ``retry_timeout``. Returns ``(slots, reply)`` per node call."""
        deadline = time.monotonic() + self.retry_timeout
        done: list[tuple[list[int], Any]] = []
        pending, delay = slots, 0.05
        while True:
            by_node = self._group_by_node(pending)
            with ThreadPoolExecutor(max_workers=max(1, len(by_node))) as pool:
                results = list(pool.map(lambda item: self._node_call(item[0], item[1], make), by_node.items()))
            pending, errors = [], []
            for (_, node_slots), (reply, err) in zip(by_node.items(), results, strict=True):
                if err is None:
                    done.append((node_slots, reply))
                else:
                    pending += node_slots
                    errors.append(err)
            if not pending:
                return done
            if time.monotonic() + delay > deadline:
                msg = (f"Redis Cluster {self.address} failed while {what} {self.namespace!r}: {errors[0]}; "
                       f"the batch fails and is replayed once the cluster serves every slot")
                raise StateUnavailableError(msg)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            self._refresh()

    def _group_by_node(self, slots: list[int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        nm = self.cluster.nodes_manager
        for s in slots:
            try:
                name = nm.get_node_from_slot(s).name
            except Exception:    # the slot has no master now (a failover under way)
                name = ""
            out.setdefault(name, []).append(s)
        return out

    def _refresh(self) -> None:
        try:
            self.cluster.nodes_manager.initialize()
        except Exception:  # noqa: S110 - the next try reads the map again
            pass

    def _node_call(self, name: str, slots: list[int], make: Any) -> tuple[Any, str | None]:
        """One node's script (and ``WAIT``); ``(reply, None)`` or ``(None, why)`` to retry."""
        if not name:
            return None, "a slot has no master (failover under way)"
        script, args, wait, *given = make(slots)
        node = self.cluster.get_node(node_name=name)  # type: ignore[no-untyped-call]
        conn = self.cluster.get_redis_connection(node)
        anchor = given[0] if given else args[1] if script is LUA_CLUSTER_MULTI else args[2]
        try:
            registered = self._scripts.get(script)
            if registered is None:
                registered = self._scripts[script] = self.cluster.register_script(script)
            pipe = conn.pipeline(transaction=False)
            registered(keys=[anchor], args=args, client=pipe)
            if wait:
                pipe.execute_command("WAIT", wait, int(self.wait_timeout * 1000))  # type: ignore[no-untyped-call]
            out = pipe.execute()
            if wait and int(out[1]) < wait:
                # the node took it, its replicas not yet: run again (idempotent) until they do
                return None, (f"node {name}: only {int(out[1])} of {wait} replicas took the write within "
                              f"{self.wait_timeout} s (WAIT)")
            return out[0], None
        except (redis.ConnectionError, redis.TimeoutError, AskError, TryAgainError, *_CLUSTER_ERRORS) as e:
            return None, f"{type(e).__name__}: {e}"
        except redis.ResponseError as e:
            if any(m in str(e) for m in _REROUTE):
                return None, f"{name}: {e}"
            msg = f"Redis Cluster node {name} refused a write of {self.namespace!r}: {e}"
            raise StateUnavailableError(msg) from None

    def _io(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return super()._io(what, fn, *args)
        except _CLUSTER_ERRORS as e:
            msg = f"Redis Cluster {self.address} failed while {what} {self.namespace!r}: {type(e).__name__}: {e}"
            raise StateUnavailableError(msg) from None

    # -- inspection ------------------------------------------------------------------------------
    def _scan_keys(self, pattern: str) -> list[str]:
        client = self.cluster
        keys: list[str] = []
        for node in client.get_primaries():  # type: ignore[no-untyped-call]
            conn = client.get_redis_connection(node)
            keys += [_s(k) for k in conn.scan_iter(match=pattern, count=1000)]
        return keys

    def scan(self, count: int = 1000) -> dict[Any, Any]:
        """Every stored ``key -> value`` of this map (SCAN on every master; for tools and tests)."""
        from state.keys import decode_key, hashable_key

        rkeys = [k for k in self._scan_keys(_glob_escape(self._prefix) + "*")
                 if _is_data_key(k[len(self._prefix):])]
        if not rkeys:
            return {}
        raw = self._io("reading", self.cluster.mget_nonatomic, rkeys)
        return {hashable_key(decode_key(k[len(self._prefix):])): self._load(k, r)
                for k, r in zip(rkeys, raw, strict=True) if r is not None}

    def clear(self) -> int:
        """Delete every key of this map (and its fences, when the scope is its own)."""
        keys = self._scan_keys(_glob_escape(self._prefix) + "*")
        if self.fence_scope == self.namespace:
            keys += self._scan_keys(_glob_escape(self._fence_key) + "*")
        n = 0
        for i in range(0, len(keys), 1000):
            n += self._io("clearing", self.client.delete, *keys[i:i + 1000])
        return n

    # -- pickling ------------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "wait_replicas": self.wait_replicas, "wait_timeout": self.wait_timeout,
                "retry_timeout": self.retry_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.wait_replicas, self.wait_timeout = state["wait_replicas"], state["wait_timeout"]
        self.retry_timeout = state["retry_timeout"]

    def __repr__(self) -> str:
        return f"RedisClusterMapBacking(namespace={self.namespace!r}, address={self.address!r})"


class SlotCounterRecord(CounterRecord):
    """A counter map's records on a cluster: one per slot (``CounterRecord``), each key
    answered by its slot's. ``applied`` is the newest slot marker: a slot that took txid
    t while another has not yet shows t (what ``CounterMap.multi_get`` reads through the
    cut: keys of slots at t give their before-values)."""

    def __init__(self, records: dict[int, CounterRecord], slots: dict[str, int]) -> None:
        newest = max(records.values(), key=lambda r: r.applied, default=CounterRecord())
        super().__init__(newest.applied, newest.txid, {})
        object.__setattr__(self, "records", records)
        object.__setattr__(self, "slots", slots)

    def get(self, key: str, stored: Any, txid: int) -> Any:
        """The value before ``txid`` of ``key``, by the record of its slot."""
        rec = self.records.get(self.slots.get(key, -1))   # type: ignore[attr-defined]
        return stored if rec is None else rec.get(key, stored, txid)


def open_cluster_backing(url: str, namespace: str, *, fence_scope: str, **options: Any) -> RedisClusterMapBacking:
    """``redis+cluster://...`` for ``state.backends``."""
    return RedisClusterMapBacking.from_url(url, namespace, fence_scope=fence_scope, **options)

