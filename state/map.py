"""User state: map backings (I/O only) and the exactly-once wrappers (docs/design.md §5).

The rules live once, here, as small pure functions over stored values; every backing
gets them, and every backing only stores what the wrappers hand it.

**A read in txid t sees the state as of t-1** -- a state query, an updater's old value,
a new-values stream -- whatever an earlier attempt of t already wrote, for every
exactly-once flavour and wherever the commit runs (Trident's ``OpaqueValue.get(txid)``).
So a replay of t reads what its first attempt read, and what it derives is counted once.
Each stored value keeps what that answer needs:

* ``TransactionalMap`` stores ``{"txid": t, "val": v, "prev": p}``; ``OpaqueMap`` stores
  ``{"txid": t, "attempt": a, "curr": c, "prev": p}``. The value *before* batch t is
  ``prev`` when the stored txid is t (an earlier attempt of t wrote it) and ``val`` /
  ``curr`` when it is older (``transactional_base`` / ``opaque_base``). The batch builds
  on that base; reads inside the batch see it unless this attempt updated the key. A
  transactional replay so recomputes the identical batch from ``prev`` and stores what
  the first attempt stored. (A ``{"txid", "val"}`` without ``prev``, written by an older
  version, keeps the old rule when its txid is the batch's: the update is skipped.)
* ``CounterMap`` stores plain numbers, the last txid it added (``APPLIED_KEY``) and, for
  that txid, the value before it of every key it added to (``PRIOR_KEY``, written in the
  same atomic add): ``counter_base``.
* In all, a stored txid newer than the batch's raises ``StateAheadError``.

**One write per map and txid.** Inside a commit (``begin_commit`` .. ``commit``) a map
buffers its updates: the first touch of a key reads its stored value once (one
``multi_get`` per call for the keys not seen yet in this txid); every update of the key
in the txid -- repeated inside one call, from several committer tasks, from several
committers sharing the map -- applies to the value so far; ``flush`` writes every
changed key in one atomic ``multi_put``. So a key is stored at most once per txid and
map, and a failure anywhere in the commit phase before ``flush`` leaves nothing behind.

**One txid in all of its maps or in none.** ``commit_maps`` commits several maps of a
txid as one: each map's write (``prepare_write``) is checked storable and encoded for its
backing before any is written (``UnstorableValueError`` names the map, key and value),
then the writes of the maps sharing a store (a backing's ``write_group``: one Redis
server, the memory maps of one fence) go in one atomic, fenced step (the backing's
``write``). The engine commits every map of a txid this way, on the driver and in each
committer task on executors.

**Fencing.** Each write carries a ``Fence(epoch, txid)``: the epoch of the driver (every
new holder of a topology's lock takes a higher one, durably) and the batch's txid. The
backing refuses, atomically and writing nothing, a write from an older epoch whatever
its txid (a paused driver resumed after another took over) and one older than a txid
already written (``StateAheadError``). The rule is ``fence_refusal``; the memory backing
applies it in Python, the Redis backing in its write script.

**Roll back instead of a superseded list.** An opaque attempt of txid t whose ``flush``
ran but which did not commit (a later map's write or another task failed, the driver
died before recording t) leaves values ``{txid: t, attempt: a1}`` that hold tuples never
committed. Each opaque flush therefore also stores which keys it wrote, in the same
atomic write: the record ``~written:<writer>`` of the flushing writer (the driver, or
one committer task on an executor). Before another attempt of t commits (the engine
knows one is needed: an earlier attempt of t began its commit), ``rollback`` puts every
key a failed attempt's record lists back to its committed value before t (``{txid: t,
attempt: None, curr: prev, prev: prev}``). Nothing is left for readers to interpret:
once t is recorded as committed, a plain ``redis-cli GET`` sees only committed values,
and no bookkeeping grows with the run.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from state.errors import ConfigError, LeadershipLostError, StateAheadError, StateCorruptError, UnstorableValueError
from state.keys import decode_key, encode_key, key_prefix

V = TypeVar("V")
Updater = Callable[[Any], Any]
Combine = Callable[[Any, Any], Any]   # fn(old_or_None, arg) -> new

#: The stored key prefix (as ``encode_key`` strings go, one no user key encodes to) under
#: which an ``OpaqueMap`` writer records the keys its last flush wrote:
#: ``~written:<writer>`` -> ``{"txid", "attempt", "keys"}``.
WRITTEN_KEY = "~written"
#: The stored key of a ``CounterMap``'s marker: the last txid whose additions it holds.
APPLIED_KEY = "~applied"
#: The stored key of a ``CounterMap``'s record of its last added txid: that txid and, per
#: key it added to, the value before it.
PRIOR_KEY = "~prior"


def written_key(writer: str) -> str:
    """The stored key of ``writer``'s record of what it last wrote."""
    return f"{WRITTEN_KEY}:{writer}"


# -- fencing -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fence:
    """What a write claims: the writing driver's ``epoch`` and the batch's ``txid``.

    Either may be None: no epoch (a map used outside the engine) is not checked against
    epochs; no txid (raising the epoch when a driver starts) is not checked against txids.

    ``writer`` (with ``attempt``): one of several writers of the same attempt -- committer
    tasks on executors, each writing its own share. The backing then also refuses, writing
    nothing, a key that another writer of the same attempt already wrote (two tasks
    updating one key in one txid; ``ConflictingWriteError``), so no share is lost silently.
    """

    epoch: int | None
    txid: int | None
    attempt: int | None = None
    writer: str | None = None

    @property
    def claims(self) -> str | None:
        """The name of this attempt's claims (which writer wrote which key), or None."""
        if self.writer is None or self.txid is None:
            return None
        return f"~claims:{self.txid}:{self.attempt}"


def fence_refusal(stored_epoch: int, stored_txid: int, fence: Fence) -> str | None:
    """Why a backing whose fence holds ``(stored_epoch, stored_txid)`` must refuse a write
    under ``fence``: ``"epoch"`` (an older driver), ``"txid"`` (an older batch), or None.
    After an accepted write the stored fence is the element-wise maximum."""
    if fence.epoch is not None and stored_epoch > fence.epoch:
        return "epoch"
    if fence.txid is not None and stored_txid > fence.txid:
        return "txid"
    return None


