"""Where a map's stored values live: the backing protocol (I/O only), its optional
capabilities (``BackingCapabilities``) and the memory backing."""

from __future__ import annotations

import heapq
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from state.errors import ConfigError, StateCorruptError
from state.keys import decode_key, hashable_key
from state.map.fence import Fence, FenceCell
from state.map.rules import APPLIED_KEY, PRIOR_KEY, CounterRecord
from state.map.write import MapWrite, tagged


@runtime_checkable
class MapBacking(Protocol):
    """Where a map's stored values live. I/O only: no exactly-once logic here.

    The whole contract: these two methods are required; everything else a backing may
    offer is an optional capability, declared below as its own protocol (``GroupWriting``,
    ``EncodesValues``, ``Counting``, ``EncodesDeltas``, ``EncodesColumns``, ``Scanning``,
    ``Closing``) or flag (``remote``, ``expires_keys``), and found once, when a map
    opens over the backing (``BackingCapabilities.of``, kept as ``MapState.caps``).
    Nothing probes a backing after that.

    Keys are the strings of ``state.keys.encode_key`` (the wrappers encode; a ``str`` key
    not starting with ``~`` is its own encoding). Both calls take and return whole
    batches (one round trip each for a remote store). Values are JSON-compatible dicts
    produced by the wrappers.
    """

    def multi_get(self, keys: list[str]) -> list[Any]:
        """Stored values for ``keys``, in order; None where absent."""
        ...

    def multi_put(self, keys: list[str], values: list[Any], fence: Fence | None = None, trusted: int = 0) -> None:
        """Store ``values[i]`` at ``keys[i]``, atomically for the batch. ``trusted``: the
        last that many keys are known to hold this backing's values (a hint that lets a
        backing skip checking them). With a ``fence``,
        first check it against the backing's fence (``fence_refusal``), atomically with
        the write: refused, raise ``fence_error`` and write nothing; else raise the
        backing's fence to it. With no keys, only check and raise the fence."""
        ...


# -- optional capabilities -------------------------------------------------------------------

@runtime_checkable
class GroupWriting(Protocol):
    """Atomic group write: several maps' writes of one txid in one atomic, fenced step
    (``state.map.write_maps``). Backings with equal ``write_group`` are written together
    by the first one's ``write``; without it, each map writes through ``multi_put`` /
    ``multi_add`` on its own."""

    @property
    def write_group(self) -> Hashable:
        """Which backings share one atomic write (one Redis server; one fence's memory maps)."""
        ...

    def write(self, parts: Sequence[MapWrite]) -> None:
        """Write ``parts`` (``MapWrite``: puts and adds) all or none, fences checked first."""
        ...


@runtime_checkable
class EncodesValues(Protocol):
    """A backing that encodes a put's values before any is written, so a value it cannot
    store fails while nothing of the txid is written (``UnstorableValueError``)."""

    def encode_values(self, values: list[Any]) -> Any:
        """``values`` as the backing stores them; raises on a value it cannot store."""
        ...


