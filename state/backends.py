"""One registry of backend URL schemes: which URLs name coordinator state and user state,
how each is checked, and which module opens it.

``TopologyConfig`` validates ``coordination`` and ``state`` with ``check_url``;
``state.base.open_transactional_state``, ``state.map.open_map_backing``,
``state.keyvalue.open_key_value_state`` and ``trident status`` open through ``opener``. A
scheme registered with ``state.user_backing.register_map_backing`` serves maps and
key-value state alike. A backend module is imported only when a URL
of its scheme is opened (``state/zookeeper/`` is the only package importing kazoo,
``state/redis.py`` and ``state/redis_cluster.py`` the only ones importing redis).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlparse

from state.errors import ConfigError

__all__ = ["Backend", "COORDINATION", "USER_STATE", "KEY_VALUE", "backend_for", "check_url", "opener",
           "store_identity"]

#: what a scheme opens: coordinator state, map backings (``USER_STATE``), the
#: ``KeyValueState`` of core stateful bolts (``KEY_VALUE``; same URLs as ``USER_STATE``)
COORDINATION, USER_STATE, KEY_VALUE = "coordination", "state", "key-value"


@dataclass(frozen=True)
class Backend:
    """A URL scheme: what it stores (``COORDINATION`` or ``USER_STATE``), an example URL
    for messages, and the ``module:attribute`` that opens it."""

    scheme: str
    role: str
    example: str
    opens: str
    needs_host: bool = True
    shared: bool = True      # reachable from other processes (executors, other drivers)


BACKENDS: tuple[Backend, ...] = (
    Backend("memory", COORDINATION, "memory://", "state.base:MemoryTransactionalState.open",
            needs_host=False, shared=False),
    Backend("zk", COORDINATION, "zk://host:port[,host:port]/<root>",
            "state.zookeeper:ZooKeeperTransactionalState.from_url"),
    Backend("memory", USER_STATE, "memory://", "state.map:open_memory_backing", needs_host=False, shared=False),
    Backend("redis", USER_STATE, "redis://[user:password@]host:port/db", "state.redis:RedisMapBacking.from_url"),
    Backend("rediss", USER_STATE, "rediss://[user:password@]host:port/db (TLS)",
            "state.redis:RedisMapBacking.from_url"),
    Backend("redis+cluster", USER_STATE, "redis+cluster://[user:password@]host:port,host:port",
            "state.redis_cluster:open_cluster_backing"),
    Backend("memory", KEY_VALUE, "memory://", "state.keyvalue:MemoryKeyValueState.from_url", needs_host=False,
            shared=False),
    Backend("redis", KEY_VALUE, "redis://[user:password@]host:port/db", "state.keyvalue:RedisKeyValueState.from_url"),
    Backend("rediss", KEY_VALUE, "rediss://[user:password@]host:port/db (TLS)",
            "state.keyvalue:RedisKeyValueState.from_url"),
    Backend("redis+cluster", KEY_VALUE, "redis+cluster://[user:password@]host:port,host:port",
            "state.keyvalue:RedisClusterKeyValueState.from_url"),
)


def _choices(role: str) -> str:
    return " or ".join(repr(b.example) for b in BACKENDS if b.role == role)


def backend_for(role: str, url: str) -> Backend:
    """The backend of ``url``'s scheme for ``role``; ``ConfigError`` naming the choices."""
    scheme = urlparse(url).scheme if isinstance(url, str) else None
    for b in BACKENDS:
        if b.role == role and b.scheme == scheme:
            return b
    msg = f"{role} URL {url!r} is not supported; use {_choices(role)}"
    raise ConfigError(msg)


def check_url(role: str, url: str) -> str:
    """``url`` if it names a known backend for ``role`` with a usable address; else
    ``ConfigError`` saying what is wrong and what a right URL looks like."""
    b = backend_for(role, url)
    if not b.needs_host:
        return url
    u = urlparse(url)
    if not u.netloc or not u.netloc.rsplit("@", 1)[-1]:
        msg = f"{role} URL {url!r} names no server; e.g. {b.example!r}"
        raise ConfigError(msg)
    for hp in u.netloc.rsplit("@", 1)[-1].split(","):
        host, _, port = hp.rpartition(":") if ":" in hp else (hp, "", "")
        if port and not port.isdigit():
            msg = f"{role} URL {url!r}: the port of {hp!r} is not a number"
            raise ConfigError(msg)
        if b.scheme == "zk" and (not host or not port):
            msg = f"{role} URL {url!r}: server {hp!r} is not host:port"
            raise ConfigError(msg)
    return url


def store_identity(role: str, url: str) -> dict[str, str]:
    """Which store ``url`` names, with no credentials: ``{"kind": scheme, "location":
    "host:port/db"}`` (Redis: port 6379 and db 0 when the URL leaves them out; ``memory://``:
    location ``""``). Two URLs naming one store give one identity.

    >>> store_identity(USER_STATE, "redis://app:secret@127.0.0.1/2")
    {'kind': 'redis', 'location': '127.0.0.1:6379/2'}
    >>> store_identity(USER_STATE, "memory://")
    {'kind': 'memory', 'location': ''}
    """
    b = backend_for(role, url)
    if not b.needs_host:
        return {"kind": b.scheme, "location": ""}
    u = urlparse(url)
    hosts = u.netloc.rsplit("@", 1)[-1]
    path = "/".join(p for p in u.path.split("/") if p)
    if b.scheme in ("redis", "rediss"):
        hosts = hosts if ":" in hosts else f"{hosts}:6379"
        path = path or "0"
    return {"kind": b.scheme, "location": f"{hosts}/{path}"}


def describe_identity(identity: dict[str, str]) -> str:
    """``store_identity``'s value as a URL without credentials, for messages.

    >>> describe_identity({"kind": "redis", "location": "127.0.0.1:6379/2"})
    'redis://127.0.0.1:6379/2'
    """
    return f"{identity.get('kind')}://{identity.get('location', '')}"


def opener(role: str, url: str) -> Callable[..., Any]:
    """The callable that opens ``url`` (its module imported now)."""
    b = backend_for(role, url)
    module, _, attr = b.opens.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return cast(Callable[..., Any], obj)