def fence_error(reason: str, what: str, stored_epoch: int, stored_txid: int, fence: Fence) -> Exception:
    """The error for a refused write to ``what`` (a namespace and address)."""
    if reason == "epoch":
        return LeadershipLostError(
            f"write to {what} refused: a driver with a newer epoch ({stored_epoch}) has taken "
            f"over this topology, and this driver's epoch is {fence.epoch}; this driver must "
            "stop (nothing was written). If no other driver runs, the coordinator state was "
            "reset (e.g. coordination='memory://' with a durable state): use ZooKeeper "
            "coordination or a new topology_id")
    return StateAheadError(
        f"write to {what} refused: it was already written by txid {stored_txid}, newer than "
        f"this write (txid {fence.txid}): another driver is writing this state, or the "
        "topology id was reused with fresh coordinator state. Stop the other writer, or use "
        "a new topology_id / state name")


def conflict_error(what: str, key: str, other: str, fence: Fence) -> Exception:
    """The error for a key two writers of one attempt wrote (see ``Fence.writer``)."""
    from state.errors import ConflictingWriteError

    return ConflictingWriteError(
        f"{what}: key {decode_key(key)!r} is updated by {other} and by {fence.writer} in txid "
        f"{fence.txid}; each would overwrite the other's share. Route every update of a key "
        "to one committer task (fields_grouping on the key) and use one committer per map, "
        "or commit on the driver (commit_placement='driver'). Nothing of this write was stored")


class FenceCell:
    """An in-process fence: the highest (epoch, txid) written through it, and the claims
    of the newest attempt (``(namespace, key) -> writer``), under a lock."""

    def __init__(self) -> None:
        self.epoch = 0
        self.txid = 0
        self.claims: dict[str, dict[tuple[str, str], str]] = {}
        self.lock = threading.Lock()

    def check(self, fence: Fence, what: str, keys: Sequence[str] = (), namespace: str = "") -> None:
        """Raise ``fence_error`` (or ``conflict_error`` for a key of ``namespace`` another
        writer of the attempt claimed) if ``fence`` is refused; changes nothing."""
        reason = fence_refusal(self.epoch, self.txid, fence)
        if reason is not None:
            raise fence_error(reason, what, self.epoch, self.txid, fence)
        if fence.claims is not None:
            claims = self.claims.get(fence.claims, {})
            for k in keys:
                other = claims.get((namespace, k))
                if other is not None and other != fence.writer:
                    raise conflict_error(what, k, other, fence)

    def raise_to(self, fence: Fence, keys: Sequence[str] = (), namespace: str = "") -> None:
        """Raise the cell to ``fence`` (checked), claiming ``keys`` of ``namespace`` for its writer."""
        if fence.claims is not None:
            claims = self.claims.get(fence.claims, {})
            self.claims = {fence.claims: claims}   # only the newest attempt's are kept
            writer = fence.writer
            assert writer is not None   # a fence has claims only with a writer
            claims.update(((namespace, k), writer) for k in keys if not k.startswith(WRITTEN_KEY))
        self.epoch = max(self.epoch, fence.epoch or 0)
        self.txid = max(self.txid, fence.txid or 0)

    def check_and_raise(self, fence: Fence, what: str, keys: Sequence[str] = (), namespace: str = "") -> None:
        """``check``, then ``raise_to``. Call with ``self.lock`` held, together with the
        write it guards."""
        self.check(fence, what, keys, namespace)
        self.raise_to(fence, keys, namespace)


# -- one txid's writes, checked, then written together -----------------------------------------

@dataclass
class MapWrite:
    """One map's write of a txid (``MapState.prepare_write``): checked storable, and
    encoded for its backing, before anything of the txid is written.

    ``op`` is ``"put"`` (store ``values`` at ``keys``) or ``"add"`` (a counter map's numbers,
    added once per txid). ``values`` is what the backing's ``encode_values`` /
    ``encode_deltas`` / ``encode_columns`` made (a backing without them gets the raw values
    through ``multi_put`` / ``multi_add``); ``stored``: the raw values of a put, for the
    map's cache."""

    name: str
    backing: Any
    op: str
    keys: Any
    values: Any
    fence: Fence
    trusted: int = 0
    stored: list[Any] | None = None


@contextlib.contextmanager
def tagged(name: str) -> Iterator[None]:
    """Tag an exception raised while reading or writing map ``name`` with its name
    (``trident_map``, which the engine's failure reports show), unless tagged already."""
    try:
        yield
    except Exception as e:
        if not hasattr(e, "trident_map"):
            e.trident_map = name  # type: ignore[attr-defined]
        raise


def write_maps(parts: Sequence[MapWrite]) -> None:
    """Write ``parts`` (each checked storable already): the parts whose backings share a
    ``write_group`` (one Redis server; the memory maps of one fence) in one atomic step,
    through the group's ``write``; a backing without ``write`` through its own calls."""
    groups: dict[Hashable, list[MapWrite]] = {}
    for p in parts:
        group = getattr(p.backing, "write_group", None)
        groups.setdefault(("own", id(p)) if group is None else group, []).append(p)
    for ps in groups.values():
        write = getattr(ps[0].backing, "write", None)
        if write is not None:
            write(ps)
            continue
        for p in ps:
            with tagged(p.name):
                if p.op == "put":
                    p.backing.multi_put(p.keys, p.values, p.fence, trusted=p.trusted)
                else:
                    p.backing.multi_add(p.keys, p.values, p.fence)


def commit_maps(maps: Sequence[MapState[Any]], txid: int) -> None:
    """``commit(txid)`` of several maps at once, so that txid is visible in all of them or
    in none (docs/design.md §5):

    1. every map makes its write of ``txid`` and checks it storable: a value its backing
       cannot store raises ``UnstorableValueError`` naming the map, the key and the value,
       and nothing of any of the maps is written;
    2. the writes go out, the maps on one store (one Redis; the memory maps of a topology)
       in one atomic, fenced step (``write_maps``): a refusal there (fence, claims, a
       corrupt key) leaves every one of them as it was;
    3. the maps end the commit.

    A failure leaves the maps in their commit: the caller ``abort``-s them."""
    for m in maps:
        if m.scope is None or m.scope.txid != txid:
            msg = f"commit({txid}) of map {m.name!r} without begin_commit({txid})"
            raise RuntimeError(msg)
    # Step 1. every write made and checked storable
    parts: list[tuple[MapState[Any], MapWrite]] = []
    for m in maps:
        with tagged(m.name):
            part = m.prepare_write()
        if part is not None:
            parts.append((m, part))
    # Step 2. written: one atomic step per store
    try:
        write_maps([part for _, part in parts])
    except BaseException:
        for m in maps:
            m._cache = {}        # written or not: unknown
        raise
    for m, part in parts:
        m._written(part)
    # Step 3. the commit ends
    for m in maps:
        m.scope = None
        m._reset()


# -- backings ------------------------------------------------------------------------------

