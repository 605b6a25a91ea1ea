"""Trident's built-in operations: ``Count``, ``Sum``, ``Max``, ``Min``, ``FirstN``,
``MapGet``, ``Debug``.

``Count`` and ``Sum`` are combiner aggregators that the columnar path also runs as Arrow
hash aggregations (``arrow_agg``) when their input is a record batch; their partials
cross the shuffle as Arrow integers on both paths. Every sum Arrow makes is checked: one
that does not fit its 64-bit type stops the batch with ``AggregateOverflowError``
(docs/trident.md, "Numbers in Count and Sum").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from trident.operation import Aggregator, CombinerAggregator, Filter, QueryFunction, TridentCollector, TridentTuple


class Count(CombinerAggregator):
    """The number of tuples (Storm's ``Count``)."""

    arrow_agg = "count"

    def init(self, tuple: TridentTuple) -> int:
        """One tuple counts 1."""
        return 1

    def combine(self, val1: int, val2: int) -> int:
        """Counts add."""
        return val1 + val2

    def zero(self) -> int:
        """No tuples: 0."""
        return 0


class Sum(CombinerAggregator):
    """The sum of the first input field (Storm's ``Sum``): exact, or the batch stops with
    ``AggregateOverflowError`` when a sum that travels as a 64-bit integer does not fit."""

    arrow_agg = "sum"

    def init(self, tuple: TridentTuple) -> Any:
        """The tuple's value."""
        return tuple[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        """Values add."""
        return val1 + val2

    def zero(self) -> int:
        """No tuples: 0."""
        return 0


class Max(CombinerAggregator):
    """The largest value of the first input field (None for no tuples)."""

    def init(self, tuple: TridentTuple) -> Any:
        """The tuple's value."""
        return tuple[0]

    def combine(self, val1: Any, val2: Any) -> Any:
        """The larger; None is no value."""
        return val2 if val1 is None else val1 if val2 is None else max(val1, val2)

    def zero(self) -> Any:
        """No tuples: None."""
        return None


class Min(Max):
    """The smallest value of the first input field (None for no tuples)."""

    def combine(self, val1: Any, val2: Any) -> Any:
        """The smaller; None is no value."""
        return val2 if val1 is None else val1 if val2 is None else min(val1, val2)


class _Desc:
    """A value that orders the other way round (``_Desc(2) < _Desc(1)``): any comparable
    value, not only numbers."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and bool(self.v == other.v)

    __hash__ = None  # type: ignore[assignment]


class FirstN(Aggregator):
    """The first ``n`` tuples of a batch (or group), or with ``sort_field`` the ``n`` with the
    least values of that field, least first (the greatest, greatest first, with
    ``reverse=True``) -- Storm's ``FirstN`` / ``FirstNSortedAgg``. Of equal values the
    earlier tuple is kept. Emits whole input tuples: declare the output fields as the input
    fields. ``stream.apply_assembly(FirstN(...))`` runs it per partition, then once over the
    partitions' survivors (Storm's assembly).
    """

    def __init__(self, n: int, sort_field: str | None = None, reverse: bool = False) -> None:
        if not isinstance(n, int) or n < 1:
            msg = f"FirstN needs n >= 1; got {n!r}"
            raise ValueError(msg)
        self.n, self.sort_field, self.reverse = n, sort_field, reverse

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        """An empty selection: ``[kept, seen]``; sorted, ``kept`` is a heap whose root is
        the worst tuple kept."""
        return [[], 0]

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        """Keep ``tuple`` if it is among the first n so far."""
        kept, seen = state
        state[1] = seen + 1
        if self.sort_field is None:
            if len(kept) < self.n:
                kept.append(tuple)
            return
        v = tuple[self.sort_field]
        rank = (_Desc(v) if self.reverse else v, seen)     # smaller ranks first; ties: the earlier
        item = (_Desc(rank), tuple)                         # the heap's root: the largest rank kept
        if len(kept) < self.n:
            heapq.heappush(kept, item)
        elif rank < kept[0][0].v:
            heapq.heapreplace(kept, item)

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        """Emit the kept tuples (sorted: the first in order first)."""
        kept = state[0]
        if self.sort_field is None:
            for t in kept:
                collector.emit(t)
            return
        for _, t in sorted(kept, key=lambda it: it[0].v):
            collector.emit(t)

    def apply(self, stream: Any) -> Any:
        """Storm's assembly: FirstN in each partition, then over the partitions' results."""
        f = stream.fields
        return stream.partition_aggregate(f, self, f).global_().partition_aggregate(f, self, f)


class MapGet(QueryFunction):
    """The value stored under each tuple's key (its input fields: one field is the key
    itself, several make a tuple) in a map state; emits it as one field."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        """One ``multi_get`` for the batch."""
        values: list[Any] = state.multi_get([t[0] if len(t) == 1 else tuple(t) for t in tuples])
        return values

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        """Emit the value (None when absent)."""
        collector.emit((result,))


class Debug(Filter):
    """Prints every tuple (with an optional prefix) and keeps it."""

    def __init__(self, prefix: str = "DEBUG") -> None:
        self.prefix = prefix

    def is_keep(self, tuple: TridentTuple) -> bool:
        """Print and keep."""
        print(f"{self.prefix}: {tuple!r}", flush=True)
        return True


class FilterNull(Filter):
    """Storm's ``FilterNull``: drops a tuple any of whose input fields is None.

    >>> from trident.operation import TridentTuple
    >>> T = TridentTuple.of(__import__("transactional").Fields("a", "b"))
    >>> FilterNull().is_keep(T((1, None))), FilterNull().is_keep(T((1, 2)))
    (False, True)
    """

    def is_keep(self, tuple: TridentTuple) -> bool:
        """True when no input value is None."""
        return all(v is not None for v in tuple)


class Equals(Filter):
    """Storm's ``Equals``: keeps a tuple whose input fields are all equal."""

    def is_keep(self, tuple: TridentTuple) -> bool:
        """True when every input value equals the first."""
        return all(v == tuple[0] for v in tuple)


