"""The exactly-once rules, as pure functions over stored values (``state.map``'s docstring):
what each flavour stores, the value before a batch, and the stored keys a map keeps for itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, TypeVar, cast

from state.errors import StateAheadError, StateCorruptError, UnstorableValueError
from state.keys import decode_key

V = TypeVar("V")
Updater = Callable[[Any], Any]
Combine = Callable[[Any, Any], Any]   # fn(old_or_None, arg) -> new


def _call(old: Any, update: Updater) -> Any:
    return update(old)


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