@runtime_checkable
class MapBacking(Protocol):
    """Where a map's stored values live. I/O only: no exactly-once logic here.

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


class MemoryMapBacking:
    """A dict. The embedded default (``state="memory://"``): maps live in the driver.

    >>> m = MemoryMapBacking(); m.multi_put(["a"], [{"txid": 1, "val": 2}]); m.multi_get(["a", "b"])
    [{'txid': 1, 'val': 2}, None]
    """

    #: in this process: a map does not cache what it reads (``MapState._cache``)
    remote = False

    def __init__(self, fence: FenceCell | None = None, namespace: str = "memory map") -> None:
        self.data: dict[Hashable, Any] = {}
        self.fence = fence or FenceCell()
        self.namespace = namespace
        self.round_trips = 0  # multi_get/multi_put calls, like a remote store's

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
        if fence.txid is not None and (self.data.get(APPLIED_KEY) or 0) >= fence.txid:
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

    def multi_put(self, keys: list[str], values: list[Any], fence: Fence | None = None, trusted: int = 0) -> None:
        """Store ``values[i]`` at ``keys[i]``; with a ``fence``, check and raise the backing's
        fence first, under its lock, as ``MapBacking.multi_put`` says."""
        if len(keys) != len(values):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        self.round_trips += 1
        with self.fence.lock:
            if fence is not None:
                self.fence.check_and_raise(fence, f"memory map {self.namespace!r}", keys, self.namespace)
            self.data.update(zip(keys, values, strict=True))

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
                else:
                    keys, deltas = p.values
                    b._add(keys, deltas, p.fence)
            for b, p in todo:
                b.fence.raise_to(p.fence, p.keys if p.op == "put" else (), b.namespace)


try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the redis-fast extra is optional
    _orjson = None   # type: ignore[assignment]


# -- the rules, as pure functions over stored values ------------------------------------

def _checked(key: Any, stored: Any, fields: tuple[str, ...], kind: str) -> dict[str, Any]:
    if not isinstance(stored, dict) or not all(f in stored for f in fields):
        form = "{" + ", ".join(f"'{f}': ..." for f in fields) + "}"
        msg = (
            f"key {key!r} holds {stored!r}, not a {kind} value {form}; was "
            "it written by something else? Use another state name or "
            "delete the key"
        )
        raise StateCorruptError(msg)
    return stored


def transactional_base(key: Any, stored: Any, txid: int) -> tuple[Any, bool]:
    """``(value before batch txid, already_applied)`` of a stored ``{txid, val, prev}``:
    ``prev`` when the stored txid is ``txid`` (an earlier attempt of it wrote ``val``),
    else ``val``. ``already_applied`` only for a value of the older form ``{txid, val}``
    (no ``prev``) written by ``txid`` itself: its before-value is unknown, so ``val`` is
    returned and the txid's update of the key is skipped (the rule of that form)."""
    if stored is None:
        return None, False
    s = _checked(key, stored, ("txid", "val"), "TransactionalMap")
    if s["txid"] > txid:
        raise StateAheadError(_ahead(key, s["txid"], txid))
    if s["txid"] < txid:
        return s["val"], False
    if "prev" in s:
        return s["prev"], False
    return s["val"], True


def opaque_base(key: Any, stored: Any, txid: int) -> Any:
    """The committed value before batch ``txid`` of a stored ``{txid, curr, prev}``."""
    if stored is None:
        return None
    s = _checked(key, stored, ("txid", "curr", "prev"), "OpaqueMap")
    if s["txid"] > txid:
        raise StateAheadError(_ahead(key, s["txid"], txid))
    return s["prev"] if s["txid"] == txid else s["curr"]


_ONE = object()   # "fn takes one argument": transactional_apply(key, stored, txid, updater)


def transactional_apply(key: Any, stored: Any, txid: int, fn: Combine | Updater, arg: Any = _ONE,
                        attempt: int | None = None) -> tuple[Any, Any, bool]:
    """One update of one key for batch ``txid``: ``fn(old, arg)`` (or ``fn(old)``) on the
    value before ``txid`` (``transactional_base``).

    Returns ``(new_stored, user_value, changed)``; not changed when an earlier attempt of
    ``txid`` stored the same.
    """
    combine, arg = (_call, fn) if arg is _ONE else (cast(Combine, fn), arg)
    base, applied = transactional_base(key, stored, txid)
    if applied:
        return stored, base, False
    val = combine(base, arg)
    new = {"txid": txid, "val": val, "prev": base}
    return new, val, new != stored


def opaque_apply(key: Any, stored: Any, txid: int, fn: Combine | Updater, arg: Any = _ONE,
                 attempt: int | None = None) -> tuple[Any, Any, bool]:
    """One update of one key for attempt ``attempt`` of batch ``txid``."""
    combine, arg = (_call, fn) if arg is _ONE else (cast(Combine, fn), arg)
    base = opaque_base(key, stored, txid)
    val = combine(base, arg)
    return {"txid": txid, "attempt": attempt, "curr": val, "prev": base}, val, True


@dataclass(frozen=True)
class CounterRecord:
    """What a counter map keeps of its last added txid, as read with its values:
    ``applied`` (the map's marker, 0 for none), ``txid`` (the txid of the before-values
    record, None when there is none: a map written by an older version) and ``before``
    (for the keys read that ``txid`` added to: the value before it, None for absent)."""

    applied: int = 0
    txid: int | None = None
    before: dict[str, Any] = dataclass_field(default_factory=dict)


def counter_base(key: str, stored: Any, record: CounterRecord, txid: int) -> Any:
    """The value before batch ``txid`` of a counter key (encoded) holding ``stored``: the
    record's before-value when ``txid`` was added already (an earlier attempt of it
    wrote), else ``stored``. A map added to by a newer txid raises ``StateAheadError``."""
    if record.applied > txid:
        raise StateAheadError(_ahead(decode_key(key), record.applied, txid))
    if record.applied == txid and record.txid == txid and key in record.before:
        return record.before[key]
    return stored


def unstorable_error(name: str, txid: int, key: str, value: Any, why: str) -> UnstorableValueError:
    """The error for a value of map ``name`` (at encoded ``key``) its backing cannot store."""
    shown = repr(value)
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return UnstorableValueError(
        f"map {name!r}, txid {txid}: the value {shown} ({type(value).__name__}) of key "
        f"{decode_key(key)!r} cannot be stored ({why}); found before writing: none of the maps "
        "committed with it was written. Store what the state's serializer encodes (JSON: "
        "dict, list, str, int, float, bool, None), e.g. convert it in the aggregator or updater")