@runtime_checkable
class Counting(Protocol):
    """A backing that can hold a ``CounterMap``: numbers added once per txid."""

    def counter_get(self, keys: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        """The stored numbers of ``keys`` and the record of the last added txid."""
        ...

    def multi_add(self, keys: list[str], deltas: list[Any], fence: Fence) -> bool:
        """Add ``deltas`` once for ``fence.txid``; False when that txid was added before."""
        ...


@runtime_checkable
class EncodesDeltas(Protocol):
    """A counting backing that encodes a counter map's additions before the write."""

    def encode_deltas(self, keys: list[str], deltas: list[Any]) -> Any:
        """The additions as ``write`` takes them."""
        ...


@runtime_checkable
class EncodesColumns(Protocol):
    """A counting backing that encodes additions straight from ``pyarrow`` arrays
    (distinct string keys, integer deltas), with no Python object per key."""

    def encode_columns(self, keys: Any, deltas: Any) -> Any:
        """The arrays' additions as ``write`` takes them."""
        ...


@runtime_checkable
class Scanning(Protocol):
    """A backing that lists what it holds (``TupleCollectionGet``, ``trident.cut``)."""

    def scan(self) -> dict[Any, Any]:
        """Every stored ``key -> value`` (keys decoded; the wrappers' own records left out)."""
        ...


@runtime_checkable
class Closing(Protocol):
    """A backing holding connections to let go of when its map is closed."""

    def close(self) -> None:
        """Close the backing's connections."""
        ...


@dataclass(frozen=True)
class BackingCapabilities:
    """What a backing can do beyond ``MapBacking``, found once when a map opens over it.

    ``remote``: its values are in another process (a map caches what it reads; default
    True). ``expires_keys``: a put may carry ``delete_at`` (a map with a TTL).
    ``write_group``: the group written atomically together (``GroupWriting``), or None.
    The other fields say which optional protocol the backing implements.

    >>> caps = BackingCapabilities.of(MemoryMapBacking())
    >>> caps.remote, caps.counting, caps.scanning, caps.closing
    (False, True, True, False)
    """

    namespace: str | None
    remote: bool
    expires_keys: bool
    write_group: Hashable | None
    encodes_values: bool
    counting: bool
    encodes_deltas: bool
    encodes_columns: bool
    scanning: bool
    closing: bool

    @classmethod
    def of(cls, backing: Any) -> BackingCapabilities:
        """``backing``'s capabilities; ``ConfigError`` when it lacks a required method."""
        if not isinstance(backing, MapBacking):
            msg = (f"a map backing needs multi_get(keys) and multi_put(keys, values, fence=None, trusted=0) "
                   f"(state.map.MapBacking); got {backing!r}")
            raise ConfigError(msg)
        group = isinstance(backing, GroupWriting)
        namespace = getattr(backing, "namespace", None)
        return cls(
            namespace=namespace if isinstance(namespace, str) else None,
            remote=bool(getattr(backing, "remote", True)),
            expires_keys=bool(getattr(backing, "expires_keys", False)),
            write_group=cast(GroupWriting, backing).write_group if group else None,
            encodes_values=isinstance(backing, EncodesValues),
            counting=isinstance(backing, Counting),
            encodes_deltas=isinstance(backing, EncodesDeltas),
            encodes_columns=isinstance(backing, EncodesColumns),
            scanning=isinstance(backing, Scanning),
            closing=isinstance(backing, Closing),
        )


class MemoryMapBacking:
    """A dict. The embedded default (``state="memory://"``): maps live in the driver.

    >>> m = MemoryMapBacking(); m.multi_put(["a"], [{"txid": 1, "val": 2}]); m.multi_get(["a", "b"])
    [{'txid': 1, 'val': 2}, None]
    """

    #: in this process: a map does not cache what it reads (``MapState._cache``)
    remote = False
    #: a write may carry when the keys are deleted (``delete_at``: a map with a TTL)
    expires_keys = True

    def __init__(self, fence: FenceCell | None = None, namespace: str = "memory map") -> None:
        self.data: dict[Hashable, Any] = {}
        self.fence = fence or FenceCell()
        self.namespace = namespace
        self.round_trips = 0  # multi_get/multi_put calls, like a remote store's
        #: keys with a TTL: (delete_at ms, key) in time order, and each key's latest delete_at
        self._deletions: list[tuple[int, str]] = []
        self._delete_at: dict[str, int] = {}

    @property
    def write_group(self) -> Hashable:
        """Backings with the same ``write_group`` are written together by ``write``: the
        memory maps of one fence (the engine's: one topology), under its lock."""
        return ("memory", id(self.fence))

    def multi_get(self, keys: list[str]) -> list[Any]:
        """Stored values for ``keys``, in order; None where absent (one counted round trip)."""
        self.round_trips += 1
        get = self.data.get
        return [get(k) for k in keys]

    def encode_values(self, values: list[Any]) -> list[Any]:
        """``values`` as this backing stores them (as they are), once checked JSON
        encodable as the Redis backing's default serializer needs (``orjson`` when
        installed, else ``json``): a value the memory backing would keep but Redis could
        not store fails here too."""
        if _orjson is not None:
            try:
                _orjson.dumps(values, option=_orjson.OPT_NON_STR_KEYS)
                return values
            except TypeError:
                pass
        json.dumps(values)
        return values

    def encode_deltas(self, keys: list[str], deltas: list[Any]) -> tuple[list[str], list[Any]]:
        """A counter map's additions as ``write`` takes them."""
        return keys, deltas

    def multi_add(self, keys: list[str], deltas: list[Any], fence: Fence) -> bool:
        """Add numbers once for ``fence.txid`` (see ``RedisMapBacking.multi_add``); False
        when the txid was added before (nothing written)."""
        self.round_trips += 1
        with self.fence.lock:
            what = f"memory map {self.namespace!r}"
            self.fence.check(fence, what)
            if not self._check_add(keys, fence):
                return False
            self._add(keys, deltas, fence)
            self.fence.raise_to(fence)
            return True

    def _check_add(self, keys: list[str], fence: Fence) -> bool:
        """False when ``fence.txid`` was added before; ``StateCorruptError`` when a key
        holds something that is not a number."""
        if CounterRecord(self.data.get(APPLIED_KEY) or 0).added(fence.txid):
            return False
        get = self.data.get
        bad = [(k, v) for k, v in ((k, get(k)) for k in keys) if v is not None and (type(v) not in (int, float))]
        if bad:
            msg = f"memory map {self.namespace!r} key {bad[0][0]!r} holds {bad[0][1]!r}, not a number"
            raise StateCorruptError(msg)
        return True

    def _add(self, keys: list[str], deltas: list[Any], fence: Fence) -> None:
        data = self.data
        before = {k: data.get(k) for k in keys}
        for k, d in zip(keys, deltas, strict=True):
            data[k] = data.get(k, 0) + d
        if fence.txid is not None:
            data[APPLIED_KEY] = fence.txid
            data[PRIOR_KEY] = {"txid": fence.txid, "before": before}

    def counter_get(self, keys: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        """Stored numbers of ``keys`` and the counter map's record of its last added txid
        (``CounterRecord``; the values before it when it is ``txid``), in one counted
        round trip."""
        self.round_trips += 1
        with self.fence.lock:
            data = self.data
            applied = data.get(APPLIED_KEY) or 0
            rec = (data.get(PRIOR_KEY) or {}) if applied == txid else {}
            before = rec.get("before") or {}
            return [data.get(k) for k in keys], CounterRecord(
                applied, rec.get("txid"), {k: before[k] for k in keys if k in before})

    def multi_put(self, keys: list[str], values: list[Any], fence: Fence | None = None, trusted: int = 0,
                  delete_at: int | None = None) -> None:
        """Store ``values[i]`` at ``keys[i]``; with a ``fence``, check and raise the backing's
        fence first, under its lock, as ``MapBacking.multi_put`` says. ``delete_at``: as
        Redis's ``PEXPIREAT``, the keys go at that time (``expire``)."""
        if len(keys) != len(values):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        self.round_trips += 1
        with self.fence.lock:
            if fence is not None:
                self.fence.check_and_raise(fence, f"memory map {self.namespace!r}", keys, self.namespace)
            self.data.update(zip(keys, values, strict=True))
            self._expire_later(keys, delete_at)

    def _expire_later(self, keys: list[str], delete_at: int | None) -> None:
        """Note when ``keys`` go (None: never, as a write without an expiry in Redis)."""
        at = self._delete_at
        if delete_at is None:
            if at:
                for k in keys:
                    at.pop(k, None)
            return
        heap = self._deletions
        for k in keys:
            at[k] = delete_at
            heapq.heappush(heap, (delete_at, k))
        if len(heap) > 2 * len(at) + 1024:           # entries of keys written again since: drop them
            self._deletions = [(t, k) for k, t in at.items()]
            heapq.heapify(self._deletions)

    def scan(self) -> dict[Any, Any]:
        """Every stored ``key -> value`` (keys decoded; the map's own ``~`` records left out)."""
        return {hashable_key(decode_key(k)): v for k, v in list(self.data.items())
                if isinstance(k, str) and (not k.startswith("~") or k[1:2] in ("s", "b", "j"))}

    def expire(self, now_ms: int) -> int:
        """Delete the keys whose ``delete_at`` is at or before ``now_ms`` (the txid time of a
        write: run on every write with one); returns how many went."""
        heap, at, data, n = self._deletions, self._delete_at, self.data, 0
        while heap and heap[0][0] <= now_ms:
            when, k = heapq.heappop(heap)
            if at.get(k) == when:          # not written again since with a later expiry
                del at[k]
                data.pop(k, None)
                n += 1
        return n

    def write(self, parts: Sequence[MapWrite]) -> None:
        """Write several maps' parts (backings of this ``write_group``) as one step: under
        the fence's lock, every part is checked (fence, claims, counters' stored numbers)
        before any is applied, so a refusal leaves every map as it was."""
        self.round_trips += 1
        with self.fence.lock:
            # Step 1. check every part; nothing changes
            todo = []
            for p in parts:
                b = cast(MemoryMapBacking, p.backing)
                with tagged(p.name):
                    b.fence.check(p.fence, f"memory map {b.namespace!r}", p.keys if p.op == "put" else (),
                                  b.namespace)
                    if p.op == "put" or b._check_add(p.keys, p.fence):
                        todo.append((b, p))
            # Step 2. apply every part
            for b, p in todo:
                if p.op == "put":
                    b.data.update(zip(p.keys, p.values, strict=True))
                    b._expire_later(p.keys, p.delete_at)
                    if p.time_ms is not None and b._deletions:
                        b.expire(p.time_ms)
                else:
                    keys, deltas = p.values
                    b._add(keys, deltas, p.fence)
            for b, p in todo:
                b.fence.raise_to(p.fence, p.keys if p.op == "put" else (), b.namespace)


try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the redis-fast extra is optional
    _orjson = None   # type: ignore[assignment]

