"""Trident's operations in Python: functions, filters, aggregators, state queries and
updaters (docs/trident.md). Subclass the ``Base*`` classes as in Storm.

A function sees a ``TridentTuple`` of its input fields only (Storm's projection) and
emits the values of its output fields; Trident appends them to the input tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from transactional.tuples import Fields


class TridentTuple(tuple[Any, ...]):
    """The values an operation sees, by position or by field name: ``t[0]``, ``t["word"]``,
    ``t.get_value_by_field("word")``. A subclass per operation carries the field names."""

    __slots__ = ()
    fields: Fields = Fields()
    _pos: dict[str, int] = {}

    @classmethod
    def of(cls, fields: Fields | Sequence[str]) -> type[TridentTuple]:
        """The tuple class for ``fields``; call it with the values to make a tuple:

        >>> t = TridentTuple.of(Fields("word", "count"))(("cow", 2))
        >>> t["count"], t.get_value_by_field("word"), t.select(Fields("count", "word"))
        (2, 'cow', [2, 'cow'])
        """
        if not isinstance(fields, Fields):
            fields = Fields(*fields)
        return type("TridentTuple", (cls,), {"__slots__": (), "fields": fields,
                                             "_pos": {f: i for i, f in enumerate(fields)}})

    @classmethod
    def make(cls, fields: Fields | Sequence[str], values: Sequence[Any]) -> TridentTuple:
        """A tuple of ``values`` named ``fields`` (one value per field)."""
        tt = cls.of(fields)
        if len(values) != len(tt.fields):
            msg = f"{len(values)} values {tuple(values)!r} for {len(tt.fields)} fields {list(tt.fields)}"
            raise ValueError(msg)
        return tt(tuple(values))

    def __getitem__(self, key: Any) -> Any:
        if type(key) is str:
            try:
                key = self._pos[key]
            except KeyError:
                msg = f"no field {key!r} in this tuple; fields: {list(self.fields)}"
                raise KeyError(msg) from None
        return tuple.__getitem__(self, key)

    def get_value(self, i: int) -> Any:
        """The value at position ``i``."""
        return tuple.__getitem__(self, i)

    def get_value_by_field(self, name: str) -> Any:
        """The value of field ``name``."""
        return self[name]

    def get_fields(self) -> Fields:
        """The field names."""
        return self.fields

    def get_values(self) -> list[Any]:
        """The values, in field order (Storm's ``getValues``)."""
        return list(self)

    def size(self) -> int:
        """The number of values (Storm's ``size``)."""
        return len(self)

    def contains(self, name: str) -> bool:
        """Whether the tuple has field ``name`` (Storm's ``contains``)."""
        return name in self._pos

    def field_index(self, name: str) -> int:
        """The position of field ``name`` (Storm's ``fieldIndex``); ``KeyError`` naming the
        tuple's fields when it has no such field."""
        try:
            return self._pos[name]
        except KeyError:
            msg = f"no field {name!r} in this tuple; fields: {list(self.fields)}"
            raise KeyError(msg) from None

    def select(self, fields: Fields | Sequence[str]) -> list[Any]:
        """The values of ``fields``, in that order (Storm's ``select``)."""
        return [tuple.__getitem__(self, self.field_index(f)) for f in fields]

    def __repr__(self) -> str:
        return "TridentTuple(" + ", ".join(f"{f}={v!r}" for f, v in zip(self.fields, self, strict=False)) + ")"


class TridentCollector:
    """What a function, an aggregator or a query emits into: ``emit(values)`` adds a tuple of
    the operation's output fields (a tuple, a list, or ``Values(...)``)."""

    def emit(self, values: Sequence[Any]) -> None:
        """Emit one tuple of the operation's output fields."""
        raise NotImplementedError

    def report_error(self, error: BaseException) -> None:
        """Log ``error`` without failing the batch."""
        import logging

        logging.getLogger("trident").warning("reported: %r", error)


class Operation:
    """Anything Trident runs: ``prepare`` once per task and batch, ``cleanup`` after it."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        """Called before the first tuple of a batch in each task."""

    def cleanup(self) -> None:
        """Called after the batch in each task."""


class Function(Operation):
    """Storm's ``Function``: ``execute(tuple, collector)`` emits zero or more tuples of the
    output fields for each input tuple; each is appended to the input tuple."""

    def execute(self, tuple: TridentTuple, collector: TridentCollector) -> None:
        """Process one tuple."""
        raise NotImplementedError


BaseFunction = Function


class Filter(Operation):
    """Storm's ``Filter``: keeps the tuples for which ``is_keep`` is true."""

    def is_keep(self, tuple: TridentTuple) -> bool:
        """True to keep ``tuple``."""
        raise NotImplementedError


BaseFilter = Filter


class MapFunction(Operation):
    """Storm's ``MapFunction``: one tuple in, one tuple (the new values) out."""

    def execute(self, tuple: TridentTuple) -> Sequence[Any]:
        """The new values for ``tuple``."""
        raise NotImplementedError


class FlatMapFunction(Operation):
    """Storm's ``FlatMapFunction``: one tuple in, any number of tuples out."""

    def execute(self, tuple: TridentTuple) -> Iterable[Sequence[Any]]:
        """The tuples ``tuple`` becomes."""
        raise NotImplementedError


class CombinerAggregator(Operation):
    """Storm's ``CombinerAggregator``: ``init(tuple)`` turns a tuple into a value,
    ``combine`` merges two values, ``zero`` is the value of no tuples. Trident
    pre-aggregates combiners in each partition before the shuffle (partial aggregation),
    and a persistent aggregation stores the combined value."""

    def init(self, tuple: TridentTuple) -> Any:
        """The value of one tuple."""
        raise NotImplementedError

    def combine(self, val1: Any, val2: Any) -> Any:
        """Two values merged (associative and commutative)."""
        raise NotImplementedError

    def zero(self) -> Any:
        """The value of no tuples."""
        raise NotImplementedError


class ReducerAggregator(Operation):
    """Storm's ``ReducerAggregator``: ``reduce(curr, tuple)`` folds tuples into a value
    starting from ``init()``. No partial aggregation: every tuple crosses the shuffle."""

    def init(self) -> Any:
        """The starting value."""
        raise NotImplementedError

    def reduce(self, curr: Any, tuple: TridentTuple) -> Any:
        """``curr`` with ``tuple`` folded in."""
        raise NotImplementedError


class Aggregator(Operation):
    """Storm's ``Aggregator``: ``init(batch_id, collector)`` makes a state per batch (and
    group), ``aggregate(state, tuple, collector)`` sees each tuple, and
    ``complete(state, collector)`` emits any number of result tuples."""

    def init(self, batch_id: Any, collector: TridentCollector) -> Any:
        """A new state for a batch (and group)."""
        raise NotImplementedError

    def aggregate(self, state: Any, tuple: TridentTuple, collector: TridentCollector) -> None:
        """Fold ``tuple`` into ``state`` (or emit)."""
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        """Emit the results of ``state``."""
        raise NotImplementedError


BaseAggregator = Aggregator


class QueryFunction(Operation):
    """Storm's ``QueryFunction``: ``batch_retrieve(state, tuples)`` reads the state once for
    a batch's tuples (one result per tuple); ``execute(tuple, result, collector)`` emits
    from each tuple and its result."""

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        """One result per tuple, read from ``state`` in one go."""
        raise NotImplementedError

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        """Emit from one tuple and its result."""
        raise NotImplementedError


BaseQueryFunction = QueryFunction


class StateUpdater(Operation):
    """Storm's ``StateUpdater`` (for ``partition_persist``): ``update_state(state, tuples,
    collector)`` applies a partition's tuples of a batch to the state, in the commit phase."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Apply ``tuples`` to ``state``."""
        raise NotImplementedError


BaseStateUpdater = StateUpdater


class BatchFunction(Operation):
    """The columnar path: ``execute_batch(batch)`` takes a whole ``pyarrow.RecordBatch`` of
    the input fields and returns a ``RecordBatch`` (or ``Table``) of the output fields, for
    ``Stream.each_batch`` (output appended to the input, so it must keep the row count) and
    ``Stream.map_batches`` (output replaces the input; any row count). A plain function
    ``fn(batch) -> batch`` works too."""

    def execute_batch(self, batch: Any) -> Any:
        """The output columns for ``batch``."""
        raise NotImplementedError


class MultiReducer(Operation):
    """Storm's ``MultiReducer`` (``TridentTopology.multi_reduce`` over streams): per task
    and batch, ``init(collector)`` makes a state, ``execute(state, stream_index, tuple,
    collector)`` sees each tuple of every stream (``stream_index``: its position in the
    streams given), and ``complete(state, collector)`` emits the results."""

    def init(self, collector: TridentCollector) -> Any:
        """A new state for a batch."""
        raise NotImplementedError

    def execute(self, state: Any, stream_index: int, tuple: TridentTuple, collector: TridentCollector) -> None:
        """Fold one tuple of stream ``stream_index`` into ``state`` (or emit)."""
        raise NotImplementedError

    def complete(self, state: Any, collector: TridentCollector) -> None:
        """Emit the results of ``state``."""
        raise NotImplementedError


class GroupedMultiReducer(Operation):
    """Storm's ``GroupedMultiReducer`` (``multi_reduce`` over grouped streams): as
    ``MultiReducer``, per group; each method also gets the group's key fields as a tuple,
    and the output is the group fields followed by what ``complete`` emits."""

    def init(self, collector: TridentCollector, group: TridentTuple) -> Any:
        """A new state for a group of a batch."""
        raise NotImplementedError

    def execute(self, state: Any, stream_index: int, group: TridentTuple, tuple: TridentTuple,
                collector: TridentCollector) -> None:
        """Fold one tuple of stream ``stream_index`` into the group's ``state``."""
        raise NotImplementedError

    def complete(self, state: Any, group: TridentTuple, collector: TridentCollector) -> None:
        """Emit the group's results."""
        raise NotImplementedError