def _ahead(key: Any, stored_txid: int, txid: int) -> str:
    return (f"key {key!r} was written by txid {stored_txid}, newer than the batch being "
            f"committed (txid {txid}): another driver is writing this state, or the "
            "topology id was reused with fresh coordinator state. Stop the other writer "
            "or use a new topology_id / state name")


COMBINERS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda old, new: new if old is None else old + new,
    "count": lambda old, new: new if old is None else old + new,
    "min": lambda old, new: new if old is None else min(old, new),
    "max": lambda old, new: new if old is None else max(old, new),
    "replace": lambda old, new: new,
}


# -- the wrappers ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CommitScope:
    """What a map's writes belong to: batch ``txid``, its ``attempt``, the driver's
    ``epoch``."""

    txid: int
    attempt: int | None = None
    epoch: int | None = None


class MapState(Generic[V]):
    """What a committer uses: Trident's ``MapState`` in Python. Users do not subclass it.

    Call order per batch (the framework makes the first and last calls around the commit
    phase): ``begin_commit(txid, attempt, epoch=...)``, any ``multi_update`` /
    ``multi_combine`` / ``multi_get``, ``commit(txid)`` (which ``flush``-es: one atomic,
    fenced write of every key changed in the txid) or ``abort()`` (writes nothing).
    """

    kind = "map"
    #: the fields of a stored wrapper dict that hold user values (None: the stored value
    #: is the user's value)
    _user_fields: tuple[str, ...] | None = None

    def __init__(self, backing: MapBacking, name: str | None = None, writer: str = "driver") -> None:
        self.backing = backing
        self.name: str = cast(str, name or getattr(backing, "namespace", type(self).__name__))
        #: who writes through this map object (one committer task, or the driver): names
        #: the record of what it wrote, for ``rollback``
        self.writer = writer
        #: one of several writers of an attempt (committer tasks on executors): writes
        #: claim their keys, and a key another writer claimed is refused (``Fence.writer``)
        self.shared_writes = False
        self.scope: CommitScope | None = None
        #: the last txid known committed (set by the engine): reads outside a commit show
        #: values as of it; None: whatever was written last
        self.last_committed: int | None = None
        #: what the backing holds for keys this object read or wrote (encoded key -> stored
        #: value), valid while it is the only writer: the driver's maps, fenced by its
        #: epoch (any other writer has a newer epoch, and then this object's next write
        #: is refused whatever it read). Keys found here are not read again: Trident's
        #: ``CachedMap``. Dropped on a new epoch, a failed write, a rollback, and when it
        #: outgrows ``CACHE_LIMIT``; never used with ``shared_writes``.
        self._cache: dict[str, Any] = {}
        self._cache_epoch: int | None = None
        self._reset()

    def _reset(self) -> None:
        # the keys (encoded) touched in this txid: their value so far, the value before the
        # txid, the ones an earlier attempt already applied (a TransactionalMap value of
        # the form without "prev"), the ones this attempt changed (in order)
        self._value: dict[str, Any] = {}
        self._base: dict[str, Any] = {}
        self._skip: set[str] = set()
        self._dirty: dict[str, None] = {}

    # -- the commit scope ----------------------------------------------------------------------
    def begin_commit(self, txid: int, attempt: int | None = None, *, epoch: int | None = None) -> None:
        """Start applying batch ``txid`` (see ``CommitScope``); drops anything buffered."""
        self.scope = CommitScope(txid, attempt, epoch)
        if epoch != self._cache_epoch or epoch is None:
            self._cache = {}
            # a backing in this process's memory is as fast as a cache of it
            self._cache_epoch = epoch if getattr(self.backing, "remote", True) else None
        self._reset()

    def flush(self) -> None:
        """Write every key changed in this txid in one atomic, fenced ``multi_put`` (checked
        storable first: ``UnstorableValueError`` names the key and value, nothing written)."""
        part = self.prepare_write()
        if part is None:
            return
        try:
            write_maps([part])
        except BaseException:
            self._cache = {}        # written or not: unknown
            raise
        self._written(part)

    def prepare_write(self) -> MapWrite | None:
        """This txid's write of the map (None: nothing changed), checked storable and
        encoded for the backing; nothing is written (``write_maps`` writes it)."""
        scope = self._require_scope("flushed")
        keys, values = self._writes(scope)
        if not keys:
            return None
        writer = self.writer if self.shared_writes else None
        trusted = 0
        cache = self._cache
        if cache:      # keys the cache knows go last: the backing need not check them
            # (a key read as absent may hold a non-string value MGET cannot show)
            fresh = [i for i, k in enumerate(keys) if cache.get(k) is None]
            if len(fresh) < len(keys):
                order = fresh + [i for i, k in enumerate(keys) if cache.get(k) is not None]
                trusted = len(keys) - len(fresh)
                keys, values = [keys[i] for i in order], [values[i] for i in order]
        encode = getattr(self.backing, "encode_values", None)
        encoded = values if encode is None else self._encoded(encode, keys, values, scope)
        return MapWrite(self.name, self.backing, "put", keys, encoded,
                        Fence(scope.epoch, scope.txid, scope.attempt, writer), trusted, values)

    def _encoded(self, encode: Callable[[list[Any]], Any], keys: list[str], values: list[Any],
                 scope: CommitScope) -> Any:
        """``encode(values)``; a value it cannot encode raises ``UnstorableValueError``
        naming the key and the user's value."""
        try:
            return encode(values)
        except Exception:
            for k, v in zip(keys, values, strict=True):
                try:
                    encode([v])
                except Exception as e:  # noqa: BLE001 - whatever the serializer raises
                    user = v
                    if type(v) is dict and self._user_fields:
                        for f in self._user_fields:
                            try:
                                encode([v.get(f)])
                            except Exception:  # noqa: BLE001
                                user = v.get(f)
                                break
                    raise unstorable_error(self.name, scope.txid, k, user, f"{type(e).__name__}: {e}") from None
            raise

    def _written(self, part: MapWrite) -> None:
        """``part`` is stored: remember what the backing now holds, nothing is dirty."""
        if part.stored is not None:
            self._remember(part.keys, part.stored)
        self._dirty = {}

    def _remember(self, keys: list[str], stored: list[Any]) -> None:
        """Cache what the backing now holds for ``keys`` (values that cannot change under
        it: a user's updater may mutate a list or dict it is given)."""
        if self.shared_writes or self._cache_epoch is None:
            return
        cache = self._cache
        if len(cache) + len(keys) > CACHE_LIMIT:
            cache.clear()
        scalar, fields = _SCALARS, self._user_fields
        f1, f2 = (fields + (fields[0],))[:2] if fields else (None, None)
        drop = []
        for k, v in zip(keys, stored, strict=True):
            if v is None or (type(v) in scalar if f1 is None else (
                    type(v) is dict and type(v.get(f1)) in scalar and type(v.get(f2)) in scalar)):
                cache[k] = v
            else:
                drop.append(k)
        for k in drop:
            cache.pop(k, None)

    def rollback(self, writers: Sequence[str]) -> int:
        """Before this attempt commits its txid: put back what failed attempts of the txid
        wrote (see the module docstring); ``writers``: every writer that may have written.
        Returns how many keys were put back. Only ``OpaqueMap`` has anything to do."""
        return 0

    def commit(self, txid: int) -> None:
        """``flush``, then end the commit of ``txid`` (``commit_maps`` commits several
        maps as one)."""
        commit_maps([self], txid)

    def abort(self) -> None:
        """End the current commit without writing anything buffered."""
        self.scope = None
        self._reset()

    def _require_scope(self, what: str) -> CommitScope:
        if self.scope is None:
            msg = (
                f"map {self.name!r} {what} outside a commit: update it from a "
                "committer's finish_batch (the framework calls begin_commit around it)"
            )
            raise RuntimeError(msg)
        return self.scope

    # -- reads and updates ---------------------------------------------------------------------
    def multi_get(self, keys: Sequence[Any]) -> list[V | None]:
        """The values of ``keys`` (None where absent). Inside a commit: as this txid left
        them so far (the committed value before it for keys it has not changed); outside:
        the last committed values."""
        keys = list(keys)
        enc = _encode_all(keys)
        if self.scope is None:
            return [None if s is None else self._committed_value(k, s)
                    for k, s in zip(keys, self.backing.multi_get(enc), strict=True)]
        self._touch(enc)
        value = self._value
        return [value[e] for e in enc]

    def get(self, key: Any) -> V | None:
        """The value of one ``key``, as ``multi_get([key])[0]``."""
        return self.multi_get([key])[0]

    def multi_get_committed(self, keys: Sequence[Any]) -> list[V | None]:
        """The committed values of ``keys`` before the current txid, whatever this txid
        has updated so far (outside a commit: ``multi_get``). Trident's state queries read
        this: the state every batch before this one left."""
        if self.scope is None:
            return self.multi_get(keys)
        keys = list(keys)
        txid = self.scope.txid
        return [None if s is None else self._base_value(k, s, txid)
                for k, s in zip(keys, self.backing.multi_get(_encode_all(keys)), strict=True)]

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        """The value before batch ``txid`` of a stored value (as ``_load`` takes it)."""
        raise NotImplementedError

    def multi_update(self, keys: Sequence[Any], updaters: Sequence[Updater] | Updater) -> list[V]:
        """Apply ``updaters[i](old_or_None) -> new`` to ``keys[i]`` for the current batch,
        exactly once across replays; returns the new values. One updater may serve all.
        A key repeated in the call, or updated again later in the txid, is updated again
        on the value so far."""
        keys = list(keys)
        if callable(updaters):
            return self._apply_all(keys, _call, [updaters] * len(keys))
        if len(updaters) != len(keys):
            msg = f"{len(keys)} keys but {len(updaters)} updaters"
            raise ValueError(msg)
        return self._apply_all(keys, _call, updaters)

    def multi_combine(self, keys: Sequence[Any], values: Sequence[Any], combiner: str | Combine = "sum") -> list[V]:
        """Fold ``values[i]`` into ``keys[i]`` with a combiner: ``"sum"``, ``"count"``
        (sum of counts), ``"min"``, ``"max"``, ``"replace"`` or ``f(old_or_None, new)``.

        >>> m = TransactionalMap(MemoryMapBacking()); m.begin_commit(1)
        >>> m.multi_combine(["a", "b", "a"], [2, 3, 1])
        [2, 3, 3]
        >>> m.commit(1); m.begin_commit(2); m.multi_combine(["a"], [5], "max")
        [5]
        """
        fn = COMBINERS.get(combiner) if isinstance(combiner, str) else combiner
        if fn is None:
            msg = f"unknown combiner {combiner!r}; use one of {sorted(COMBINERS)} or a function"
            raise ValueError(msg)
        keys = list(keys)
        if len(values) != len(keys):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        return self._apply_all(keys, fn, values)

    def _apply_all(self, keys: list[Any], fn: Combine, args: Sequence[Any]) -> list[V]:
        self._require_scope("updated")
        enc = _encode_all(keys)
        self._touch(enc)
        value, skip, dirty = self._value, self._skip, self._dirty
        out: list[V] = []
        append = out.append
        if skip:
            for e, arg in zip(enc, args, strict=True):
                if e not in skip:
                    value[e] = fn(value[e], arg)
                    dirty[e] = None
                append(value[e])
        else:                       # the hot path: no key of this txid was applied before
            for e, arg in zip(enc, args, strict=True):
                v = value[e] = fn(value[e], arg)
                append(v)
            dirty.update(dict.fromkeys(enc))
        return out

    def _touch(self, enc: list[str]) -> None:
        """Read the keys of ``enc`` not seen yet in this txid: one ``multi_get``."""
        value = self._value
        missing = list(dict.fromkeys(enc if not value else [e for e in enc if e not in value]))
        if not missing:
            return
        scope = self.scope
        assert scope is not None
        cache = self._cache
        if cache:
            hits = [e for e in missing if e in cache]
            if hits:
                self._load(hits, [cache[e] for e in hits], scope.txid)
                if len(hits) == len(missing):
                    return
                missing = [e for e in missing if e not in cache]
        stored = self.backing.multi_get(missing)
        if self.shared_writes:
            for e, s in zip(missing, stored, strict=True):
                self._check_claim(e, s, scope)
        self._load(missing, stored, scope.txid)
        self._remember(missing, stored)

    def _check_claim(self, key: str, stored: Any, scope: CommitScope) -> None:
        """One of several writers of an attempt finds a key another writer of the same
        attempt already wrote: its update would be skipped or overwrite the other's share."""
        if (isinstance(stored, dict) and stored.get("txid") == scope.txid
                and stored.get("attempt") == scope.attempt and stored.get("writer") not in (None, self.writer)):
            where = f"map {self.name!r}"
            raise conflict_error(where, key, stored["writer"],
                                 Fence(scope.epoch, scope.txid, scope.attempt, self.writer))

    def _stamp(self, value: dict[str, Any], scope: CommitScope) -> dict[str, Any]:
        """A stored value, with its attempt and writer when several writers share the attempt."""
        if self.shared_writes:
            value["attempt"] = scope.attempt
            value["writer"] = self.writer
        return value

    # -- what each wrapper stores --------------------------------------------------------------
    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        """Take the stored values of ``keys`` as this txid's starting point."""
        raise NotImplementedError

    def _committed_value(self, key: Any, stored: Any) -> Any:
        raise NotImplementedError

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        raise NotImplementedError


