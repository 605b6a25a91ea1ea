"""The state updaters ``persistent_aggregate`` compiles to (Storm's
``MapCombinerAggStateUpdater`` and ``MapReducerAggStateUpdater``): ``persistent_aggregate``
is ``partition_persist`` with one of these, and each writes through the map's one door,
``MapState.apply`` (``Combined`` / ``Updated``). The exactly-once rule lives in the map
passed in; the updaters do not know its flavour.

The commit-phase processor of such a ``partition_persist`` (``PersistProc``) gathers the
task's partials -- as Arrow columns when it can -- and hands them to ``write``;
``update_state`` is the same write for tuples ``(group fields..., value)``, as Storm's
``StateUpdater`` takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from state.map.updates import Combined, Updated
from trident.operation import CombinerAggregator, ReducerAggregator, StateUpdater, TridentCollector, TridentTuple
from trident.runtime.op import GLOBAL_KEY, Op


class MapAggStateUpdater(StateUpdater):
    """What ``persistent_aggregate`` compiles to: the user's aggregator ``agg`` folded into
    a map, per key, once per txid; ``groups``: how many group fields lead a tuple."""

    def __init__(self, agg: Any, groups: int) -> None:
        self.agg = agg
        self.groups = groups

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        """The aggregator's ``prepare`` (per task and batch)."""
        prepare = getattr(self.agg, "prepare", None)     # a plain object with combine/zero may have none
        if prepare is not None:
            prepare(conf, context)

    def cleanup(self) -> None:
        """The aggregator's ``cleanup``."""
        cleanup = getattr(self.agg, "cleanup", None)
        if cleanup is not None:
            cleanup()

    def write(self, state: Any, txid: int, keys: Any, values: Any, new_values: bool) -> list[Any] | None:
        """Fold ``values`` (one per key of ``keys``, lists or columns) into ``state`` in the
        commit of ``txid``; the new values (None when not ``new_values`` and the map can
        write without reading)."""
        raise NotImplementedError

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Storm's form: ``tuples`` lead with the group fields (then a combiner's partial,
        or a reducer's input fields); each key is written once, and ``(group fields...,
        new value)`` emitted per key."""
        ng = self.groups
        acc: dict[Any, list[Any]] = {}
        for t in tuples:
            vs = tuple(t)
            acc.setdefault(vs[0] if ng == 1 else vs[:ng] if ng else GLOBAL_KEY, []).append(self._item(t))
        keys = list(acc)
        new = self.write(state, state.scope.txid, keys, [self._fold(acc[k]) for k in keys], True) or []
        for k, v in zip(keys, new, strict=True):
            collector.emit([v] if ng == 0 else [k, v] if ng == 1 else [*k, v])

    def _item(self, t: TridentTuple) -> Any:
        """What of tuple ``t`` is folded."""
        raise NotImplementedError

    def _fold(self, items: list[Any]) -> Any:
        """A key's items as ``write`` takes its value."""
        raise NotImplementedError


class MapCombinerAggStateUpdater(MapAggStateUpdater):
    """A ``CombinerAggregator``'s partials combined into the stored value (its ``zero``
    for a new key); counts and sums as the map's ``"sum"`` (a counter map adds them
    without a read)."""

    def __init__(self, agg: CombinerAggregator, groups: int) -> None:
        super().__init__(agg, groups)

    def combiner(self) -> str | Callable[[Any, Any], Any]:
        """The map's combiner for this aggregator's partials."""
        agg = self.agg
        if getattr(agg, "arrow_agg", None) in ("count", "sum"):
            return "sum"
        zero = agg.zero

        def combine(old: Any, v: Any) -> Any:
            return agg.combine(zero() if old is None else old, v)
        return combine

    def write(self, state: Any, txid: int, keys: Any, values: Any, new_values: bool) -> list[Any] | None:
        """``state.apply(Combined(keys, values, combiner, new_values), txid)``."""
        new: list[Any] | None = state.apply(Combined(keys, values, self.combiner(), new_values), txid)
        return new

    def _item(self, t: TridentTuple) -> Any:
        return t[self.groups]

    def _fold(self, items: list[Any]) -> Any:
        out = items[0]
        for v in items[1:]:
            out = self.agg.combine(out, v)
        return out


class MapReducerAggStateUpdater(MapAggStateUpdater):
    """A ``ReducerAggregator`` run over each key's tuples of the batch, from the stored
    value (its ``init()`` for a new key); ``values`` are each key's tuples."""

    def __init__(self, agg: ReducerAggregator, groups: int) -> None:
        super().__init__(agg, groups)

    def write(self, state: Any, txid: int, keys: Any, values: Any, new_values: bool) -> list[Any] | None:
        """``state.apply(Updated(keys, reduce over each key's tuples), txid)``."""
        new: list[Any] = state.apply(Updated(keys, [_reduce_into(self.agg, ts) for ts in values]), txid)
        return new

    def _item(self, t: TridentTuple) -> Any:
        return t

    def _fold(self, items: list[Any]) -> Any:
        return items


def _reduce_into(fn: Any, ts: Sequence[Any]) -> Callable[[Any], Any]:
    """The update of one key's stored value by reducer ``fn`` over the tuples ``ts``."""
    def up(old: Any) -> Any:
        v = fn.init() if old is None else old
        for t in ts:
            v = fn.reduce(v, t)
        return v
    return up


def aggregates(op: Op) -> bool:
    """Whether ``op`` is a ``partition_persist`` that ``persistent_aggregate`` made."""
    return op.kind == "partition_persist" and isinstance(op.fn, MapAggStateUpdater)
