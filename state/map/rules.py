"""The exactly-once rules, as pure functions over stored values (``state.map``'s docstring):
what each flavour stores, the value before a batch, and the stored keys a map keeps for itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, NamedTuple, TypeVar

from state.errors import StateAheadError, StateCorruptError, UnstorableValueError
from state.keys import decode_key

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


_new = tuple.__new__   # a value made from its fields' tuple (in C: the values are made per key)


class TransactionalValue(NamedTuple):
    """A ``TransactionalMap``'s stored value of a key (Storm's ``TransactionalValue``, with
    the value before its txid): stored ``{"txid": t, "val": v, "prev": p}``. Immutable.

    ``has_prev`` is False for the older form ``{"txid", "val"}`` (written by an older
    version): its value before ``txid`` is unknown, so its own txid's update is skipped.

    >>> v = TransactionalValue.from_stored("k", None).update(3, None, 5)
    >>> v.to_stored(), v.get(3), v.get(4)
    ({'txid': 3, 'val': 5, 'prev': None}, None, 5)
    >>> v.update(3, None, 7).to_stored()        # a replay of 3 builds on the value before it
    {'txid': 3, 'val': 7, 'prev': None}
    """

    txid: int
    val: Any
    prev: Any = None
    has_prev: bool = True

    @classmethod
    def from_stored(cls, key: Any, stored: Any) -> TransactionalValue:
        """The value of a stored ``{txid, val[, prev]}`` (None: absent, txid 0);
        ``StateCorruptError`` naming ``key`` for anything else."""
        if stored is None:
            return _ABSENT_T
        s = stored if type(stored) is dict and "txid" in stored and "val" in stored else _checked(
            key, stored, ("txid", "val"), "TransactionalMap")
        if "prev" in s:
            return _new(cls, (s["txid"], s["val"], s["prev"], True))
        return _new(cls, (s["txid"], s["val"], None, False))

    def get(self, txid: int, key: Any = None) -> Any:
        """The value before batch ``txid``: ``prev`` when an earlier attempt of ``txid``
        wrote this value, else ``val``. A newer txid raises ``StateAheadError`` naming ``key``."""
        if self.txid > txid:
            raise StateAheadError(_ahead(key, self.txid, txid))
        return self.prev if self.txid == txid and self.has_prev else self.val

    @classmethod
    def befores(cls, keys: list[str], stored: list[Any], txid: int) -> tuple[list[Any], list[int]]:
        """``from_stored(key, stored[i]).get(txid)`` for a batch of (encoded) ``keys``, in one
        pass -- a map's load -- and the indexes of the values ``txid`` itself wrote (an
        earlier attempt of it; ``applied`` or a replay's). The common case, a value an older
        batch wrote, is read off the stored dict (the properties check it against ``get``)."""
        out: list[Any] = []
        same: list[int] = []
        append = out.append
        for i, s in enumerate(stored):
            if s is None:
                append(None)
            elif type(s) is dict and type(s.get("txid")) is int and s["txid"] < txid and "val" in s:
                append(s["val"])
            else:
                name = decode_key(keys[i])
                v = cls.from_stored(name, s)
                append(v.get(txid, name))
                if v.txid == txid:
                    same.append(i)
        return out, same

    def applied(self, txid: int) -> bool:
        """True for the older form written by ``txid`` itself: its update is skipped."""
        return self.txid == txid and not self.has_prev

    def update(self, txid: int, attempt: int | None, new: Any) -> TransactionalValue:
        """What batch ``txid`` stores for user value ``new`` (built on ``get(txid)``); itself
        when ``applied(txid)``. ``attempt`` is not stored: a replay is the identical batch."""
        if self.txid < txid:          # the common case first: a key last written by an older batch
            return _new(TransactionalValue, (txid, new, self.val, True))
        if self.applied(txid):
            return self
        return _new(TransactionalValue, (txid, new, self.get(txid), True))

    @staticmethod
    def stored_updates(txid: int, attempt: int | None, news: list[Any], befores: list[Any]) -> list[dict[str, Any]]:
        """``update(txid, attempt, news[i]).to_stored()`` of values whose ``get(txid)`` is
        ``befores[i]`` (none ``applied``), made for a batch of keys in one step: what a
        commit writes."""
        return [{"txid": txid, "val": n, "prev": b} for n, b in zip(news, befores, strict=True)]

    def committed(self, last_committed: int | None) -> Any:
        """What a read outside a commit sees: ``val``, or ``prev`` when a txid after
        ``last_committed`` (not committed yet) wrote it."""
        if last_committed is not None and self.txid > last_committed and self.has_prev:
            return self.prev
        return self.val

    def to_stored(self) -> dict[str, Any]:
        """The stored form."""
        if not self.has_prev:
            return {"txid": self.txid, "val": self.val}
        return {"txid": self.txid, "val": self.val, "prev": self.prev}


class OpaqueValue(NamedTuple):
    """An ``OpaqueMap``'s stored value of a key (Storm's ``OpaqueValue``): stored
    ``{"txid": t, "attempt": a, "curr": c, "prev": p}``. Immutable.

    >>> v = OpaqueValue.from_stored("k", {"txid": 2, "attempt": 1, "curr": 5, "prev": 3})
    >>> v.get(2), v.get(3)                      # a replay of 2 builds on prev
    (3, 5)
    >>> v.update(2, 4, 9).to_stored()
    {'txid': 2, 'attempt': 4, 'curr': 9, 'prev': 3}
    """

    txid: int
    curr: Any
    prev: Any = None
    attempt: int | None = None

    @classmethod
    def from_stored(cls, key: Any, stored: Any) -> OpaqueValue:
        """The value of a stored ``{txid, curr, prev[, attempt]}`` (None: absent, txid 0);
        ``StateCorruptError`` naming ``key`` for anything else."""
        if stored is None:
            return _ABSENT_O
        s = stored if type(stored) is dict and "txid" in stored and "curr" in stored and "prev" in stored else (
            _checked(key, stored, ("txid", "curr", "prev"), "OpaqueMap"))
        return _new(cls, (s["txid"], s["curr"], s["prev"], s.get("attempt")))

    def get(self, txid: int, key: Any = None) -> Any:
        """The committed value before batch ``txid``: ``prev`` when ``txid`` wrote this
        value, else ``curr``. A newer txid raises ``StateAheadError`` naming ``key``."""
        if self.txid > txid:
            raise StateAheadError(_ahead(key, self.txid, txid))
        return self.prev if self.txid == txid else self.curr

    @classmethod
    def befores(cls, keys: list[str], stored: list[Any], txid: int) -> list[Any]:
        """``from_stored(key, stored[i]).get(txid)`` for a batch of (encoded) ``keys``, in one
        pass: a map's load. The common case, a value an older batch wrote, is read off the
        stored dict (the properties check it against ``get``)."""
        out: list[Any] = []
        append = out.append
        for i, s in enumerate(stored):
            if s is None:
                append(None)
            elif type(s) is dict and type(s.get("txid")) is int and s["txid"] < txid and "curr" in s and "prev" in s:
                append(s["curr"])
            else:
                name = decode_key(keys[i])
                append(cls.from_stored(name, s).get(txid, name))
        return out

    def update(self, txid: int, attempt: int | None, new: Any) -> OpaqueValue:
        """What attempt ``attempt`` of batch ``txid`` stores for user value ``new``."""
        return _new(OpaqueValue, (txid, new, self.get(txid), attempt))

    @staticmethod
    def stored_updates(txid: int, attempt: int | None, news: list[Any], befores: list[Any]) -> list[dict[str, Any]]:
        """``update(txid, attempt, news[i]).to_stored()`` of values whose ``get(txid)`` is
        ``befores[i]``, made for a batch of keys in one step: what a commit writes."""
        return [{"txid": txid, "attempt": attempt, "curr": n, "prev": b} for n, b in zip(news, befores, strict=True)]

    def committed(self, last_committed: int | None) -> Any:
        """What a read outside a commit sees: ``curr``, or ``prev`` when a txid after
        ``last_committed`` (not committed yet) wrote it."""
        if last_committed is not None and self.txid > last_committed:
            return self.prev
        return self.curr

    def failed(self, txid: int, attempt: int | None) -> bool:
        """True when another attempt of ``txid`` than ``attempt`` wrote this value (one
        that did not commit: ``rollback`` puts it back)."""
        return self.txid == txid and self.attempt not in (None, attempt)

    def rolled_back(self) -> OpaqueValue:
        """This value with what its txid wrote taken back: the value before it, no attempt."""
        return OpaqueValue(self.txid, self.prev, self.prev, None)

    def to_stored(self) -> dict[str, Any]:
        """The stored form."""
        return {"txid": self.txid, "attempt": self.attempt, "curr": self.curr, "prev": self.prev}


_ABSENT_T = TransactionalValue(0, None)
_ABSENT_O = OpaqueValue(0, None)


@dataclass(frozen=True)
class CounterRecord:
    """What a counter map keeps of its last added txid, as read with its values:
    ``applied`` (the map's marker, 0 for none), ``txid`` (the txid of the before-values
    record, None when there is none: a map written by an older version) and ``before``
    (for the keys read that ``txid`` added to: the value before it, None for absent)."""

    applied: int = 0
    txid: int | None = None
    before: dict[str, Any] = dataclass_field(default_factory=dict)

    def added(self, txid: int | None) -> bool:
        """True when batch ``txid`` was added already: its add writes nothing (the rule
        ``LUA_FENCED_ADD`` runs on the server as ``applied >= t``)."""
        return txid is not None and self.applied >= txid

    def get(self, key: str, stored: Any, txid: int) -> Any:
        """The value before batch ``txid`` of a counter key (encoded) holding ``stored``: the
        record's before-value when ``txid`` was added already (an earlier attempt of it
        wrote), else ``stored``. A map added to by a newer txid raises ``StateAheadError``."""
        if self.applied > txid:
            raise StateAheadError(_ahead(decode_key(key), self.applied, txid))
        if self.applied == txid and self.txid == txid and key in self.before:
            return self.before[key]
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