#: The most keys a map caches (``MapState._cache``) before it starts over.
CACHE_LIMIT = 1_000_000
#: user values no updater can change in place: the ones a map caches
_SCALARS = frozenset({int, float, str, bool, type(None)})


def _call(old: Any, update: Updater) -> Any:
    return update(old)


def _encode_all(keys: list[Any]) -> list[str]:
    """``encode_key`` of each key (a plain str not starting with ``~`` is its own)."""
    try:   # the common case, checked in C: every key a str, none starting with "~"
        if "\0~" not in "\0" + "\0".join(keys):
            return keys
    except TypeError:
        pass
    return [k if type(k) is str and k[:1] != "~" else encode_key(k) for k in keys]


class TransactionalMap(MapState[V]):
    """Exactly-once map for transactional spouts (a replay re-emits the identical batch).

    A replay of txid t (after its write, before it was recorded) builds on the value
    before t again (``prev``), so it reads and stores what the first attempt did.

    >>> m = TransactionalMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_update(["a"], [lambda v: (v or 0) + 1]); m.commit(1)
    [1]
    >>> m.begin_commit(1); m.multi_get(["a"])    # replay of txid 1: the value before it
    [None]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 1])
    [1]
    """

    kind = "transactional"
    _user_fields = ("val", "prev")

    def _reset(self) -> None:
        super()._reset()
        # what an earlier attempt of this txid stored (a replay): not written again if the
        # replay computes the same
        self._earlier: dict[str, Any] = {}

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        value, base, skip = self._value, self._base, self._skip
        for e, s in zip(keys, stored, strict=True):
            if s is None:
                b = None
            elif type(s) is dict and "val" in s and type(s.get("txid")) is int and s["txid"] < txid:
                b = s["val"]
            else:                     # written by an earlier attempt of txid, ahead, or not ours
                b, applied = transactional_base(decode_key(e), s, txid)
                if applied:
                    skip.add(e)
                elif s["txid"] == txid:
                    self._earlier[e] = s
            value[e] = base[e] = b

    def _committed_value(self, key: Any, stored: Any) -> Any:
        s = _checked(key, stored, ("txid", "val"), "TransactionalMap")
        if self.last_committed is not None and s["txid"] > self.last_committed and "prev" in s:
            return s["prev"]   # written by a txid not committed (yet)
        return s["val"]

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return transactional_base(key, stored, txid)[0]

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value, base, t = list(self._dirty), self._value, self._base, scope.txid
        earlier = self._earlier
        if earlier and not self.shared_writes:    # a replay: what it stored already stays
            keys = [k for k in keys if earlier.get(k) != {"txid": t, "val": value[k], "prev": base[k]}]
        if self.shared_writes:
            return keys, [self._stamp({"txid": t, "val": value[k], "prev": base[k]}, scope) for k in keys]
        return keys, [{"txid": t, "val": value[k], "prev": base[k]} for k in keys]