class Negate(Filter):
    """Storm's ``Negate``: keeps what ``filter`` drops, and drops what it keeps."""

    def __init__(self, filter: Filter) -> None:
        self.filter = filter

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        """Prepares the wrapped filter."""
        self.filter.prepare(conf, context)

    def is_keep(self, tuple: TridentTuple) -> bool:
        """The wrapped filter's answer, negated."""
        return not self.filter.is_keep(tuple)



class MinBy(Aggregator):
    """The least tuple of a partition: by the value of ``field``, or by ``comparator(t1, t2)``
    (negative when t1 is less); of equals the first is kept. Emits the whole input tuple
    (nothing for an empty partition). ``Stream.min_by`` and ``Stream.min`` run it."""

    greatest = False

    def __init__(self, field: str | None = None, comparator: Any = None) -> None:
        self.field, self.comparator = field, comparator

    def init(self, batch_id: Any, collector: TridentCollector) -> list[Any]:
        """No tuple yet."""
        return []

    def _before(self, a: TridentTuple, b: TridentTuple) -> bool:
        """Whether ``a`` replaces the kept ``b``."""
        c = self.comparator(a, b) if self.field is None else (
            -1 if a[self.field] < b[self.field] else 1 if b[self.field] < a[self.field] else 0)
        return bool(c > 0 if self.greatest else c < 0)

    def aggregate(self, state: list[Any], tuple: TridentTuple, collector: TridentCollector) -> None:
        """Keep ``tuple`` if it beats the kept one."""
        if not state:
            state.append(tuple)
        elif self._before(tuple, state[0]):
            state[0] = tuple

    def complete(self, state: list[Any], collector: TridentCollector) -> None:
        """Emit the kept tuple."""
        for t in state:
            collector.emit(t)


class MaxBy(MinBy):
    """The greatest tuple of a partition (see ``MinBy``); ``Stream.max_by``, ``Stream.max``."""

    greatest = True


class SnapshotGet(QueryFunction):
    """Storm's ``SnapshotGet``: the value of a global ``persistent_aggregate`` (the one
    stored under ``"$GLOBAL"``), as committed before this batch, for each tuple; emits it as
    one field (None before the first commit)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        """One read of the global value."""
        from trident.runtime.op import GLOBAL_KEY

        value = state.multi_get([GLOBAL_KEY])[0] if tuples else None
        return [value] * len(tuples)

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        """Emit the value."""
        collector.emit((result,))


class TupleCollectionGet(QueryFunction):
    """Storm's ``TupleCollectionGet``: every ``(key, value)`` of a map state (as committed
    before this batch) for each tuple; emits one tuple per entry, with the output fields
    ``key, value`` (a grouped map's key is one value, or a tuple of several). Meant for a
    broadcast query (``stream.broadcast().state_query(...)``); the map's backing must list
    its keys (memory, Redis)."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        """One listing of the map for the batch."""
        entries = sorted(state.items(), key=lambda kv: repr(kv[0])) if tuples else []
        return [entries] * len(tuples)

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        """Emit every entry."""
        for key, value in result:
            collector.emit((key, value))


class Peek(Filter):
    """``Stream.peek``: calls the user's function with each tuple and keeps every tuple."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def is_keep(self, tuple: Any) -> bool:
        """Call the function; keep the tuple."""
        self.fn(tuple)
        return True
