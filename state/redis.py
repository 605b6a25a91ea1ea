"""Redis map backing: one MGET to read a batch, one atomic Lua write to store it (docs/design.md §5).

The only module that imports ``redis`` (its scripts: ``state/redis_scripts.py``). I/O only: the
exactly-once rules live in ``state/map/`` and this backing just stores what they hand it.

Key layout, for a map namespaced ``<topology_id>:<state_name>`` (``<prefix>`` is
``state.keys.key_prefix(namespace)``: ``<topology_id>:<state_name>:`` for a name without
``:``, ``<topology_id>:~<name, % and : percent-encoded>:`` otherwise)::

    <prefix><key>              one Redis string per map key; the value is the serialized
                               wrapper value, e.g. {"txid": 7, "val": 42, "prev": 40}
                               (TransactionalMap) or {"txid": 7, "curr": 42, "prev": 40}
                               (OpaqueMap), or a plain number (CounterMap)
    <prefix>~written:<writer>  OpaqueMap only: the keys its last flush wrote (repair, state/map/)
    <prefix>~applied           CounterMap only: the last txid whose additions it holds
    <prefix>~prior             CounterMap only: a hash, for that txid, of its keys and their
                               values before it (what reads of the txid see, state/map/)
    <fence scope>:~fence       "<epoch>:<txid>": the newest driver epoch and txid that wrote
                               (the engine's fence scope is the topology id, shared by its maps;
                               a backing made by hand fences its own namespace)

The backing receives keys already encoded by the wrappers (``state.keys.encode_key``, the
one definition of key identity): ``str`` keys are used as they are (``wc:counts:apple``)
unless they start with ``~``; every other key is encoded deterministically, so the same
key always lands on the same Redis key from any process, and no two (map, key) pairs
share one (``state.keys.stored_key``).

Round trips: ``multi_get`` is one ``MGET``; ``multi_put`` is one ``EVALSHA`` of
``LUA_FENCED_MSET``, which checks and writes every key of the batch atomically on the
server. A batch of 10,000 keys costs two round trips, never one per key. ``write`` writes
several maps' parts of a txid in one ``EVALSHA`` of ``LUA_FENCED_MULTI`` (all or none).

Fencing: ``multi_put(keys, values, Fence(epoch, txid))`` refuses, atomically and writing
nothing, a write from an older driver epoch whatever its txid (``LeadershipLostError``: a
paused driver resumed after another took over) and a write older than a txid already
written (``StateAheadError``) -- ``state.map.fence_refusal``, executed by the script.
"""

from __future__ import annotations

import importlib
import json
import threading
import types
from collections.abc import Hashable, Sequence
from typing import Any, cast
from urllib.parse import unquote, urlparse

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from state._timing import timed
from state.errors import ConfigError, StateCorruptError, StateUnavailableError
from state.keys import decode_key, encode_key, hashable_key, key_prefix
from state.map import APPLIED_KEY, PRIOR_KEY, CounterRecord, Fence, MapWrite, conflict_error, fence_error, tagged
from state.redaction import redact_url
from state.redis_scripts import LUA_COUNTER_GET, LUA_FENCED_ADD, LUA_FENCED_MSET, LUA_FENCED_MULTI, MSET_CHUNK, Reply
from state.serializers import JSON, JSONSerializer, Serializer, _dumps_batch

__all__ = ["RedisMapBacking", "Serializer", "JSONSerializer", "JSON", "encode_key", "decode_key",
           "client_from_url", "LUA_FENCED_MSET", "LUA_FENCED_ADD", "LUA_FENCED_MULTI"]

#: The suffix of the fence key of a namespace (``<namespace>:~fence``).
FENCE_SUFFIX = "~fence"

_RETRYABLE = (redis.ConnectionError, redis.TimeoutError)


# -- connections -------------------------------------------------------------------------------

def _default_retry() -> Retry:
    # One quick retry on a fresh connection: covers a pooled connection that went stale
    # (Redis restarted) without hiding an outage -- the engine replays the batch anyway.
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2)