class OpaqueMap(MapState[V]):
    """Exactly-once map for opaque spouts (a replay may emit a different batch).

    >>> m = OpaqueMap(MemoryMapBacking())
    >>> m.begin_commit(1, 1); m.multi_update(["a"], [lambda v: (v or 0) + 5]); m.flush()
    [5]
    >>> m.begin_commit(1, 2); m.multi_get(["a"])    # attempt 1 never committed: its 5 is not seen
    [None]
    >>> m.multi_update(["a"], [lambda v: (v or 0) + 3]); m.commit(1); m.get("a")
    [3]
    3
    """

    kind = "opaque"
    _user_fields = ("curr", "prev")

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        value, base = self._value, self._base
        for e, s in zip(keys, stored, strict=True):
            if s is None:
                b = None
            elif type(s) is dict and "curr" in s and type(s.get("txid")) is int and s["txid"] < txid:
                b = s["curr"]
            else:
                b = opaque_base(decode_key(e), s, txid)
            value[e] = base[e] = b

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return opaque_base(key, stored, txid)

    def _committed_value(self, key: Any, stored: Any) -> Any:
        s = _checked(key, stored, ("txid", "curr", "prev"), "OpaqueMap")
        if self.last_committed is not None and s["txid"] > self.last_committed:
            return s["prev"]   # written by a txid not committed (yet)
        return s["curr"]

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        t, a = scope.txid, scope.attempt
        keys, value, base = list(self._dirty), self._value, self._base
        values: list[Any] = [{"txid": t, "attempt": a, "curr": value[k], "prev": base[k]} for k in keys]
        if self.shared_writes:
            values = [self._stamp(v, scope) for v in values]
        if keys:
            # what this writer wrote, for the rollback if this attempt does not commit
            values.append({"txid": t, "attempt": a, "keys": list(keys)})
            keys.append(written_key(self.writer))
        return keys, values

    def rollback(self, writers: Sequence[str]) -> int:
        """Put back ``prev`` on the keys that failed attempts of the current txid wrote (found
        through the ``writers``' records), so this attempt updates the committed values.
        Returns how many keys were put back."""
        scope = self._require_scope("rolled back")
        self._cache = {}
        records = self.backing.multi_get([written_key(w) for w in writers])
        left = sorted({k for r in records if isinstance(r, dict) and r.get("txid") == scope.txid
                       and r.get("attempt") != scope.attempt for k in r.get("keys", ())})
        if not left:
            return 0
        keys, values = [], []
        for k, s in zip(left, self.backing.multi_get(left), strict=True):
            if s is None:
                continue
            s = _checked(decode_key(k), s, ("txid", "curr", "prev"), "OpaqueMap")
            if s["txid"] == scope.txid and s.get("attempt") not in (None, scope.attempt):
                keys.append(k)
                values.append({"txid": scope.txid, "attempt": None, "curr": s["prev"], "prev": s["prev"]})
        if keys:
            self.backing.multi_put(keys, values, Fence(scope.epoch, scope.txid))
        return len(keys)


