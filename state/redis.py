"""Redis map backing: one MGET to read a batch, one atomic Lua write to store it (DESIGN §5).

The only module that imports ``redis``. I/O only: the exactly-once rules live in
``state/map.py`` (``TransactionalMap`` / ``OpaqueMap``) and this backing just stores what
they hand it.

Key layout, for a map namespaced ``<topology_id>:<state_name>``::

    <namespace>:<key>          one Redis string per map key; the value is the serialized
                               wrapper value, e.g. {"txid": 7, "val": 42} (TransactionalMap)
                               or {"txid": 7, "curr": 42, "prev": 40} (OpaqueMap)
    <namespace>:~fence         the highest txid ever written to this namespace (fencing)

Map keys that are ``str`` are used as they are (``wc:counts:apple``) unless they start with
``~``; every other key is encoded deterministically (see ``encode_key``), so the same
key always lands on the same Redis key from any process.

Round trips: ``multi_get`` is one ``MGET``; ``multi_put`` is one ``EVALSHA`` of
``LUA_FENCED_MSET``, which checks and writes every key of the batch atomically on the
server. A batch of 10,000 keys costs two round trips, never one per key.

Fencing: ``multi_put`` refuses (``StateAheadError``, nothing written) when the namespace
has already seen a txid newer than the batch's, so a stale writer (a driver that lost its
lock but does not know yet) can never overwrite a newer batch's values -- the same check
the wrappers make per key, made once more atomically at write time for the whole namespace.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
import types
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from transactional.exceptions import ConfigError, StateAheadError, StateCorruptError, StateUnavailableError

__all__ = ["RedisMapBacking", "Serializer", "JSONSerializer", "JSON", "encode_key", "decode_key",
           "client_from_url", "LUA_FENCED_MSET"]

#: Pairs written per ``MSET`` inside the write script (Lua's ``unpack`` has a stack limit).
MSET_CHUNK = 1000
#: The suffix of the fence key of a namespace (``<namespace>:~fence``).
FENCE_SUFFIX = "~fence"

# KEYS[1]        the fence key of the namespace: the highest txid ever written there
# KEYS[2..n+1]   the data keys of the batch
# ARGV[1]        the lowest txid among the values, or '' to write without fencing
# ARGV[2]        the highest txid among the values
# ARGV[3..n+2]   the serialized values, in KEYS order
# ARGV[n+3]      how many pairs to write per MSET (MSET_CHUNK)
# return {0} when every key was written;
#        {1, fence} when the namespace already holds a newer txid (nothing written);
#        {2, key, type} when a data key holds a non-string Redis value (nothing written)
LUA_FENCED_MSET = """
local fenced = ARGV[1] ~= ''
local fence = 0
if fenced then
  fence = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
  if fence > tonumber(ARGV[1]) then
    return {1, tostring(fence)}
  end
end
for i = 2, #KEYS do
  local t = redis.call('TYPE', KEYS[i])['ok']
  if t ~= 'string' and t ~= 'none' then
    return {2, KEYS[i], t}
  end