def client_from_url(url: str, *, connect_timeout: float = 10.0, **client_options: Any) -> redis.Redis:
    """A ``redis.Redis`` for ``url`` with spark-trident's defaults (bounded timeouts, a short
    retry on a stale connection, bytes replies). For tests and tools; maps use
    ``RedisMapBacking.from_url``."""
    opts = {"socket_connect_timeout": connect_timeout, "socket_timeout": 30.0,
            "retry": _default_retry(), **client_options}
    return redis.Redis(connection_pool=redis.ConnectionPool.from_url(url, **opts))


def _address_of_url(url: str) -> str:
    """``scheme://[user@]host:port/db`` -- never the password."""
    u = urlparse(url)
    if u.scheme not in ("redis", "rediss"):
        msg = (
            f"Redis URL {redact_url(url)!r} must start with redis:// or rediss:// "
            "(e.g. 'redis://[user:password@]host:6379/0')"
        )
        raise ConfigError(msg)
    try:
        port = u.port or 6379
    except ValueError as e:
        msg = f"Redis URL {redact_url(url)!r} has an invalid port: {e}"
        raise ConfigError(msg) from None
    db = (u.path or "/0").lstrip("/") or "0"
    user = f"{unquote(u.username)}@" if u.username else ""
    return f"{u.scheme}://{user}{u.hostname or 'localhost'}:{port}/{db}"


_CONN_KEYS = ("host", "port", "db", "username", "password", "path", "socket_timeout",
              "socket_connect_timeout", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs",
              "ssl_ca_certs", "ssl_ca_path", "ssl_check_hostname", "ssl_password", "ssl_min_version",
              "ssl_ciphers", "client_name", "decode_responses")


def _pool_spec(pool: redis.ConnectionPool) -> dict[str, Any]:
    """A picklable description of ``pool``'s connections (primitive settings only)."""
    kw = {k: v for k, v in pool.connection_kwargs.items() if k in _CONN_KEYS}
    return {"connection_class": pool.connection_class, **kw}


def _address_of_pool(pool: redis.ConnectionPool) -> str:
    kw = pool.connection_kwargs
    if kw.get("path"):
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    user = f"{kw['username']}@" if kw.get("username") else ""
    return f"{scheme}://{user}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


# -- the backing -------------------------------------------------------------------------------