class NonTransactionalMap(MapState[V]):
    """A map that stores plain values (Trident's non-transactional state): a replay of a
    batch whose earlier attempt wrote it applies the batch again. At-least-once, not
    exactly-once; for state whose updates are idempotent (``"replace"``, ``"max"``).

    >>> m = NonTransactionalMap(MemoryMapBacking())
    >>> m.begin_commit(1); m.multi_combine(["a"], [2]); m.commit(1)
    [2]
    >>> m.begin_commit(1); m.multi_combine(["a"], [2]); m.commit(1); m.get("a")   # replayed: counted twice
    [4]
    4
    """

    kind = "non-transactional"

    def _load(self, keys: list[str], stored: list[Any], txid: int) -> None:
        self._value.update(zip(keys, stored, strict=True))

    def _committed_value(self, key: Any, stored: Any) -> Any:
        return stored

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        return stored

    def _writes(self, scope: CommitScope) -> tuple[list[str], list[Any]]:
        keys, value = list(self._dirty), self._value
        return keys, [value[k] for k in keys]


class CounterMap(MapState[V]):
    """Numbers that batches add to: ``multi_combine(keys, deltas, "sum")`` buffers the
    additions of a txid, and ``flush`` adds them in the store in one atomic, fenced write
    that also records the txid (``APPLIED_KEY``); a txid added before is skipped whole. So
    counts are exactly-once for transactional spouts (a replay adds the identical batch)
    without reading a key: the commit costs one write, not a read and a write of every
    key (Trident's ``TransactionalMap`` keeps a txid per key because Storm's multi-put is
    not atomic; here the write is). Values are plain numbers in the store.

    The add also records, for that txid, each key's value before it (``PRIOR_KEY``), so
    reads in txid t see the values as of t-1 even when an earlier attempt of t added
    already (``counter_base``): a replay reads what its first attempt read.

    Only for a single writer per txid (``commit_placement="driver"``) and transactional
    spouts; reads inside a commit see the value before the txid plus its additions.

    >>> m = CounterMap(MemoryMapBacking())
    >>> m.begin_commit(1, epoch=1); m.multi_combine(["a", "b", "a"], [2, 3, 1]); m.commit(1)
    [3, 3, 3]
    >>> m.begin_commit(1, epoch=1); m.multi_combine(["a"], [2]); m.commit(1); m.get("a")   # replay
    [2]
    3
    """

    kind = "counter"

    def _reset(self) -> None:
        super()._reset()
        self._deltas: dict[str, Any] = {}
        self._columns: tuple[Any, Any] | None = None     # add_columns' arrays, not yet in _deltas

    def add_columns(self, keys: Any, deltas: Any) -> None:
        """``add`` for a ``pyarrow`` array of distinct string keys (an aggregation's
        groups) and one of integer deltas: kept as arrays, and written from them when the
        backing can (``multi_add_columns``: no Python object per key on the way).
        Anything else (other types, nulls, keys starting with ``~``, earlier additions in
        the txid) takes the ``add`` path."""
        import pyarrow as pa
        import pyarrow.compute as pc

        self._require_scope("updated")
        plain = (not self._deltas and self._columns is None and len(keys) == len(deltas)
                 and (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type))
                 and pa.types.is_integer(deltas.type) and not keys.null_count and not deltas.null_count
                 and not pc.any(pc.starts_with(keys, "~")).as_py())
        if plain:
            self._columns = (keys, deltas)
        else:
            self.add(keys.to_pylist(), deltas.to_pylist(), distinct=True)

    def _take_columns(self) -> None:
        if self._columns is not None:
            keys, deltas = self._columns
            self._columns = None
            self.add(keys.to_pylist(), deltas.to_pylist(), distinct=True)

    def begin_commit(self, txid: int, attempt: int | None = None, *, epoch: int | None = None) -> None:
        """Start adding batch ``txid``'s numbers."""
        if self.shared_writes:
            msg = (f"counter map {self.name!r} has several writers per txid (committers on executors); "
                   "counter maps need commit_placement='driver' (or use a transactional map)")
            raise ConfigError(msg)
        super().begin_commit(txid, attempt, epoch=epoch)

    def multi_combine(self, keys: Sequence[Any], values: Sequence[Any], combiner: str | Combine = "sum") -> list[V]:
        """Add ``values[i]`` to ``keys[i]`` in this txid (``combiner`` must be ``"sum"`` or
        ``"count"``); returns the values as this txid leaves them (one read of the keys
        not read before in the txid)."""
        if combiner not in ("sum", "count"):
            msg = f"a counter map adds numbers; combiner {combiner!r} is not 'sum' (use a transactional map)"
            raise ValueError(msg)
        self._require_scope("updated")
        self._take_columns()
        keys = list(keys)
        if len(values) != len(keys):
            msg = f"{len(keys)} keys but {len(values)} values"
            raise ValueError(msg)
        enc = _encode_all(keys)
        deltas = self._deltas
        for e, v in zip(enc, values, strict=True):
            if type(v) not in (int, float):
                raise unstorable_error(self.name, self._require_scope("updated").txid, e, v,
                                       "a counter map adds numbers; use a transactional or opaque map")
            deltas[e] = deltas.get(e, 0) + v
        return self._current(enc)

    def add(self, keys: Sequence[Any], deltas: Sequence[Any], *, distinct: bool = False) -> None:
        """``multi_combine(keys, deltas)`` without reading the new values back
        (``distinct``: the caller vouches that no key repeats, e.g. an aggregation's)."""
        self._require_scope("updated")
        self._take_columns()
        d = self._deltas
        enc = _encode_all(list(keys))
        if not d and len(enc) == len(deltas) and (distinct or len(set(enc)) == len(enc)):
            self._deltas = dict(zip(enc, deltas, strict=True))       # the common case: one task's distinct keys
            return
        for e, v in zip(enc, deltas, strict=True):
            d[e] = d.get(e, 0) + v

    def multi_update(self, keys: Sequence[Any], updaters: Sequence[Updater] | Updater) -> list[V]:
        """Not for counters: they only add (``multi_combine(keys, deltas, "sum")``)."""
        msg = f"counter map {self.name!r} only adds numbers: use multi_combine(keys, deltas, 'sum')"
        raise TypeError(msg)

    def multi_get(self, keys: Sequence[Any]) -> list[V | None]:
        """Inside a commit: the values before this txid plus its additions so far;
        outside: the committed values (as of ``last_committed`` when it is known)."""
        enc = _encode_all(list(keys))
        if self.scope is None:
            lc = self.last_committed
            if lc is None:             # whatever was added last
                stored, _ = self._counter_get(enc, 0)
                return [self._number(e, s) for e, s in zip(enc, stored, strict=True)]
            stored, rec = self._counter_get(enc, lc + 1)
            txid = lc + 1 if rec.applied == lc + 1 else rec.applied + 1
            return [self._number(e, counter_base(e, s, rec, txid)) for e, s in zip(enc, stored, strict=True)]
        return self._current(enc)

    def multi_get_committed(self, keys: Sequence[Any]) -> list[V | None]:
        """The values before the current txid, whatever an earlier attempt of it added
        (outside a commit: ``multi_get``)."""
        if self.scope is None:
            return self.multi_get(keys)
        enc = _encode_all(list(keys))
        return self._before(enc, self.scope.txid)

    def _counter_get(self, enc: list[str], txid: int) -> tuple[list[Any], CounterRecord]:
        get = getattr(self.backing, "counter_get", None)
        if get is None:
            msg = f"map state backing {type(self.backing).__name__} cannot hold counter maps"
            raise ConfigError(msg)
        return cast(tuple[list[Any], CounterRecord], get(enc, txid))

    def _before(self, enc: list[str], txid: int) -> list[Any]:
        """The values of ``enc`` before batch ``txid`` (one read: values and record)."""
        stored, rec = self._counter_get(enc, txid)
        return [self._number(e, counter_base(e, s, rec, txid)) for e, s in zip(enc, stored, strict=True)]

    def _current(self, enc: list[str]) -> list[Any]:
        self._take_columns()
        scope = self._require_scope("read")
        uniq = list(dict.fromkeys(enc))
        base = dict(zip(uniq, self._before(uniq, scope.txid), strict=True))
        d = self._deltas
        out = []
        for e in enc:
            s, x = base.get(e), d.get(e)
            out.append(s if x is None else (x if s is None else s + x))
        return out

    def _number(self, key: str, value: Any) -> Any:
        return None if value is None else self._committed_value(decode_key(key), value)

    def prepare_write(self) -> MapWrite | None:
        """This txid's additions (None: none), checked to be numbers (``UnstorableValueError``
        names the first that is not) and encoded for the backing; nothing is written."""
        scope = self._require_scope("flushed")
        fence = Fence(scope.epoch, scope.txid, scope.attempt)
        encode_columns = getattr(self.backing, "encode_columns", None)
        if self._columns is not None and encode_columns is not None:
            keys, deltas = self._columns      # integers, checked by add_columns
            return MapWrite(self.name, self.backing, "add", keys, encode_columns(keys, deltas), fence)
        self._take_columns()
        if not self._deltas:
            return None
        keys, deltas = list(self._deltas), list(self._deltas.values())
        kinds = set(map(type, deltas))        # one pass in C; bool is not a number here
        if not kinds <= {int, float} or (float in kinds and not all(map(math.isfinite, deltas))):
            k, d = next((k, d) for k, d in zip(keys, deltas, strict=True)
                        if type(d) not in (int, float) or not math.isfinite(d))
            raise unstorable_error(self.name, scope.txid, k, d, "a counter map adds finite numbers (int or "
                                   "float); use a transactional or opaque map for other values")
        encode = getattr(self.backing, "encode_deltas", None)
        if encode is None and getattr(self.backing, "multi_add", None) is None:
            msg = f"map state backing {type(self.backing).__name__} cannot hold counter maps"
            raise ConfigError(msg)
        return MapWrite(self.name, self.backing, "add", keys, deltas if encode is None else encode(keys, deltas),
                        fence)

    def _written(self, part: MapWrite) -> None:
        self._deltas = {}
        self._columns = None

    def _committed_value(self, key: Any, stored: Any) -> Any:
        if type(stored) not in (int, float):
            msg = f"key {key!r} holds {stored!r}, not a number of a counter map; use another state name"
            raise StateCorruptError(msg)
        return stored

    def _base_value(self, key: Any, stored: Any, txid: int) -> Any:
        raise NotImplementedError   # counter reads go through _before (they need the record)


