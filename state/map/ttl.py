"""State that expires: a map's time to live (``Ttl``), decided from the txid's recorded time.

A map opened with ``ttl_secs`` stores, with each value its txid writes, the time it
expires: ``"exp"`` (ms) in the stored dict, the txid's time plus the TTL. The txid's time
is the driver's clock when the txid's first commit began, recorded with the txid's
metadata in the coordinator's state before any user state is written, and reused by
every later attempt of it (``CommitScope.time_ms``; ``CoordinatorStore.commit_time``).
So the decision "has this key expired?" is made against the txid's time, never the wall
clock at a replay: a key that expired and comes back starts from nothing, and a replay of
the same txid decides the same. ``ttl_from="read"``: a key read in a commit (an update or
a state query) is written again by that txid, so its expiry moves as a write's would.

The store also deletes what expired, for space: Redis by ``PEXPIREAT`` in the same script
that writes the value, the memory backing on its writes. It does so ``grace_secs`` after
the logical expiry, so that a key a txid may still read -- the txid's commit runs after
its recorded time; a replay after a crash later still -- is still there: a txid replayed
more than ``ttl + grace`` after its recorded time may find keys deleted that its first
attempt read (docs/operations.md, "State that expires").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.errors import ConfigError

#: the stored field of a wrapper dict holding its expiry (ms since the epoch)
EXPIRES = "exp"
#: how long after its logical expiry a key stays in the store (see the module docstring)
DEFAULT_GRACE_SECS = 600.0
TTL_FROM = ("write", "read")


def configure_ttl(m: Any, ttl: Ttl | None) -> Any:
    """Give map ``m`` its TTL (the first opening decides; one asking for another is
    refused: one name, one TTL). Returns ``m``."""
    if m is None or (ttl is None and m.ttl is None):
        return m
    if ttl is not None and m.ttl is None:
        ttl.check_kind(m.name, m.kind)
        m.ttl = ttl
        return m
    if ttl != m.ttl:
        def show(t: Ttl | None) -> str:
            return "no TTL" if t is None else (f"ttl_secs={t.ms / 1000:g}, ttl_from={'read' if t.from_read else 'write'!r}, "
                                               f"ttl_grace_secs={t.grace_ms / 1000:g}")
        msg = (f"map {m.name!r} is opened with {show(m.ttl)} and asked for with {show(ttl)}: one name, one "
               "TTL; give every opening of the map the same ttl_secs, ttl_from and ttl_grace_secs")
        raise ConfigError(msg)
    return m


@dataclass(frozen=True)
class Ttl:
    """A map's time to live: ``ms`` after the txid that wrote (or, ``from_read``, read) a
    key, the key is gone; the store deletes it ``grace_ms`` later.

    >>> t = Ttl.of(60, "write"); t.expires_at(1_000), t.delete_at(1_000)
    (61000, 661000)
    >>> t.expired({"txid": 1, "val": 2, "exp": 61_000}, 61_000), t.expired({"txid": 1, "val": 2}, 10**12)
    (True, False)
    """

    ms: int
    from_read: bool = False
    grace_ms: int = int(DEFAULT_GRACE_SECS * 1000)

    @classmethod
    def of(cls, ttl_secs: float | None, ttl_from: str = "write", grace_secs: float | None = None) -> Ttl | None:
        """The ``Ttl`` of a map's settings (None: no TTL); ``ConfigError`` for bad ones."""
        if ttl_from not in TTL_FROM:
            msg = f"ttl_from is 'write' or 'read', not {ttl_from!r}"
            raise ConfigError(msg)
        if ttl_secs is None:
            return None
        if isinstance(ttl_secs, bool) or not isinstance(ttl_secs, (int, float)) or not ttl_secs > 0:
            msg = f"ttl_secs is a number of seconds above 0 (or None: no expiry), not {ttl_secs!r}"
            raise ConfigError(msg)
        grace = DEFAULT_GRACE_SECS if grace_secs is None else grace_secs
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
            msg = f"ttl_grace_secs is a number of seconds, 0 or more, not {grace_secs!r}"
            raise ConfigError(msg)
        return cls(int(ttl_secs * 1000), ttl_from == "read", int(grace * 1000))

    def expires_at(self, time_ms: int) -> int:
        """When a key written (or read) by a txid of time ``time_ms`` expires."""
        return time_ms + self.ms

    def delete_at(self, time_ms: int) -> int:
        """When the store deletes it (``expires_at`` + grace)."""
        return time_ms + self.ms + self.grace_ms

    @staticmethod
    def expired(stored: Any, now_ms: int | None) -> bool:
        """True when ``stored`` (a stored wrapper dict) expired by ``now_ms``."""
        if now_ms is None or type(stored) is not dict:
            return False
        exp = stored.get(EXPIRES)
        return exp is not None and exp <= now_ms

    def live(self, stored: list[Any], now_ms: int | None) -> list[Any]:
        """``stored`` with every expired value as None (absent)."""
        if now_ms is None:
            return stored
        return [None if self.expired(s, now_ms) else s for s in stored]

    def check_kind(self, name: str, kind: str) -> None:
        """A counter map adds without reading: it cannot decide an expiry; refused."""
        if kind == "counter":
            msg = (f"map {name!r}: a counter map adds numbers without reading them, so it cannot "
                   "tell an expired key; use transactional(name, ttl_secs=...) for counts that expire")
            raise ConfigError(msg)

    def stamp(self, values: list[Any], time_ms: int | None) -> list[Any]:
        """``values`` (stored wrapper dicts) with their expiry for a txid of ``time_ms``
        (unchanged without a time: a map used outside the engine)."""
        if time_ms is None:
            return values
        exp = self.expires_at(time_ms)
        return [{**v, EXPIRES: exp} if type(v) is dict else v for v in values]