end
local chunk = {}
for i = 2, #KEYS do
  chunk[#chunk + 1] = KEYS[i]
  chunk[#chunk + 1] = ARGV[i + 1]
  if #chunk >= 2 * tonumber(ARGV[#ARGV]) then
    redis.call('MSET', unpack(chunk))
    chunk = {}
  end
end
if #chunk > 0 then
  redis.call('MSET', unpack(chunk))
end
if fenced and tonumber(ARGV[2]) > fence then
  redis.call('SET', KEYS[1], ARGV[2])
end
return {0}
"""

_SCRIPT_SHA = hashlib.sha1(LUA_FENCED_MSET.encode()).hexdigest()

_RETRYABLE = (redis.ConnectionError, redis.TimeoutError)


# -- serializers -------------------------------------------------------------------------------

@runtime_checkable
class Serializer(Protocol):
    """How stored values become bytes. Any object with these two methods will do
    (``pickle`` itself does, but never unpickle data others can write)."""

    def dumps(self, value: Any) -> bytes | str:
        """The stored form of ``value`` (a wrapper dict such as ``{"txid": 1, "val": 3}``)."""
        ...

    def loads(self, data: bytes) -> Any:
        """The value back from what ``dumps`` returned (Redis hands back bytes)."""
        ...


class JSONSerializer:
    """Compact JSON, the default: readable with ``redis-cli GET``, safe to load.

    Tuples come back as lists and dict keys as strings, as with any JSON store.

    >>> JSON.loads(JSON.dumps({"txid": 1, "val": [1, 2]}))
    {'txid': 1, 'val': [1, 2]}
    """

    _encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    _decode = json.JSONDecoder().decode

    def dumps(self, value: Any) -> bytes:
        return self._encode(value).encode()

    def loads(self, data: bytes | str) -> Any:
        return self._decode(data.decode() if isinstance(data, (bytes, bytearray)) else data)

    def __reduce__(self) -> str:
        return "JSON"  # unpickles as the module-level singleton

    def __repr__(self) -> str:
        return "JSON"


#: The default serializer.
JSON = JSONSerializer()


# -- keys ----------------------------------------------------------------------------------------

def encode_key(key: Any) -> str:
    """The Redis key suffix of a map key: deterministic across processes and runs.

    ``str`` keys stay as they are, unless they start with ``~`` (then ``~s`` is put in
    front); ``bytes`` become ``~b<hex>``; anything else JSON-encodable (int, float, bool,
    None, tuples/lists of those) becomes ``~j<compact JSON>``. So ``"1"`` and ``1`` differ.

    >>> encode_key("apple"), encode_key(1), encode_key(("a", 2)), encode_key("~x")
    ('apple', '~j1', '~j["a",2]', '~s~x')
    """
    if isinstance(key, str):
        return "~s" + key if key.startswith("~") else key
    if isinstance(key, (bytes, bytearray)):
        return "~b" + bytes(key).hex()
    try:
        return "~j" + json.dumps(key, separators=(",", ":"), sort_keys=True, ensure_ascii=False,
                                 allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"map key {key!r} of type {type(key).__name__} cannot be stored in Redis: "
                        "use str, bytes, int, float, bool, None or tuples of those") from e


def decode_key(suffix: str) -> Any:
    """Inverse of ``encode_key`` (tuples come back as lists).

    >>> decode_key("apple"), decode_key("~j1"), decode_key("~s~x")
    ('apple', 1, '~x')
    """
    if not suffix.startswith("~"):
        return suffix
    tag, body = suffix[1:2], suffix[2:]
    if tag == "s":
        return body
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "j":
        return json.loads(body)
    raise ValueError(f"{suffix!r} is not a map key written by RedisMapBacking")


# -- connections -------------------------------------------------------------------------------

def _default_retry() -> Retry:
    # One quick retry on a fresh connection: covers a pooled connection that went stale
    # (Redis restarted) without hiding an outage -- the engine replays the batch anyway.
    return Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=2)


def client_from_url(url: str, *, connect_timeout: float = 10.0, **client_options: Any) -> "redis.Redis":
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
        raise ConfigError(f"Redis URL {_strip_password(url)!r} must start with redis:// or rediss:// "
                          "(e.g. 'redis://[user:password@]host:6379/0')")
    try:
        port = u.port or 6379
    except ValueError as e:
        raise ConfigError(f"Redis URL {_strip_password(url)!r} has an invalid port: {e}") from None
    db = (u.path or "/0").lstrip("/") or "0"
    user = f"{unquote(u.username)}@" if u.username else ""
    return f"{u.scheme}://{user}{u.hostname or 'localhost'}:{port}/{db}"


def _strip_password(url: str) -> str:
    u = urlparse(url)
    if u.password is None:
        return url
    netloc = u.netloc.rsplit("@", 1)[1]
    user = u.username or ""
    return u._replace(netloc=f"{user}:***@{netloc}").geturl()


_CONN_KEYS = ("host", "port", "db", "username", "password", "path", "socket_timeout",
              "socket_connect_timeout", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs",
              "ssl_ca_certs", "ssl_ca_path", "ssl_check_hostname", "ssl_password", "ssl_min_version",
              "ssl_ciphers", "client_name", "decode_responses")


def _pool_spec(pool: "redis.ConnectionPool") -> dict[str, Any]:
    """A picklable description of ``pool``'s connections (primitive settings only)."""
    kw = {k: v for k, v in pool.connection_kwargs.items() if k in _CONN_KEYS}
    return {"connection_class": pool.connection_class, **kw}


def _address_of_pool(pool: "redis.ConnectionPool") -> str:
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

    def __init__(self, client_or_pool: "redis.Redis | redis.ConnectionPool", namespace: str,
                 serializer: Serializer | None = None, *, fenced: bool = True,
                 check: bool = True, connect_timeout: float = 10.0) -> None:
        """Wrap an existing ``redis.Redis`` or ``ConnectionPool``.

        ``namespace``: the key prefix, ``<topology_id>:<state_name>``. ``serializer``: JSON
        when None. ``fenced``: refuse writes older than the namespace's newest txid.
        ``check``: PING now (bounded by ``connect_timeout``) and fail fast.
        """
        if isinstance(client_or_pool, redis.ConnectionPool):
            client_or_pool = redis.Redis(connection_pool=client_or_pool)
        if not isinstance(client_or_pool, redis.Redis):
            raise TypeError(f"RedisMapBacking needs a redis.Redis or redis.ConnectionPool, "
                            f"got {type(client_or_pool).__name__}; or use RedisMapBacking.from_url(url, namespace)")
        pool = client_or_pool.connection_pool
        self._setup(namespace, serializer, fenced, url=None, options=_pool_spec(pool),
                    address=_address_of_pool(pool))
        self._client = client_or_pool
        if check:
            self.check(connect_timeout)

    @classmethod
    def from_url(cls, url: str, namespace: str, *, serializer: Serializer | None = None,
                 connect_timeout: float = 10.0, fenced: bool = True, check: bool = True,
                 **client_options: Any) -> "RedisMapBacking":
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
        self._setup(namespace, serializer, fenced, url=url, options=opts, address=address)
        if check:
            self.check(connect_timeout)
        return self

    def _setup(self, namespace: str, serializer: Serializer | None, fenced: bool, *,
               url: str | None, options: dict[str, Any], address: str) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError(f"namespace must be a non-empty str such as 'topology:counts', got {namespace!r}")
        serializer = JSON if serializer is None else serializer
        if not (callable(getattr(serializer, "dumps", None)) and callable(getattr(serializer, "loads", None))):
            raise ConfigError(f"serializer {serializer!r} needs dumps(value) -> bytes and loads(bytes) -> value")
        self.namespace = namespace
        self.serializer = serializer
        self.fenced = fenced
        self.address = address
        self._url = url
        self._options = options
        self._prefix = namespace + ":"
        self._fence_key = self._prefix + FENCE_SUFFIX
        self._client: redis.Redis | None = None
        self._lock = threading.Lock()
        self.round_trips = 0  # multi_get/multi_put calls that went to Redis

    # -- connection ------------------------------------------------------------------------------
    @property
    def client(self) -> "redis.Redis":
        """The redis-py client (created on first use after unpickling)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._new_client()
        return self._client

    def _new_client(self, **override: Any) -> "redis.Redis":
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
            sha = probe.script_load(LUA_FENCED_MSET)
            assert sha == _SCRIPT_SHA, (sha, _SCRIPT_SHA)
        except redis.AuthenticationError as e:
            raise ConfigError(
                f"Redis at {self.address} refused the credentials ({e}); check the password "
                "(and ACL user) in the state URL: redis://[user]:password@host:port/db") from None
        except redis.ResponseError as e:
            if "NOPERM" in str(e) or "NOAUTH" in str(e):
                raise ConfigError(
                    f"Redis at {self.address} refused PING/SCRIPT for this user ({e}); give the "
                    "ACL user +ping +script|load +evalsha +mget +get +set +mset +type on the "
                    f"keys '{self._prefix}*', or add the password to the state URL") from None
            raise StateUnavailableError(f"Redis at {self.address} answered an error to PING: {e}") from None
        except _RETRYABLE as e:
            fix = ("start redis-server there or fix the state URL (redis://host:port/db)"
                   if "SSL" not in str(e) else "check TLS: the server's certificate must be "
                   "trusted (rediss://host:port/db?ssl_ca_certs=/path/ca.pem) and the server "
                   "must speak TLS on that port")
            raise StateUnavailableError(f"Redis at {self.address} is unreachable ({e}); {fix}") from None
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
    def redis_key(self, key: Any) -> str:
        """The full Redis key of a map key: ``<namespace>:<encode_key(key)>``."""
        return self._prefix + encode_key(key)

    def multi_get(self, keys: list) -> list:
        """Stored values of ``keys`` (None where absent): one ``MGET``."""
        if not keys:
            return []
        rkeys = [self.redis_key(k) for k in keys]
        self.round_trips += 1
        raw = self._io("reading", self.client.mget, rkeys)
        return [None if r is None else self._load(k, r) for k, r in zip(rkeys, raw)]

    def _load(self, rkey: str, raw: bytes) -> Any:
        try:
            return self.serializer.loads(raw)
        except Exception as e:  # any decoding failure: the value is not ours
            raise StateCorruptError(
                f"Redis key {rkey!r} at {self.address} holds {raw[:80]!r}, which "
                f"{self.serializer!r} cannot read ({type(e).__name__}: {e}); was it written "
                "by something else or with another serializer? Use another state name "
                "or delete the key") from None

    def multi_put(self, keys: list, values: list) -> None:
        """Store ``values[i]`` at ``keys[i]`` atomically: one ``EVALSHA``.

        Fenced (default) when every value carries a ``txid`` (the wrappers' values do):
        raises ``StateAheadError`` and writes nothing when the namespace already saw a
        newer txid. Raises ``StateCorruptError`` naming the key, writing nothing, when a key
        holds a non-string Redis value (a hash, a list, ...).
        """
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        if not keys:
            return
        dumps = self.serializer.dumps
        rkeys = [self.redis_key(k) for k in keys]
        data = [dumps(v) for v in values]
        lo = hi = ""
        if self.fenced:
            txids = [v.get("txid") if isinstance(v, dict) else None for v in values]
            if all(isinstance(t, int) and not isinstance(t, bool) for t in txids):
                lo, hi = str(min(txids)), str(max(txids))  # type: ignore[type-var]
        self.round_trips += 1
        reply = self._io("writing", self._eval, [self._fence_key, *rkeys], [lo, hi, *data, MSET_CHUNK])
        code = int(reply[0])
        if code == 1:
            raise StateAheadError(
                f"Redis namespace {self.namespace!r} at {self.address} was already written by "
                f"txid {_s(reply[1])}, newer than this write (txid {lo}): another driver is "
                "writing this state, or the topology id was reused with fresh coordinator "
                "state. Stop the other writer, or use a new topology_id / state name (or "
                f"delete the keys '{self._prefix}*')")
        if code == 2:
            raise StateCorruptError(
                f"Redis key {_s(reply[1])!r} at {self.address} holds a {_s(reply[2])}, not a "
                "string written by RedisMapBacking; nothing was overwritten. Use another "
                "state name or delete the key")

    def _eval(self, keys: list, args: list) -> Any:
        client = self.client
        try:
            return client.evalsha(_SCRIPT_SHA, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:  # server restarted / script cache flushed
            client.script_load(LUA_FENCED_MSET)
            return client.evalsha(_SCRIPT_SHA, len(keys), *keys, *args)

    def _io(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except redis.AuthenticationError as e:
            raise StateUnavailableError(f"Redis at {self.address} refused the credentials while "
                                        f"{what} {self.namespace!r}: {e}") from None
        except _RETRYABLE as e:
            raise StateUnavailableError(
                f"Redis at {self.address} failed while {what} {self.namespace!r}: "
                f"{type(e).__name__}: {e}; the batch fails and is replayed once Redis is back") from None
        except redis.ResponseError as e:
            raise StateUnavailableError(
                f"Redis at {self.address} refused {what} {self.namespace!r}: {e}") from None

    # -- inspection --------------------------------------------------------------------------------
    def scan(self, count: int = 1000) -> dict[Any, Any]:
        """Every stored ``key -> value`` of this namespace (SCAN; for tools and tests, not
        for the commit path). Keys of namespaces nested under this one (``ns:x:...``) are
        included if they decode; keep state names free of ``:`` to avoid that."""
        rkeys = self._io("scanning", lambda: [
            _s(k) for k in self.client.scan_iter(match=_glob_escape(self._prefix) + "*", count=count)])
        rkeys = [k for k in rkeys if k != self._fence_key]
        if not rkeys:
            return {}
        raw = self._io("reading", self.client.mget, rkeys)
        return {_hashable(decode_key(k[len(self._prefix):])): self._load(k, r)
                for k, r in zip(rkeys, raw) if r is not None}

    def clear(self) -> int:
        """Delete every key of this namespace, the fence too; returns how many."""
        keys = list(self.client.scan_iter(match=_glob_escape(self._prefix) + "*", count=1000))
        n = 0
        for i in range(0, len(keys), 1000):
            n += self._io("clearing", self.client.delete, *keys[i:i + 1000])
        return n

    # -- pickling ------------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        ser = self.serializer
        if isinstance(ser, types.ModuleType):
            ser = _ModuleRef(ser.__name__)
        return {"namespace": self.namespace, "serializer": ser, "fenced": self.fenced,
                "url": self._url, "options": self._options, "address": self.address}

    def __setstate__(self, state: dict[str, Any]) -> None:
        ser = state["serializer"]
        if isinstance(ser, _ModuleRef):
            ser = importlib.import_module(ser.name)
        self._setup(state["namespace"], ser, state["fenced"], url=state["url"],
                    options=state["options"], address=state["address"])

    def __repr__(self) -> str:
        return f"RedisMapBacking(namespace={self.namespace!r}, address={self.address!r})"


class _ModuleRef:
    def __init__(self, name: str) -> None:
        self.name = name


def _hashable(k: Any) -> Any:
    return tuple(_hashable(x) for x in k) if isinstance(k, list) else k


def _glob_escape(s: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
