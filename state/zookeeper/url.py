"""ZooKeeper URLs and names: ``zk://host:port[,host:port]/<root>``, znode names, and the
server list as kazoo should see it. No kazoo import here."""

from __future__ import annotations

import math
import re
from urllib.parse import parse_qs, urlparse

from state.errors import ConfigError

#: Root znode when the URL names none (``zk://host:2181``).
DEFAULT_ROOT = "trident"
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f/]")


def parse_zk_url(url: str) -> tuple[str, str, dict[str, str]]:
    """Split ``zk://h:p[,h:p]/<root>[?session_timeout=S]`` into (hosts, root, options).

    >>> parse_zk_url("zk://a:2181,b:2181/apps/trident?session_timeout=4")
    ('a:2181,b:2181', 'apps/trident', {'session_timeout': '4'})
    >>> parse_zk_url("zk://localhost:2181")
    ('localhost:2181', 'trident', {})
    """
    parsed = urlparse(url)
    if parsed.scheme != "zk":
        msg = (
            f"coordination URL {url!r} is not a ZooKeeper URL; "
            "use 'zk://host:port[,host:port]/<root>'"
        )
        raise ConfigError(msg)
    if "@" in parsed.netloc:
        msg = (
            f"coordination URL {url!r} carries credentials; pass them as "
            "coordination_auth='user:password' (--coordination-auth) instead, "
            "so they do not show up in logs and status output"
        )
        raise ConfigError(msg)
    hosts = parsed.netloc
    if not hosts or any(not h.strip() for h in hosts.split(",")):
        msg = (
            f"coordination URL {url!r} names no ZooKeeper host; "
            "use 'zk://host:port[,host:port]/<root>'"
        )
        raise ConfigError(msg)
    for h in hosts.split(","):
        _, _, port = h.rpartition(":")
        if ":" in h and not port.isdigit():
            msg = f"coordination URL {url!r}: port of {h!r} is not a number"
            raise ConfigError(msg)
    root = "/".join(p for p in parsed.path.split("/") if p) or DEFAULT_ROOT
    for part in root.split("/"):
        _check_name(part, f"root znode in coordination URL {url!r}")
    if root.split("/")[0] == "zookeeper":
        msg = (
            f"coordination URL {url!r}: /zookeeper is reserved by ZooKeeper; "
            "choose another root"
        )
        raise ConfigError(msg)
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(options) - {"session_timeout"}
    if unknown:
        msg = (
            f"coordination URL {url!r}: unknown option(s) {sorted(unknown)}; "
            "supported: session_timeout"
        )
        raise ConfigError(msg)
    return hosts, root, options


def _check_name(name: str, what: str) -> None:
    if not name or name in (".", "..") or _BAD_NAME.search(name):
        msg = (
            f"{what}: {name!r} is not a valid znode name (no '/', no control "
            "characters, not '.' or '..')"
        )
        raise ConfigError(msg)


CONNECT_ATTEMPT_SECS = 3.0


def _connect_hosts(hosts: str, session_timeout: float) -> str:
    """The server list as kazoo should see it: each server repeated so that one connect
    attempt waits at most about ``CONNECT_ATTEMPT_SECS``.

    kazoo waits ``session_timeout / len(hosts)`` for the answer to a connect request. With
    one server, a reconnect that reaches a restarted ZooKeeper which has opened its port
    but does not serve yet waits out the whole session timeout, and the session expires
    although the server is back within a second (seen in CI when a restart coincided
    with load). Repeating the server bounds each attempt, so the next one comes in time.
    Sessions and the lock are unaffected: it is the same server.
    """
    servers = [h for h in hosts.split(",") if h]
    want = math.ceil(session_timeout / CONNECT_ATTEMPT_SECS)
    if not servers or len(servers) >= want:
        return hosts
    return ",".join(servers * math.ceil(want / len(servers)))

