"""Trident's aggregator kinds (combiner, reducer, chained) as one ``Aggregator``: what the
aggregation processors run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transactional.tuples import Fields
from trident.operation import (
    Aggregator,
    CombinerAggregator,
    ReducerAggregator,
    TridentCollector,
    TridentTuple,
)
from trident.runtime import Row


class _CombinerAsAggregator(Aggregator):
    def __init__(self, c: CombinerAggregator) -> None:
        self.c = c

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return [self.c.zero()]

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        state[0] = self.c.combine(state[0], self.c.init(tuple))

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        collector.emit((state[0],))


class _ReducerAsAggregator(Aggregator):
    def __init__(self, r: ReducerAggregator) -> None:
        self.r = r

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        return [self.r.init()]

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        state[0] = self.r.reduce(state[0], tuple)

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        collector.emit((state[0],))


class _Chained(Aggregator):
    """Several aggregators over the same tuples; each sees its own input fields; the
    output is the cross product of their results (Storm's chained aggregation)."""

    def __init__(self, parts: list[tuple[Any, tuple[int, ...], Fields]]) -> None:
        self.parts = [(as_aggregator(a), idx, TridentTuple.of(f)) for a, idx, f in parts]

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        cols = [_ListCollect() for _ in self.parts]
        return [(a.init(batch_id, c), c) for (a, _, _), c in zip(self.parts, cols, strict=True)]

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        for (a, idx, tt), (s, c) in zip(self.parts, state, strict=True):
            a.aggregate(s, tt(tuple_pick(tuple, idx)), c)

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        import itertools

        for (a, _, _), (s, c) in zip(self.parts, state, strict=True):
            a.complete(s, c)
        for combo in itertools.product(*[c.out for _, c in state]):
            collector.emit(sum((tuple(v) for v in combo), ()))


def tuple_pick(t: Sequence[Any], idx: tuple[int, ...]) -> Row:
    """The values of ``t`` at ``idx``."""
    return tuple(t[i] for i in idx)


class _ListCollect(TridentCollector):
    def __init__(self) -> None:
        self.out: list[Row] = []

    def emit(self, values: Sequence[Any]) -> None:
        self.out.append(tuple(values))


def as_aggregator(agg: Any) -> Aggregator:
    """Any of Trident's aggregator kinds as an ``Aggregator``."""
    if isinstance(agg, CombinerAggregator):
        return _CombinerAsAggregator(agg)
    if isinstance(agg, ReducerAggregator):
        return _ReducerAsAggregator(agg)
    aggregator: Aggregator = agg
    return aggregator