class RedisMapBacking:
    """A ``MapBacking`` over one Redis database: ``multi_get`` is one ``MGET``,
    ``multi_put`` one atomic ``EVALSHA`` (fenced by txid, see the module docstring).

    Usually made by the engine from ``TopologyConfig(state="redis://...")`` through
    ``state.map.open_map_backing``; users wrap it, they do not subclass it::

        backing = RedisMapBacking.from_url("redis://:secret@127.0.0.1:6379/0", "wc:counts")
        counts = TransactionalMap(backing)

    Construction checks the server (``PING``) and raises ``StateUnavailableError`` naming
    the address when it cannot be reached, ``ConfigError`` when the password or ACL user is
    refused. Later I/O errors raise ``StateUnavailableError`` naming the address: the engine
    fails the batch and replays it. Picklable: a copy carries the URL and options, not the
    connection, and connects on first use.
    """

    _client: redis.Redis | None   # None until first use after unpickling (see ``client``)

    def __init__(self, client_or_pool: redis.Redis | redis.ConnectionPool, namespace: str,
                 serializer: Serializer | None = None, *, fenced: bool = True,
                 fence_scope: str | None = None, check: bool = True,
                 connect_timeout: float = 10.0) -> None:
        """Wrap an existing ``redis.Redis`` or ``ConnectionPool``.

        ``namespace``: the key prefix, ``<topology_id>:<state_name>``. ``serializer``: JSON
        when None. ``fenced``: check each write's ``Fence`` (see the module docstring);
        ``fence_scope``: whose fence (``<fence_scope>:~fence``; default the namespace).
        ``check``: PING now (bounded by ``connect_timeout``) and fail fast.
        """
        if isinstance(client_or_pool, redis.ConnectionPool):
            client_or_pool = redis.Redis(connection_pool=client_or_pool)
        if not isinstance(client_or_pool, redis.Redis):
            msg = (
                f"RedisMapBacking needs a redis.Redis or redis.ConnectionPool, "
                f"got {type(client_or_pool).__name__}; or use RedisMapBacking.from_url(url, namespace)"
            )
            raise TypeError(msg)
        pool = client_or_pool.connection_pool
        self._setup(namespace, serializer, fenced, fence_scope, url=None, options=_pool_spec(pool),
                    address=_address_of_pool(pool))
        self._client = client_or_pool
        if check:
            self.check(connect_timeout)

    @classmethod
    def from_url(cls, url: str, namespace: str, *, serializer: Serializer | None = None,
                 connect_timeout: float = 10.0, fenced: bool = True, fence_scope: str | None = None,
                 check: bool = True, **client_options: Any) -> RedisMapBacking:
        """The backing for ``redis://[[user]:password@]host:port/db`` (``rediss://`` for TLS;
        query options as redis-py's ``from_url``, e.g. ``?ssl_ca_certs=/path/ca.pem``).

        ``client_options`` go to ``redis.ConnectionPool.from_url`` (e.g. ``socket_timeout``,
        default 30 s; ``retry``, default two quick retries on a dropped connection).
        Raises ``StateUnavailableError`` within about ``connect_timeout`` seconds when the
        server cannot be reached, ``ConfigError`` on a refused password.
        """
        address = _address_of_url(url)
        self = cls.__new__(cls)
        opts = {"socket_connect_timeout": connect_timeout, "socket_timeout": 30.0,
                "retry": _default_retry(), **client_options}
        self._setup(namespace, serializer, fenced, fence_scope, url=url, options=opts, address=address)
        if check:
            self.check(connect_timeout)
        return self

    def _setup(self, namespace: str, serializer: Serializer | None, fenced: bool,
               fence_scope: str | None, *, url: str | None, options: dict[str, Any],
               address: str) -> None:
        if not isinstance(namespace, str) or not namespace:
            msg = f"namespace must be a non-empty str such as 'topology:counts', got {namespace!r}"
            raise ConfigError(msg)
        serializer = JSON if serializer is None else serializer
        if not (callable(getattr(serializer, "dumps", None)) and callable(getattr(serializer, "loads", None))):
            msg = f"serializer {serializer!r} needs dumps(value) -> bytes and loads(bytes) -> value"
            raise ConfigError(msg)
        self.namespace = namespace
        self.serializer = serializer
        self.fenced = fenced
        self.address = address
        self._url = url
        self._options = options
        self.fence_scope = fence_scope or namespace
        self._prefix = key_prefix(namespace)     # ConfigError unless '<scope>:<name>'
        self._fence_key = f"{self.fence_scope}:{FENCE_SUFFIX}"
        self._client = None
        self._scripts: dict[str, Any] = {}       # script text -> redis-py Script (``_run``)
        self._lock = threading.Lock()
        self.round_trips = 0  # multi_get/multi_put calls that went to Redis

    # -- connection ------------------------------------------------------------------------------
    @property
    def client(self) -> redis.Redis:
        """The redis-py client (created on first use after unpickling)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._new_client()
        return self._client

    def _new_client(self, **override: Any) -> redis.Redis:
        opts = {**self._options, **override}
        if self._url is not None:
            return redis.Redis(connection_pool=redis.ConnectionPool.from_url(self._url, **opts))
        return redis.Redis(connection_pool=redis.ConnectionPool(**opts))

    def check(self, timeout: float = 10.0) -> None:
        """PING the server and load the write script, giving up after about ``timeout`` s.

        Raises ``StateUnavailableError`` (unreachable, naming the address and the fix) or
        ``ConfigError`` (password or ACL user refused). Called at construction.
        """
        probe = self._new_client(socket_connect_timeout=timeout, socket_timeout=timeout,
                                 retry=Retry(NoBackoff(), 0))
        try:
            probe.ping()
            probe.script_load(LUA_FENCED_MSET)
        except redis.AuthenticationError as e:
            msg = (
                f"Redis at {self.address} refused the credentials ({e}); check the password "
                "(and ACL user) in the state URL: redis://[user]:password@host:port/db"
            )
            raise ConfigError(msg) from None
        except redis.ResponseError as e:
            if "NOPERM" in str(e) or "NOAUTH" in str(e):
                msg = (
                    f"Redis at {self.address} refused PING/SCRIPT for this user ({e}); give the "
                    "ACL user +ping +script|load +evalsha +mget +get +set +mset +type on the "
                    f"keys '{self._prefix}*', or add the password to the state URL"
                )
                raise ConfigError(msg) from None
            msg = f"Redis at {self.address} answered an error to PING: {e}"
            raise StateUnavailableError(msg) from None
        except _RETRYABLE as e:
            fix = ("start redis-server there or fix the state URL (redis://host:port/db)"
                   if "SSL" not in str(e) else "check TLS: the server's certificate must be "
                   "trusted (rediss://host:port/db?ssl_ca_certs=/path/ca.pem) and the server "
                   "must speak TLS on that port")
            msg = f"Redis at {self.address} is unreachable ({e}); {fix}"
            raise StateUnavailableError(msg) from None
        finally:
            probe.connection_pool.disconnect()
        # open the pooled connection now (its handshake), so the first batch costs exactly
        # its two round trips
        self._io("connecting to", self.client.ping)

    def close(self) -> None:
        """Close the pooled connections (a later call reconnects)."""
        if self._client is not None:
            self._client.connection_pool.disconnect()

    # -- MapBacking ------------------------------------------------------------------------------
    @property
    def write_group(self) -> Hashable:
        """Backings with the same ``write_group`` (one server and database) are written
        together, in one script, by ``write``."""
        return ("redis", self.address, self._url)

    def multi_get(self, keys: list[str]) -> list[Any]:
        """Stored values of ``keys`` (encoded keys, see the module docstring; None where
        absent): one ``MGET``."""
        if not keys:
            return []
        prefix = self._prefix
        rkeys = [prefix + k for k in keys]
        self.round_trips += 1
        raw = self._io("reading", self.client.mget, rkeys)
        return [None if r is None else self._load(k, r) for k, r in zip(rkeys, raw, strict=True)]

    def _load(self, rkey: str, raw: bytes) -> Any:
        try:
            return self.serializer.loads(raw)
        except Exception as e:  # any decoding failure: the value is not ours
            msg = (
                f"Redis key {rkey!r} at {self.address} holds {raw[:80]!r}, which "
                f"{self.serializer!r} cannot read ({type(e).__name__}: {e}); was it written "
                "by something else or with another serializer? Use another state name "
                "or delete the key"
            )
            raise StateCorruptError(msg) from None

    #: a write may carry when Redis deletes its keys (``delete_at``: a map with a TTL)
    expires_keys = True

    def multi_put(self, keys: list[str], values: list[Any], fence: Fence | None = None, trusted: int = 0,
                  delete_at: int | None = None) -> None:
        """Store ``values[i]`` at ``keys[i]`` (encoded keys) atomically: one ``EVALSHA``;
        ``delete_at`` (ms since the epoch): Redis deletes them then (``PEXPIREAT``, in the
        same script).
        ``trusted``: the last that many keys are known to hold values of this backing
        (the map read or wrote them in its epoch), so the script skips their type check.

        With a ``fence`` (and ``fenced``, the default) the script first checks it: a newer
        epoch raises ``LeadershipLostError``, a newer txid ``StateAheadError``, and nothing
        is written; otherwise the fence is raised with the write. With no keys, only the
        fence is checked and raised. Raises ``StateCorruptError`` naming the key, writing
        nothing, when a key holds a non-string Redis value (a hash, a list, ...).
        """
        if len(keys) != len(values):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        if not self.fenced:
            fence = None
        if not keys and fence is None:
            return
        self.round_trips += 1
        reply = self._io("writing", self._eval,
                         *self._put_call(keys, self.encode_values(values), fence, trusted, delete_at))
        self._raise_for(reply, fence)

    def encode_values(self, values: list[Any]) -> list[Any]:
        """``values`` serialized as ``multi_put`` stores them (what the serializer raises
        for a value it cannot encode propagates)."""
        dumps = self.serializer.dumps
        return [dumps(v) for v in values]

    def _put_call(self, keys: list[str], data: list[Any], fence: Fence | None,
                  trusted: int, delete_at: int | None = None) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of ``LUA_FENCED_MSET`` storing serialized ``data`` at ``keys``."""
        prefix = self._prefix
        rkeys = [prefix + k for k in keys]
        epoch = "" if fence is None or fence.epoch is None else str(fence.epoch)
        txid = "" if fence is None or fence.txid is None else str(fence.txid)
        claims = None if fence is None else fence.claims
        claims_key = self._fence_key if claims is None else f"{self.fence_scope}:{claims}"
        writer = "" if claims is None or fence is None else str(fence.writer)
        return ([self._fence_key, claims_key, *rkeys],
                [epoch, txid, writer, "" if delete_at is None else str(delete_at), *data, MSET_CHUNK,
                 min(max(trusted, 0), len(keys))])

    def multi_add(self, keys: list[str], deltas: list[Any], fence: Fence) -> bool:
        """Add ``deltas[i]`` to the numbers at ``keys[i]`` (absent: 0), once for
        ``fence.txid``: one ``EVALSHA`` that checks the fence and the namespace's applied
        marker (``<prefix>~applied``, see the module docstring) and writes nothing when the txid was added before
        (returns False) -- ``CounterMap``'s write. Numbers are stored as Redis integers
        (``INCRBY``) or floats (``INCRBYFLOAT``), readable with ``redis-cli GET``. A key
        holding something that is not a number refuses the whole write, every key left as
        it was. With the txid, the same write records the keys' values before it
        (``<prefix>~prior``, see ``counter_get``)."""
        return self._add(*self.encode_deltas(keys, deltas), fence)

    def encode_deltas(self, keys: list[str], deltas: list[Any]) -> tuple[bytes | str, str]:
        """A counter batch as ``LUA_FENCED_ADD`` takes it: the JSON of the full key names
        and the numbers, and ``'int'`` or ``'float'``. ``TypeError`` for a delta that is not
        an int or a float."""
        if len(keys) != len(deltas):
            msg = f"{len(keys)} keys but {len(deltas)} deltas"
            raise ValueError(msg)
        kinds = set(map(type, deltas))        # one pass in C; bool is not a number here
        if not kinds <= {int, float}:
            bad = [d for d in deltas if type(d) not in (int, float)]
            msg = f"a counter map adds numbers; got {bad[:3]!r}"
            raise TypeError(msg)
        mode = "int" if kinds <= {int} else "float"
        prefix = self._prefix
        return _dumps_batch([[prefix + k for k in keys], list(map(str, deltas))]), mode

    def counter_get(self, keys: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        """The numbers at ``keys`` (encoded) and the counter map's record of its last added
        txid: its applied marker and, when that is ``txid`` (a read of a txid added
        already: a replay), the values these keys held before it. One round trip (an
        ``EVALSHA`` of ``LUA_COUNTER_GET``), one consistent snapshot."""
        prefix = self._prefix
        rkeys = [prefix + k for k in keys]
        self.round_trips += 1
        applied, rec, raw = self._io("reading", self._run, LUA_COUNTER_GET,
                                     [prefix + APPLIED_KEY, prefix + PRIOR_KEY, *rkeys], [str(txid)])
        values = [None if r is None else self._load(k, r) for k, r in zip(rkeys, raw, strict=True)]
        try:
            marker = int(applied or 0)
            if not rec or rec[0] is None:
                return values, CounterRecord(marker)
            batch, olds = json.loads(rec[1])[0], json.loads(rec[2])
            olds = olds or []            # cjson encodes an empty array as {}
            want = dict(zip(rkeys, keys, strict=True))
            before = {want[k]: None if v is False else self._load(k, v.encode())
                      for k, v in zip(batch, olds, strict=True) if k in want}
            return values, CounterRecord(marker, int(rec[0]), before)
        except (ValueError, TypeError, IndexError):
            msg = (f"Redis keys {prefix + APPLIED_KEY!r} / {prefix + PRIOR_KEY!r} at {self.address} hold "
                   f"{applied!r} / {rec!r:.200}, not what a counter map writes. Use another state name "
                   "or delete the keys")
            raise StateCorruptError(msg) from None

    def encode_columns(self, keys: Any, deltas: Any) -> tuple[bytes | str, str]:
        """``encode_deltas`` of ``pyarrow`` arrays of keys (plain: none starting with ``~``)
        and integer deltas: the key names and numbers are made by Arrow kernels, not one
        Python object at a time."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = pc.binary_join_element_wise(pa.scalar(self._prefix, keys.type), keys, pa.scalar("", keys.type))
        return _dumps_batch([names.to_pylist(), pc.cast(deltas, pa.string()).to_pylist()]), "int"

    def _add_call(self, batch: bytes | str, mode: str, fence: Fence) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of ``LUA_FENCED_ADD``."""
        epoch = "" if fence.epoch is None else str(fence.epoch)
        txid = "" if fence.txid is None else str(fence.txid)
        return ([self._fence_key, self._prefix + APPLIED_KEY, self._prefix + PRIOR_KEY],
                [epoch, txid, batch, mode])

    def _add(self, batch: bytes | str, mode: str, fence: Fence) -> bool:
        self.round_trips += 1
        reply = self._io("writing", self._run, LUA_FENCED_ADD, *self._add_call(batch, mode, fence))
        if int(reply[0]) == Reply.ADDED_BEFORE:
            return False
        self._raise_for(reply, fence)
        return True

    def write(self, parts: Sequence[MapWrite]) -> None:
        """Write several maps' parts (``MapWrite``: encoded by ``encode_values`` /
        ``encode_deltas`` / ``encode_columns``; backings of this ``write_group``) in one
        atomic step: one ``EVALSHA`` of ``LUA_FENCED_MULTI`` (one part: of its own script).
        A part refused (fence, claims, a key's type or number) raises its error, tagged
        with its map's name, and nothing of any part stays written."""
        calls: list[tuple[MapWrite, RedisMapBacking, str, list[str], list[Any]]] = []
        for p in parts:
            b = cast(RedisMapBacking, p.backing)
            fence = p.fence if b.fenced else None
            if p.op == "put":
                if not p.keys and fence is None:
                    continue
                calls.append((p, b, "put", *b._put_call(p.keys, p.values, fence, p.trusted, p.delete_at)))
            else:
                batch, mode = p.values
                calls.append((p, b, "add", *b._add_call(batch, mode, p.fence)))
        if not calls:
            return
        self.round_trips += 1
        if len(calls) == 1:
            p, b, op, keys, args = calls[0]
            script = LUA_FENCED_MSET if op == "put" else LUA_FENCED_ADD
            with tagged(p.name):
                reply = b._io("writing", b._run, script, keys, args)
                if int(reply[0]) != Reply.ADDED_BEFORE:
                    b._raise_for(reply, p.fence if b.fenced else None)
            return
        calls.sort(key=lambda c: len(c[0].keys))       # the largest part last: the script saves the others
        header = json.dumps([[op, len(keys), len(args)] for _, _, op, keys, args in calls])
        all_keys = [k for c in calls for k in c[3]]
        all_args = [header, *(a for c in calls for a in c[4])]
        with tagged(", ".join(c[0].name for c in calls)):
            reply = self._io("writing", self._run, LUA_FENCED_MULTI, all_keys, all_args)
        if int(reply[0]) != Reply.WRITTEN:
            p, b, *_ = calls[int(reply[0]) - 1]
            with tagged(p.name):
                b._raise_for(reply[1:], p.fence if b.fenced else None)

    def _raise_for(self, reply: Any, fence: Fence | None) -> None:
        """Raise what a write script's refusal means (see the scripts' return codes)."""
        code = int(reply[0])
        if code == Reply.CLAIMED:
            assert fence is not None
            prefix_len = len(self.fence_scope) + 1 if self.namespace.startswith(f"{self.fence_scope}:") else 0
            where = f"map {self.namespace[prefix_len:]!r} (Redis namespace {self.namespace!r} at {self.address})"
            raise conflict_error(where, _s(reply[1])[len(self._prefix):], _s(reply[2]), fence)
        if code in (Reply.TXID_AHEAD, Reply.EPOCH_AHEAD):
            assert fence is not None
            raise fence_error("epoch" if code == Reply.EPOCH_AHEAD else "txid",
                              f"Redis namespace {self.namespace!r} at {self.address}",
                              int(reply[1]), int(reply[2]), fence)
        if code == Reply.NOT_OURS:
            msg = (
                f"Redis key {_s(reply[1])!r} at {self.address} holds a {_s(reply[2])}, not "
                "what RedisMapBacking writes; nothing was overwritten. Use another "
                "state name or delete the key"
            )
            raise StateCorruptError(msg)

    def _eval(self, keys: list[str], args: list[Any]) -> Any:
        return self._run(LUA_FENCED_MSET, keys, args)

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run one of the Lua scripts of ``state.redis_scripts``: redis-py's
        ``register_script`` (``EVALSHA``, loading the script when the server lacks it: a
        restart, ``SCRIPT FLUSH``)."""
        registered = self._scripts.get(script)
        if registered is None:
            registered = self._scripts[script] = self.client.register_script(script)
        return registered(keys=keys, args=args)

    prefix = property(lambda self: self._prefix, doc="This map's Redis key prefix (``state.keys.key_prefix``).")
    fence_key = property(lambda self: self._fence_key, doc="The Redis key of the fence of this map's writes.")

    def run_script(self, what: str, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run Lua ``script`` (``EVALSHA``) with errors mapped as the backing's own calls
        (``StateUnavailableError`` naming the address and ``what``); for ``state.staged``."""
        return self._io(what, self._run, script, keys, args)

    def _io(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            with timed("redis", what.split(" ", 1)[0]):
                return fn(*args)
        except redis.AuthenticationError as e:
            msg = (
                f"Redis at {self.address} refused the credentials while "
                f"{what} {self.namespace!r}: {e}"
            )
            raise StateUnavailableError(msg) from None
        except _RETRYABLE as e:
            msg = (
                f"Redis at {self.address} failed while {what} {self.namespace!r}: "
                f"{type(e).__name__}: {e}; the batch fails and is replayed once Redis is back"
            )
            raise StateUnavailableError(msg) from None
        except redis.ResponseError as e:
            msg = f"Redis at {self.address} refused {what} {self.namespace!r}: {e}"
            raise StateUnavailableError(msg) from None

    # -- inspection --------------------------------------------------------------------------------
    def scan(self, count: int = 1000) -> dict[Any, Any]:
        """Every stored ``key -> value`` of this namespace (SCAN; for tools and tests, not
        for the commit path). Another map's keys never match: a name with ``:`` has a key
        prefix of its own (``state.keys.key_prefix``)."""
        rkeys = self._io("scanning", lambda: [
            _s(k) for k in self.client.scan_iter(match=_glob_escape(self._prefix) + "*", count=count)])
        rkeys = [k for k in rkeys if k != self._fence_key and _is_data_key(k[len(self._prefix):])]
        if not rkeys:
            return {}
        raw = self._io("reading", self.client.mget, rkeys)
        return {hashable_key(decode_key(k[len(self._prefix):])): self._load(k, r)
                for k, r in zip(rkeys, raw, strict=True) if r is not None}

    def clear(self) -> int:
        """Delete every key of this namespace (and its fence, when it is the namespace's
        own); returns how many."""
        keys = list(self.client.scan_iter(match=_glob_escape(self._prefix) + "*", count=1000))
        if self.fence_scope == self.namespace:
            keys += list(self.client.scan_iter(match=_glob_escape(self._fence_key), count=10))
        n = 0
        for i in range(0, len(keys), 1000):
            n += self._io("clearing", self.client.delete, *keys[i:i + 1000])
        return n

    # -- pickling ------------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        ser: Serializer | _ModuleRef = self.serializer
        if isinstance(ser, types.ModuleType):
            ser = _ModuleRef(ser.__name__)
        return {"namespace": self.namespace, "serializer": ser, "fenced": self.fenced,
                "fence_scope": self.fence_scope, "url": self._url, "options": self._options,
                "address": self.address}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ser = state["serializer"]
        if isinstance(ser, _ModuleRef):
            ser = importlib.import_module(ser.name)
        self._setup(state["namespace"], ser, state["fenced"], state["fence_scope"], url=state["url"],
                    options=state["options"], address=state["address"])

    def __repr__(self) -> str:
        return f"RedisMapBacking(namespace={self.namespace!r}, address={self.address!r})"


class _ModuleRef:
    def __init__(self, name: str) -> None:
        self.name = name


def _is_data_key(suffix: str) -> bool:
    """True for the suffix of a map key (not the backing's own ``~written``/``~fence``)."""
    return not suffix.startswith("~") or suffix[1:2] in ("s", "b", "j")


def _glob_escape(s: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