#: The map kinds by name: ``TopologyContext.map_state(name, kind)`` takes a name or a bool.
MAP_KINDS: dict[str, type[MapState[Any]]] = {
    TransactionalMap.kind: TransactionalMap,
    OpaqueMap.kind: OpaqueMap,
    NonTransactionalMap.kind: NonTransactionalMap,
    CounterMap.kind: CounterMap,
}


def map_class(kind: bool | str) -> type[MapState[Any]]:
    """The map class for ``kind``: False (``TransactionalMap``), True (``OpaqueMap``), or a
    name of ``MAP_KINDS``.

    >>> map_class(True).__name__, map_class("non-transactional").__name__
    ('OpaqueMap', 'NonTransactionalMap')
    """
    if isinstance(kind, bool):
        return OpaqueMap if kind else TransactionalMap
    cls = MAP_KINDS.get(kind)
    if cls is None:
        msg = f"unknown map kind {kind!r}; use one of {sorted(MAP_KINDS)} (or opaque=True/False)"
        raise ValueError(msg)
    return cls


# -- backings by URL -----------------------------------------------------------------------

_memory_backings: dict[str, MemoryMapBacking] = {}
_memory_fences: dict[str, FenceCell] = {}
_memory_guard = threading.Lock()


def open_map_backing(url: str, namespace: str, *, fence_scope: str | None = None,
                     **options: Any) -> MapBacking:
    """The backing named by ``url`` for ``namespace`` (``<topology_id>:<state name>``;
    schemes: ``state/backends.py``).

    ``fence_scope``: the name whose fence guards the backing's writes (the engine passes
    the topology id, so one epoch raised when a driver starts fences all its maps);
    default: the namespace itself.

    ``memory://`` -> one ``MemoryMapBacking`` per namespace in this process (the driver);
    ``redis://[user:password@]host:port/db`` and ``rediss://`` -> ``RedisMapBacking``.
    """
    from state.backends import USER_STATE, opener

    backing = opener(USER_STATE, url)(url, namespace, fence_scope=fence_scope or namespace, **options)
    return cast(MapBacking, backing)


def open_memory_backing(url: str, namespace: str, *, fence_scope: str, **options: Any) -> MemoryMapBacking:
    """``memory://``: the one ``MemoryMapBacking`` of ``namespace`` in this process (a
    namespace is ``<scope>:<name>`` here as in every backing: ``state.keys.key_prefix``)."""
    key_prefix(namespace)
    with _memory_guard:
        fence = _memory_fences.setdefault(fence_scope, FenceCell())
        b = _memory_backings.get(namespace)
        if b is None:
            b = _memory_backings[namespace] = MemoryMapBacking(fence, namespace)
        return b


def reset_memory_maps(prefix: str = "") -> None:
    """Forget in-memory maps (and their fences) whose namespace starts with ``prefix``. For tests."""
    with _memory_guard:
        for d in (_memory_backings, _memory_fences):
            for k in [k for k in d if k.startswith(prefix)]:
                del d[k]
