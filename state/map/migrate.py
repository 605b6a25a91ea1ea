"""Stored values of an earlier value version, migrated as they are read (a state's
``version`` and ``migrate``; docs/operations.md, "Changing a running topology").

A transactional or opaque map's stored value carries the txid that wrote it. When a new
version of a topology declares a state's values ``version=n`` with ``migrate=fn(value,
from_version)``, the driver records the switch: the last txid the earlier version
committed, ``T``, and that version (``boundaries``: ``[[T, from_version], ...]``, oldest
first). Every value stored by a txid ``<= T`` has the earlier shape, every later one the
new shape (a write after the switch stores what was read through ``fn``: ``curr`` and
``prev`` alike). So ``MigratingBacking`` turns a stored value into the new shape on its way
from the backing, deciding by its txid alone: the same on a replay, with nothing to copy
and nothing a crash could leave half done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: the fields holding a user value, per map kind
VALUE_FIELDS = {"transactional": ("val", "prev"), "opaque": ("curr", "prev")}


def from_version(txid: int, boundaries: Sequence[Sequence[int]]) -> int | None:
    """The version a value written by ``txid`` has (None: the current one).

    >>> from_version(3, [[5, 1], [9, 2]]), from_version(7, [[5, 1], [9, 2]]), from_version(10, [[5, 1]])
    (1, 2, None)
    """
    for last, version in boundaries:
        if txid <= last:
            return int(version)
    return None


def migrate_stored(stored: Any, kind: str, fn: Callable[[Any, int], Any], boundaries: Sequence[Sequence[int]]) -> Any:
    """``stored`` (a map's stored form) with its user values in the current shape."""
    if type(stored) is not dict or type(stored.get("txid")) is not int:
        return stored
    v = from_version(stored["txid"], boundaries)
    if v is None:
        return stored
    out = dict(stored)
    for f in VALUE_FIELDS[kind]:
        if out.get(f) is not None:
            out[f] = fn(out[f], v)
    return out


class MigratingBacking:
    """A backing whose ``multi_get`` gives every stored value in the current shape
    (module docstring); everything else is the wrapped backing's."""

    def __init__(self, backing: Any, kind: str, fn: Callable[[Any, int], Any], boundaries: Sequence[Sequence[int]]) -> None:
        self.wrapped, self.kind, self.fn, self.boundaries = backing, kind, fn, [list(b) for b in boundaries]

    def multi_get(self, keys: list[str]) -> list[Any]:
        """The wrapped backing's values, migrated."""
        return [migrate_stored(s, self.kind, self.fn, self.boundaries) for s in self.wrapped.multi_get(keys)]

    def __getattr__(self, name: str) -> Any:
        if name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)
