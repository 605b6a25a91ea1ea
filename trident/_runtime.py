"""What a compiled Trident stage runs: one ``TridentBolt`` per stage, a chain of processors
inside it (docs/trident.md, "Compilation").

A processor takes rows (plain tuples of the stream's fields at that point) or whole
``pyarrow.RecordBatch``-es, and passes its output to the next one; ``finish`` (the end
of the task's share of the batch) flows down the chain once. Every processor accepts
both forms: a per-tuple processor iterates a batch's rows, a columnar one collects rows
into a batch. The last processor emits: rows as tuples ``(attempt, *values)``, or a
batch as Arrow IPC buffers sent with ``emit_direct`` to the consumer's tasks (the
producer partitions the batch itself: by key hash for a fields grouping, in contiguous
slices for a shuffle), so no row is pickled on the columnar path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from transactional.bolt import BaseBatchBolt, Committer
from transactional.columns import ColumnBatch, batch_of, rows_of
from transactional.engine import routing
from transactional.exceptions import AggregateOverflowError, InvalidTupleError
from transactional.tuples import Fields
from trident.operation import (
    Aggregator,
    CombinerAggregator,
    ReducerAggregator,
    TridentCollector,
    TridentTuple,
)
from trident.states import is_state_factory

ARROW_FIELD = "_arrow"
TX_FIELD = "_tx"


# -- Arrow helpers ---------------------------------------------------------------------------

def to_ipc(batch: Any) -> bytes:
    """A batch or table as one Arrow IPC stream buffer."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write(batch)
    return sink.getvalue().to_pybytes()


def from_ipc(buf: bytes) -> Any:
    """The table of an Arrow IPC stream buffer."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(buf)).read_all()


def _as_batch(out: Any, what: str) -> Any:
    import pyarrow as pa

    if isinstance(out, pa.Table):
        return out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([], out.schema)
    if isinstance(out, pa.RecordBatch):
        return out
    msg = f"{what} returned {type(out).__name__}; return a pyarrow.RecordBatch or Table"
    raise TypeError(msg)


def _concat(batches: list[Any]) -> Any:
    import pyarrow as pa

    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def key_of(row: tuple, idx: Sequence[int]) -> Any:
    """A map key of group fields: the value of one field, a tuple of several, ``"$GLOBAL"``
    for none (the one key of an ungrouped persistent aggregation)."""
    if len(idx) == 1:
        return row[idx[0]]
    if not idx:
        return GLOBAL_KEY
    return tuple(row[i] for i in idx)


GLOBAL_KEY = "$GLOBAL"


# -- operation specs (compiled once, shipped with the bolt) ----------------------------------

@dataclass
class Op:
    """One operation of a stage: its kind, the user's object, and the field positions it
    reads (``in_idx``, in the stream's fields at that point ``fields``)."""

    kind: str
    fields: Fields                    # the stream's fields before the operation
    out_fields: Fields                # the stream's fields after it
    fn: Any = None
    in_idx: tuple[int, ...] = ()
    in_fields: Fields = field(default_factory=Fields)
    group_idx: tuple[int, ...] = ()
    state: Any = None                 # MapStateFactory of persist / query ops
    emit_values: bool = True          # persist: its new values have a consumer
    columnar: bool = False            # its output is a record batch when its input is
    single: bool = False              # a global aggregation: one result per batch, from task 0


_VERB = {"persist": "persistent_aggregate", "query": "state_query", "partial": "aggregate", "final": "aggregate"}


def _fn_name(fn: Any) -> str:
    """A user's operation as its class (``Split``), or a plain function's name."""
    if isinstance(fn, (list, tuple)):
        return ""
    if isinstance(fn, _Chained):                  # chained aggregators: Sum+Count
        return "+".join(_fn_name(a) for a, _, _ in fn.parts)
    if isinstance(fn, _CombinerAsAggregator):     # adapters of the user's aggregators
        fn = fn.c
    elif isinstance(fn, _ReducerAsAggregator):
        fn = fn.r
    name = getattr(fn, "__name__", None) if not isinstance(fn, type) else fn.__name__
    return name if isinstance(name, str) else type(fn).__name__


def op_label(op: Op) -> str:
    """An operation as the user wrote it: ``each(Split)``, ``persistent_aggregate(word-counts)``,
    ``state_query(word-counts)``, ``project(word, count)`` (errors, metrics, the status page)."""
    verb = _VERB.get(op.kind, op.kind)
    if op.state is not None:
        what = str(getattr(op.state, "name", op.state))
    elif op.kind == "project":
        what = ", ".join(op.out_fields)
    else:
        what = _fn_name(op.fn) if op.fn is not None else ""
    return f"{verb}({what})"


# -- processors ------------------------------------------------------------------------------

OVERFLOW_HOLDER = "the type Count and Sum add in on the columnar and the per-tuple path alike"
OVERFLOW_FIX = ("Sum smaller numbers, cast the field to float64 or a decimal first (e.g. with each_batch), "
                "or use a CombinerAggregator of your own, which adds Python ints without bound")


class Proc:
    """A processor of rows and batches (see the module docstring)."""

    def __init__(self, op: Op | None, nxt: Proc | None) -> None:
        self.op = op
        self.nxt = nxt

    def open(self, bolt: TridentBolt) -> None:
        """Per task and batch, before any input."""
        self.stage, self.txid, self.task = bolt.context.component_id, bolt.attempt.txid, bolt.task
        if self.op is not None and self.op.fn is not None and hasattr(self.op.fn, "prepare"):
            self.op.fn.prepare(bolt.conf, bolt.op_context)

    def row(self, r: tuple) -> None:
        """One row."""
        raise NotImplementedError

    def rows(self, rs: list[tuple]) -> None:
        """Many rows (a columnar processor collects them at once)."""
        row = self.row
        for r in rs:
            row(r)

    def batch(self, b: Any) -> None:
        """A record batch: its rows, one by one (a columnar processor overrides this)."""
        row = self.row
        for r in rows_of(b):
            row(r)

    def overflow(self, e: SumOverflow, field: str, what: str, holder: str = OVERFLOW_HOLDER,
                 fix: str = OVERFLOW_FIX) -> AggregateOverflowError:
        """The error for a sum of this operation that does not fit its type: names the
        aggregator, the field, the stage, the txid, the group, and the fix."""
        agg = type(self.op.fn).__name__ if self.op is not None else "a sum"
        group = f" for group {e.key!r}" if e.key != () else ""
        msg = (f"{agg}() of field {field!r} in stage {self.stage!r} (txid {self.txid}): {what}{group} is "
               f"{e.value}, beyond {e.type}, {holder}; the batch stops rather than commit a wrapped "
               f"number. {fix}")
        return AggregateOverflowError(msg)

    def finish(self) -> None:
        """The end of the task's input."""
        if self.op is not None and self.op.fn is not None and hasattr(self.op.fn, "cleanup"):
            self.op.fn.cleanup()
        if self.nxt is not None:
            self.nxt.finish()


class _Collect(TridentCollector):
    """What an operation emits into: each emit is ``current`` (the row a function is on, or
    the group an aggregator is completing) plus the emitted values, pushed downstream."""

    __slots__ = ("current", "push", "width", "what")

    def __init__(self, push: Callable[[tuple], None], width: int, what: str) -> None:
        self.current: tuple = ()
        self.push = push
        self.width = width
        self.what = what

    def emit(self, values: Sequence[Any]) -> None:
        if type(values) is not tuple:
            values = tuple(values)
        if len(values) != self.width:
            msg = (f"{self.what} emitted {len(values)} values {values!r}, but it declares {self.width} output "
                   f"field{'' if self.width == 1 else 's'}: emit exactly that many, or declare the fields it emits")
            raise InvalidTupleError(msg)
        self.push(self.current + values)


class EachProc(Proc):
    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.tt = TridentTuple.of(op.in_fields)
        self.collector = _Collect(self.nxt.row, len(op.out_fields) - len(op.fields), op_label(op))
        self.execute = op.fn.execute
        self.pick = _picker(op.in_idx)
        c, tt, pick, execute = self.collector, self.tt, self.pick, self.execute

        def row(r: tuple) -> None:          # the per-tuple hot path: one closure, no lookups
            c.current = r
            execute(tt(pick(r)), c)
        self.row = row  # type: ignore[method-assign]

    def row(self, r: tuple) -> None:
        c = self.collector
        c.current = r
        self.execute(self.tt(self.pick(r)), c)


def _picker(idx: tuple[int, ...]) -> Callable[[tuple], tuple]:
    """A function taking the values at ``idx`` of a row."""
    if len(idx) == 1:
        i = idx[0]
        return lambda r: (r[i],)
    return lambda r: tuple(r[i] for i in idx)


class FilterProc(Proc):
    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.tt = TridentTuple.of(op.in_fields)
        keep = op.fn.is_keep if hasattr(op.fn, "is_keep") else op.fn
        idx, tt, push = op.in_idx, self.tt, self.nxt.row

        def row(r: tuple) -> None:
            if keep(tt(tuple(r[i] for i in idx))):
                push(r)
        self.row = row  # type: ignore[method-assign]


class MapProc(Proc):
    """``map`` (one tuple out) and ``flat_map`` (any number out): the output replaces the row."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        fn = op.fn.execute if hasattr(op.fn, "execute") else op.fn
        idx, tt, push, width = op.in_idx, TridentTuple.of(op.in_fields), self.nxt.row, len(op.out_fields)

        def check(v: Any) -> tuple:
            v = v if type(v) is tuple else tuple(v) if isinstance(v, (list, tuple)) else (v,)
            if len(v) != width:
                msg = f"{op.kind} produced {v!r}; its output fields are {list(op.out_fields)}"
                raise ValueError(msg)
            return v

        if op.kind == "map":
            def row(r: tuple) -> None:
                push(check(fn(tt(tuple(r[i] for i in idx)))))
        else:
            def row(r: tuple) -> None:
                for v in fn(tt(tuple(r[i] for i in idx))):
                    push(check(v))
        self.row = row  # type: ignore[method-assign]


class ProjectProc(Proc):
    def row(self, r: tuple) -> None:
        assert self.op is not None and self.nxt is not None
        self.nxt.row(tuple(r[i] for i in self.op.in_idx))

    def batch(self, b: Any) -> None:
        assert self.op is not None and self.nxt is not None
        self.nxt.batch(b.select(list(self.op.out_fields)))


class BatchProc(Proc):
    """The columnar functions: ``each_batch`` (columns appended) and ``map_batches``
    (the output replaces the batch). Rows arriving are collected into one batch."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        self.pending: list[tuple] = []
        self.batches: list[Any] = []

    def row(self, r: tuple) -> None:
        self.pending.append(r)

    def rows(self, rs: list[tuple]) -> None:
        self.pending.extend(rs)

    def batch(self, b: Any) -> None:
        self.batches.append(b)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        if self.pending:
            self.batches.append(batch_of(self.pending, op.fields))
        if self.batches:
            b = _concat(self.batches)
            fn = op.fn.execute_batch if hasattr(op.fn, "execute_batch") else op.fn
            out = _as_batch(fn(b.select(list(op.in_fields))), op.kind)
            if op.kind == "each_batch":
                if out.num_rows != b.num_rows:
                    msg = (f"each_batch function returned {out.num_rows} rows for {b.num_rows}; "
                           "each_batch keeps the rows (use map_batches to change them)")
                    raise ValueError(msg)
                import pyarrow as pa

                out = pa.RecordBatch.from_arrays(b.columns + out.columns, names=list(op.out_fields))
            elif list(out.schema.names) != list(op.out_fields):
                msg = f"map_batches function returned columns {out.schema.names}; declared {list(op.out_fields)}"
                raise ValueError(msg)
            nxt.batch(out)
        super().finish()


class AggregateProc(Proc):
    """Any aggregator over the task's rows, per group (``group_idx``) or over all of them.
    Emits ``group values + aggregator output`` at the end. Combiner and reducer
    aggregators run as the equivalent ``Aggregator``."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.agg = as_aggregator(op.fn)
        self.tt = TridentTuple.of(op.in_fields)
        self.attempt = bolt.attempt
        self.collector = _Collect(self.nxt.row, len(op.out_fields) - len(op.group_idx), op_label(op))
        self.states: dict[Any, Any] = {}
        if not op.group_idx and (not op.single or self.task == 0):
            # ungrouped: a result even for no tuples -- in every task of a partition
            # aggregation, in the one task a global aggregation's tuples go to
            self.states[()] = self.agg.init(self.attempt, self.collector)

    def row(self, r: tuple) -> None:
        op = self.op
        assert op is not None
        g = tuple(r[i] for i in op.group_idx)
        s = self.states.get(g, _MISSING)
        if s is _MISSING:
            self.collector.current = g
            s = self.states[g] = self.agg.init(self.attempt, self.collector)
        self.collector.current = g
        self.agg.aggregate(s, self.tt(tuple(r[i] for i in op.in_idx)), self.collector)

    def finish(self) -> None:
        c = self.collector
        for g, s in self.states.items():
            c.current = g
            self.agg.complete(s, c)
        super().finish()


_MISSING = object()


class _CombinerAsAggregator(Aggregator):
    def __init__(self, c: CombinerAggregator) -> None:
        self.c = c

    def init(self, batch_id: Any, collector: TridentCollector) -> list:
        return [self.c.zero()]

    def aggregate(self, state: list, tuple: TridentTuple, collector: TridentCollector) -> None:
        state[0] = self.c.combine(state[0], self.c.init(tuple))

    def complete(self, state: list, collector: TridentCollector) -> None:
        collector.emit((state[0],))


class _ReducerAsAggregator(Aggregator):
    def __init__(self, r: ReducerAggregator) -> None:
        self.r = r

    def init(self, batch_id: Any, collector: TridentCollector) -> list:
        return [self.r.init()]

    def aggregate(self, state: list, tuple: TridentTuple, collector: TridentCollector) -> None:
        state[0] = self.r.reduce(state[0], tuple)

    def complete(self, state: list, collector: TridentCollector) -> None:
        collector.emit((state[0],))


class _Chained(Aggregator):
    """Several aggregators over the same tuples; each sees its own input fields; the
    output is the cross product of their results (Storm's chained aggregation)."""

    def __init__(self, parts: list[tuple[Any, tuple[int, ...], Fields]]) -> None:
        self.parts = [(as_aggregator(a), idx, TridentTuple.of(f)) for a, idx, f in parts]

    def init(self, batch_id: Any, collector: TridentCollector) -> list:
        cols = [_ListCollect() for _ in self.parts]
        return [(a.init(batch_id, c), c) for (a, _, _), c in zip(self.parts, cols, strict=True)]

    def aggregate(self, state: list, tuple: TridentTuple, collector: TridentCollector) -> None:
        for (a, idx, tt), (s, c) in zip(self.parts, state, strict=True):
            a.aggregate(s, tt(tuple_pick(tuple, idx)), c)

    def complete(self, state: list, collector: TridentCollector) -> None:
        import itertools

        for (a, _, _), (s, c) in zip(self.parts, state, strict=True):
            a.complete(s, c)
        for combo in itertools.product(*[c.out for _, c in state]):
            collector.emit(sum((tuple(v) for v in combo), ()))


def tuple_pick(t: Sequence[Any], idx: tuple[int, ...]) -> tuple:
    """The values of ``t`` at ``idx``."""
    return tuple(t[i] for i in idx)


class _ListCollect(TridentCollector):
    def __init__(self) -> None:
        self.out: list[tuple] = []

    def emit(self, values: Sequence[Any]) -> None:
        self.out.append(tuple(values))


def as_aggregator(agg: Any) -> Aggregator:
    """Any of Trident's aggregator kinds as an ``Aggregator``."""
    if isinstance(agg, CombinerAggregator):
        return _CombinerAsAggregator(agg)
    if isinstance(agg, ReducerAggregator):
        return _ReducerAsAggregator(agg)
    return agg


class PartialProc(Proc):
    """Partial aggregation of a combiner before the shuffle: per group (or in all), the
    combined value of the task's rows; emits ``(group..., partial)``. On a record batch,
    ``Count``/``Sum`` run as one Arrow hash aggregation."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.c = op.fn
        self.tt = TridentTuple.of(op.in_fields)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []
        self.count = getattr(self.c, "arrow_agg", None) == "count"
        if self.count and len(op.group_idx) == 1:
            acc, get, i = self.acc, self.acc.get, op.group_idx[0]

            def count(r: tuple) -> None:    # Count by one field: the per-tuple hot path
                k = r[i]
                acc[k] = get(k, 0) + 1
            self.row = count  # type: ignore[method-assign]

    def row(self, r: tuple) -> None:
        op = self.op
        assert op is not None
        gi = op.group_idx
        k = r[gi[0]] if len(gi) == 1 else tuple(r[i] for i in gi)
        acc = self.acc
        if self.count:
            acc[k] = acc.get(k, 0) + 1
            return
        v = self.c.init(self.tt(tuple(r[i] for i in op.in_idx)))
        old = acc.get(k, _MISSING)
        acc[k] = v if old is _MISSING else self.c.combine(old, v)

    def batch(self, b: Any) -> None:
        if getattr(self.c, "arrow_agg", None) is None:
            super().batch(b)
        elif b.num_rows:           # no rows, no partial (as on the per-tuple path)
            self.batches.append(b)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        group = [op.fields[i] for i in op.group_idx]
        if self.batches:
            column = None if self.count else op.in_fields[0]
            try:
                b = arrow_group_agg(_concat(self.batches), group, column, self.c.arrow_agg, op.out_fields[-1])
            except SumOverflow as e:
                raise self.overflow(e, column or op.out_fields[-1], "its partial sum") from None
            nxt.batch(b)
        if self.acc:
            if getattr(self.c, "arrow_agg", None) is not None:
                try:
                    b = _acc_batch(self.acc, group, op.out_fields[-1])   # numbers: one Arrow batch
                except SumOverflow as e:
                    raise self.overflow(e, op.in_fields[0] if op.in_fields else op.out_fields[-1],
                                        "its partial sum") from None
                nxt.batch(b)
            elif len(op.group_idx) == 1:
                for k, v in self.acc.items():
                    nxt.row((k, v))
            else:
                for k, v in self.acc.items():
                    nxt.row((*k, v))
        Proc.finish(self)


def _acc_batch(acc: dict[Any, Any], group: list[str], out: str) -> Any:
    """A dict of partials (key: one group value, a tuple of several, or ``()``) as a record
    batch ``(*group, out)``. Raises ``SumOverflow`` for a partial beyond Arrow's integers."""
    import pyarrow as pa

    try:
        values = pa.array(list(acc.values()))
    except OverflowError:
        big = [(k, v) for k, v in acc.items() if isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63]
        if not big:
            raise
        raise SumOverflow(*big[0], "int64") from None
    if len(group) == 1:
        cols = [pa.array(list(acc)), values]
    else:
        keys = list(zip(*acc, strict=True)) if group else []
        cols = [pa.array(list(c)) for c in keys] + [values]
    return pa.RecordBatch.from_arrays(cols, names=[*group, out])


class SumOverflow(ArithmeticError):
    """A sum of ``key``'s group (``()`` for no group) is ``value``, beyond ``type``."""

    def __init__(self, key: Any, value: Any, type: str) -> None:
        super().__init__(key, value, type)
        self.key, self.value, self.type = key, value, type


def _sum_range(t: Any) -> tuple[Any, Any] | None:
    """The values a sum of Arrow type ``t`` holds, ``[low, high)``; None when it cannot
    wrap (floating point: it overflows to infinity, as Python's floats do)."""
    import pyarrow as pa

    if pa.types.is_signed_integer(t):
        return -2 ** 63, 2 ** 63
    if pa.types.is_unsigned_integer(t):
        return 0, 2 ** 64
    if pa.types.is_decimal(t):
        import decimal

        bound = decimal.Decimal(10) ** (t.precision - t.scale)
        return -bound, bound
    return None


def _check_sums(t: Any, group: list[str], column: str, type: Any) -> None:
    """Raise ``SumOverflow`` if Arrow's sums of ``column`` per ``group`` (or in all), of
    Arrow type ``type``, wrapped. Arrow adds integers modulo 2**64, so a sum whose true
    value is in range is exact; whether it is, in three steps from cheap to exact: rows
    times the largest magnitude (one ``min_max``: clears almost every batch), a float64
    sum of the magnitudes (per group), then, for a batch near the bounds, Python's exact
    sums."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = _sum_range(type)
    if rng is None:
        return
    low, high = rng
    bound = min(-low, high) if low else high
    col = t.column(column)
    mm = pc.min_max(col)
    least, most = mm["min"].as_py(), mm["max"].as_py()
    if least is None or t.num_rows * max(abs(least), abs(most)) < bound:
        return
    limit = float(bound) / 2                    # float64's error stays far below this margin
    mags = pc.abs(pc.cast(col, pa.float64(), safe=False))
    if group:
        est = pa.table([*(t.column(g) for g in group), mags], names=[*group, "m"]) \
            .group_by(group, use_threads=False).aggregate([("m", "sum")]).column("m_sum")
        if not pc.any(pc.greater_equal(est, limit)).as_py():
            return
    elif (pc.sum(mags).as_py() or 0) < limit:
        return
    import decimal

    exact: dict[Any, Any] = {}
    keys = (zip(*(t.column(g).to_pylist() for g in group), strict=True) if group
            else iter(lambda: (), None))
    with decimal.localcontext() as ctx:
        ctx.prec = 400                     # Decimal sums exact, as integers are
        for k, v in zip(keys, t.column(column).to_pylist(), strict=False):
            if v is not None:
                exact[k] = exact.get(k, 0) + v
    for k, v in exact.items():
        if not low <= v < high:
            raise SumOverflow(k[0] if len(k) == 1 else k, v, str(type))


def arrow_group_agg(b: Any, group: list[str], column: str | None, how: str, out: str) -> Any:
    """``group`` columns and ``how`` ("count" of rows, "sum" of ``column``) per group, as
    one record batch ``(*group, out)``; no group: one row. A sum that does not fit its type
    (Arrow would wrap it) raises ``SumOverflow``: the result is exact or there is none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b
    assert how == "count" or column is not None
    if not group:
        if how == "count":
            v = pa.array([b.num_rows])
        else:
            total = pc.sum(t.column(column), min_count=0)
            _check_sums(t, group, str(column), total.type)
            v = pa.array([total.as_py()], type=total.type)
        return pa.RecordBatch.from_arrays([v], names=[out])
    if how == "count":
        r = t.group_by(group, use_threads=False).aggregate([([], "count_all")])
        agg_col = "count_all"
    else:
        r = t.group_by(group, use_threads=False).aggregate([(column, "sum")])
        agg_col = f"{column}_sum"
        _check_sums(t, group, str(column), r.column(agg_col).type)
    cols = [r.column(g) for g in group] + [r.column(agg_col)]
    return pa.Table.from_arrays(cols, names=[*group, out]).combine_chunks().to_batches()[0] \
        if r.num_rows else pa.RecordBatch.from_arrays([pa.array([], type=c.type) for c in cols], names=[*group, out])


def _keys_values(b: Any) -> tuple[list[Any], list[Any]]:
    """A ``(group..., value)`` batch as its keys (the group value, a tuple of several, or
    ``GLOBAL_KEY`` for no group) and its values."""
    cols = [c.to_pylist() for c in b.columns]
    keys = cols[0] if len(cols) == 2 else list(zip(*cols[:-1], strict=True)) if cols[:-1] else [GLOBAL_KEY]
    return keys, cols[-1]


class FinalProc(Proc):
    """Combines the partials ``(group..., partial)`` of every task per group; emits
    ``(group..., value)``. An ungrouped aggregation emits one row (``zero()`` if no
    partials came)."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []

    def row(self, r: tuple) -> None:
        k, v = r[:-1], r[-1]
        old = self.acc.get(k, _MISSING)
        assert self.op is not None
        self.acc[k] = v if old is _MISSING else self.op.fn.combine(old, v)

    def batch(self, b: Any) -> None:
        if getattr(self.op.fn, "arrow_agg", None) is None:   # type: ignore[union-attr]
            super().batch(b)
        else:
            self.batches.append(b)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        group = list(op.fields[:-1])
        out = op.fields[-1]
        if self.batches:
            # partials of counts and sums both add up
            try:
                b = arrow_group_agg(_concat(self.batches), group, out, "sum", out)
            except SumOverflow as e:
                raise self.overflow(e, out, "the sum of its partials") from None
            if self.acc:
                for r in rows_of(b):
                    self.row(r)
            else:
                nxt.batch(b)
        if not group and not self.acc and not self.batches and (not op.single or self.task == 0):
            self.acc[()] = op.fn.zero()      # the batch's one result, from the task that gets its tuples
        for k, v in self.acc.items():
            nxt.row((*k, v))
        Proc.finish(self)


class PersistProc(Proc):
    """``persistent_aggregate``, in the commit phase: the combined partials (or, for a
    reducer, the raw tuples) of each key folded into the map once per txid, through one
    ``multi_get`` and one write. Emits ``(key fields..., new value)`` when its new values
    stream has a consumer."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.map = _open_state(bolt, op)
        self.reducer = isinstance(op.fn, ReducerAggregator)
        self.tt = TridentTuple.of(op.in_fields)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []

    def row(self, r: tuple) -> None:
        op = self.op
        assert op is not None
        if self.reducer:
            k = key_of(r, op.group_idx)
            self.acc.setdefault(k, []).append(self.tt(tuple(r[i] for i in op.in_idx)))
        else:
            ng = len(op.group_idx)
            k = r[0] if ng == 1 else r[:-1] if ng else GLOBAL_KEY
            old = self.acc.get(k, _MISSING)
            self.acc[k] = r[-1] if old is _MISSING else op.fn.combine(old, r[-1])

    def batch(self, b: Any) -> None:
        if self.reducer or getattr(self.op.fn, "arrow_agg", None) is None:   # type: ignore[union-attr]
            super().batch(b)
        else:
            self.batches.append(b)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None
        fn = op.fn
        if self.batches and len(self.batches) > 1:
            b = _concat(self.batches)
            group = list(b.schema.names[:-1])
            try:
                self.batches = [arrow_group_agg(b, group, b.schema.names[-1], "sum", b.schema.names[-1])]
            except SumOverflow:
                # the partials' sum is beyond Arrow's integers, not the map's: add them in
                # Python (exact), as the fold into the map does
                acc = self.acc
                for part in self.batches:
                    for k, v in zip(*_keys_values(part), strict=True):
                        old = acc.get(k, _MISSING)
                        acc[k] = v if old is _MISSING else fn.combine(old, v)
                self.batches = []
        if self.batches:
            b = self.batches[0]
            acc = self.acc
            if not acc and not op.emit_values and hasattr(self.map, "add_columns"):   # a counter map
                if b.num_columns == 2:
                    self.map.add_columns(b.column(0), b.column(1))     # keys of groups: as arrays
                else:
                    self.map.add(*_keys_values(b), distinct=True)
                self.batches = []
                Proc.finish(self)
                return
            keys, values = _keys_values(b)
            if acc:
                for k, v in zip(keys, values, strict=True):
                    old = acc.get(k, _MISSING)
                    acc[k] = v if old is _MISSING else fn.combine(old, v)
            else:
                self.acc = dict(zip(keys, values, strict=True))
        keys = list(self.acc)
        if keys and getattr(op.state, "state_type", None) == "counter":
            # a counters map adds 64-bit integers (Redis INCRBY): a total of this batch's
            # partials beyond them stops here, named, before anything is written
            for k, v in self.acc.items():
                if type(v) is int and not -2 ** 63 <= v < 2 ** 63:
                    raise self.overflow(SumOverflow(k, v, "int64"), op.fields[-1], "its total",
                                        f"what counters map {op.state.name!r} holds",
                                        f"Store it in a transactional or opaque map (trident.state."
                                        f"transactional({op.state.name!r})), which holds Python ints "
                                        "without bound, or sum smaller numbers") from None
        if keys:
            if self.reducer:
                def reduce_into(ts: list) -> Callable[[Any], Any]:
                    def up(old: Any) -> Any:
                        v = fn.init() if old is None else old
                        for t in ts:
                            v = fn.reduce(v, t)
                        return v
                    return up
                new = self.map.multi_update(keys, [reduce_into(self.acc[k]) for k in keys])
            elif getattr(fn, "arrow_agg", None) in ("count", "sum"):
                if not op.emit_values and hasattr(self.map, "add"):
                    self.map.add(keys, list(self.acc.values()))      # a counter map: no read
                    new = []
                else:
                    new = self.map.multi_combine(keys, list(self.acc.values()), "sum")
            else:
                zero = fn.zero

                def combine(old: Any, v: Any) -> Any:
                    return fn.combine(zero() if old is None else old, v)
                new = self.map.multi_combine(keys, list(self.acc.values()), combine)
            if op.emit_values and nxt is not None:
                ng = len(op.group_idx)
                for k, v in zip(keys, new, strict=True):
                    nxt.row((v,) if ng == 0 else (k, v) if ng == 1 else (*k, v))
        Proc.finish(self)


class PartitionPersistProc(Proc):
    """``partition_persist``: the task's tuples handed to the ``StateUpdater`` with the map,
    in the commit phase; what it emits goes on as ``new_values_stream``."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.bolt = bolt
        self.tt = TridentTuple.of(op.in_fields)
        self.tuples: list[TridentTuple] = []

    def row(self, r: tuple) -> None:
        assert self.op is not None
        self.tuples.append(self.tt(tuple(r[i] for i in self.op.in_idx)))

    def finish(self) -> None:
        op = self.op
        assert op is not None
        push = self.nxt.row if self.nxt is not None else (lambda r: None)
        c = _Collect(push, len(op.out_fields), op_label(op))
        if self.tuples:     # Storm's rule: a task with no tuples leaves the state alone
            op.fn.update_state(_open_state(self.bolt, op), self.tuples, c)
        Proc.finish(self)


def _open_state(bolt: TridentBolt, op: Op) -> Any:
    """The state of a persist or query op: a map of the topology (``trident.state``), or
    what a State API factory makes for this task (``context.state``: the framework runs
    its ``begin_commit``/``commit`` around the task's batch)."""
    if is_state_factory(op.state):
        return bolt.context.state(op.state)
    return bolt.context.map_state(op.state.name, op.state.state_type.value)


class _ReadView:
    """A query's view of a map: the values committed before this batch."""

    def __init__(self, m: Any) -> None:
        self._m = m

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        return self._m.multi_get_committed(keys)

    def get(self, key: Any) -> Any:
        return self.multi_get([key])[0]


class QueryProc(Proc):
    """``state_query``: the task's tuples, one ``batch_retrieve`` against the state as it was
    committed before this batch, then ``execute`` per tuple; output appended to the row."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.bolt = bolt
        self.tt = TridentTuple.of(op.in_fields)
        self.buffered: list[tuple] = []

    def row(self, r: tuple) -> None:
        self.buffered.append(r)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        if self.buffered:
            tts = [self.tt(tuple(r[i] for i in op.in_idx)) for r in self.buffered]
            st = _open_state(self.bolt, op)
            results = op.fn.batch_retrieve(st if is_state_factory(op.state) else _ReadView(st), tts)
            if len(results) != len(tts):
                msg = f"batch_retrieve returned {len(results)} results for {len(tts)} tuples"
                raise ValueError(msg)
            c = _Collect(nxt.row, len(op.out_fields) - len(op.fields), op_label(op))
            for r, t, res in zip(self.buffered, tts, results, strict=True):
                c.current = r
                op.fn.execute(t, res, c)
        Proc.finish(self)


class JoinProc(Proc):
    """An inner join of two or more streams on their join fields within the batch; emits
    ``join fields + the other fields of each stream in order``."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        assert self.op is not None
        self.sides: list[dict[Any, list[tuple]]] = [{} for _ in self.op.fn]

    def side_row(self, side: int, r: tuple) -> None:
        idx, rest = self.op.fn[side]    # type: ignore[union-attr]
        self.sides[side].setdefault(tuple(r[i] for i in idx), []).append(tuple(r[i] for i in rest))

    def row(self, r: tuple) -> None:
        self.side_row(0, r)

    def finish(self) -> None:
        import itertools

        assert self.nxt is not None
        first, others = self.sides[0], self.sides[1:]
        for k, rows in first.items():
            matches = [o.get(k) for o in others]
            if not all(matches):
                continue
            for combo in itertools.product(rows, *matches):
                self.nxt.row(k + sum(combo, ()))
        Proc.finish(self)


class OperationContext:
    """The ``context`` an operation's ``prepare(conf, context)`` gets (Storm's
    ``TridentOperationContext``): ``topology_id``, ``component_id`` (the stage),
    ``task_index``, ``num_tasks``, ``phase``, and ``attempt`` (the batch's
    ``TransactionAttempt``)."""

    def __init__(self, context: Any, attempt: Any) -> None:
        self.topology_id = context.topology_id
        self.component_id = context.component_id
        self.task_index = context.task_index
        self.num_tasks = context.num_tasks
        self.phase = context.phase
        self.attempt = attempt

    def __repr__(self) -> str:
        return f"OperationContext({self.component_id!r} task {self.task_index}/{self.num_tasks}, {self.attempt})"


@dataclass
class ArrowOut:
    """One consumer fed Arrow buffers: its stream, grouping, key columns and task count."""

    stream: str
    grouping: str                     # "local", "shuffle", "fields", "global", "all"
    keys: tuple[str, ...]
    tasks: int


class EmitProc(Proc):
    """The end of a stage: rows become tuples ``(attempt, *values)``; batches become Arrow
    IPC buffers for the consumers that take them (rows for the others)."""

    def __init__(self, fields: Fields, rows_out: bool, arrow_outs: list[ArrowOut]) -> None:
        super().__init__(None, None)
        self.fields = fields
        self.rows_out = rows_out
        self.arrow_outs = arrow_outs

    def open(self, bolt: TridentBolt) -> None:
        self.bolt = bolt
        self.attempt = bolt.attempt
        self.buffered: list[tuple] = []
        self.batches: list[Any] = []
        if self.rows_out and not self.arrow_outs:
            emit, att = bolt.collector.emit, (bolt.attempt,)
            self.row = lambda r: emit(att + r)  # type: ignore[method-assign]
        elif not self.rows_out and not self.arrow_outs:
            self.row = lambda r: None  # type: ignore[method-assign]
            self.batch = lambda b: None  # type: ignore[method-assign]

    def row(self, r: tuple) -> None:
        self.buffered.append(r)

    def batch(self, b: Any) -> None:
        if self.arrow_outs:
            self.batches.append(b)
        if self.rows_out:
            emit, att = self.bolt.collector.emit, (self.attempt,)
            for r in rows_of(b):
                emit(att + r)

    def finish(self) -> None:
        if self.arrow_outs and (self.batches or self.buffered):
            if self.buffered:
                self.batches.append(batch_of(self.buffered, self.fields))
                if self.rows_out:
                    emit, att = self.bolt.collector.emit, (self.attempt,)
                    for r in self.buffered:
                        emit(att + r)
            b = _concat(self.batches)
            for i, out in enumerate(self.arrow_outs):
                # a row counts as one emitted tuple, once, whatever its consumers (as emit
                # counts); rows also emitted as tuples were counted there
                self._send(b, out, counted=self.rows_out or i > 0)

    def _send(self, b: Any, out: ArrowOut, counted: bool) -> None:
        if b.num_rows == 0:
            return
        direct, att = self.bolt.collector.emit_direct, self.attempt
        grouping = routing.LOCAL_OR_SHUFFLE if out.grouping == "local" else out.grouping
        parts = routing.split_batch(grouping, b, out.tasks, out.keys, task=self.bolt.task,
                                    local=self.bolt.num_tasks == out.tasks)
        uncounted = 0 if counted else b.num_rows      # a row counts once, however many tasks get it
        buffers: dict[int, bytes] = {}                # one IPC buffer for a part sent to several tasks
        for t, part in parts:
            buf = buffers.get(id(part))
            if buf is None:
                buf = buffers[id(part)] = to_ipc(part)
            rows = min(part.num_rows, uncounted)
            uncounted -= rows
            direct(t, (att, buf), out.stream, rows=rows)


PROCS: dict[str, type[Proc]] = {
    "each": EachProc, "filter": FilterProc, "map": MapProc, "flat_map": MapProc,
    "project": ProjectProc, "each_batch": BatchProc, "map_batches": BatchProc,
    "aggregate": AggregateProc, "partial": PartialProc, "final": FinalProc,
    "persist": PersistProc, "partition_persist": PartitionPersistProc, "query": QueryProc,
    "join": JoinProc,
}


class TridentBolt(BaseBatchBolt):
    """One compiled Trident stage: the input dispatch, the processor chain, the outputs.

    ``sides`` maps an input ``(component, stream)`` to its side (the stream's position in
    a join, else 0); inputs on streams in ``arrow_in`` carry Arrow IPC buffers."""

    accepts_columns = True    # a spout in the same tasks may hand over ColumnBatch values

    def __init__(self, ops: list[Op], out_fields: Fields, rows_out: bool, arrow_outs: list[ArrowOut],
                 sides: dict[tuple[str, str], int], arrow_in: set[tuple[str, str]], description: str,
                 named: bool = False) -> None:
        self.ops = ops
        self.out_fields = out_fields
        self.rows_out = rows_out
        self.arrow_outs = arrow_outs
        self.sides = sides
        self.arrow_in = arrow_in
        self.description = description
        self.named = named

    def prepare(self, conf: dict, context: Any, collector: Any, id: Any) -> None:
        """Build the processor chain for this task and batch."""
        self.conf, self.context, self.collector, self.attempt = conf, context, collector, id
        self.task, self.num_tasks = context.task_index, context.num_tasks
        self.op_context = OperationContext(context, id)
        chain: Proc = EmitProc(self.out_fields, self.rows_out, self.arrow_outs)
        procs = [chain]
        for op in reversed(self.ops):
            chain = PROCS[op.kind](op, chain)
            procs.append(chain)
        for p in procs:               # the last first: each captures its successor's row()
            p.open(self)
        self.head = chain
        self.join = chain if isinstance(chain, JoinProc) else None

    def execute(self, tuple: Any) -> None:
        """One input tuple: a row (its values after the attempt), or an Arrow buffer."""
        self.execute_values([tuple.values], tuple.source_component, tuple.source_stream)

    def execute_values(self, values_list: list[Any], source: str, stream: str) -> int:
        """A whole payload of one source's task at once (``run_task`` calls this instead of
        ``execute`` for each tuple): rows go down the chain without ``Tuple`` objects, and
        a spout's ``ColumnBatch`` (``transactional.columns``) as the batch it is. Returns
        how many rows it took."""
        src = (source, stream)
        if ColumnBatch in set(map(type, values_list)):
            n = 0
            for v in values_list:
                if type(v) is ColumnBatch:
                    n += len(v)
                    if self.join is not None:
                        side = self.sides[src]
                        for r in rows_of(v.batch):
                            self.join.side_row(side, r)
                    else:
                        self.head.batch(v.batch)
                else:
                    n += 1
                    self.execute_values([v], source, stream)
            return n
        if src in self.arrow_in:
            rows = 0                               # tuples, not buffers: a buffer holds many
            for v in values_list:
                for b in from_ipc(v[1]).to_batches():
                    rows += b.num_rows
                    if self.join is not None:      # a join takes rows, by side
                        side = self.sides[src]
                        for r in rows_of(b):
                            self.join.side_row(side, r)
                    else:
                        self.head.batch(b)
            return rows
        elif self.join is not None:
            side, side_row = self.sides[src], self.join.side_row
            for v in values_list:
                side_row(side, v[1:])
        else:
            self.head.rows([v[1:] for v in values_list])
        return len(values_list)

    def finish_batch(self) -> None:
        """The end of the task's share: flows down the chain."""
        self.head.finish()

    def declare_output_fields(self, declarer: Any) -> None:
        """The stream's fields after the attempt, and a direct stream per Arrow consumer."""
        declarer.declare(Fields(TX_FIELD, *self.out_fields))
        for out in self.arrow_outs:
            declarer.declare_stream(out.stream, Fields(TX_FIELD, ARROW_FIELD), direct=True)

    @property
    def writes_states(self) -> tuple[str, ...]:
        """The names of the states this stage updates (``persistent_aggregate``,
        ``partition_persist``), shown on the status page."""
        return tuple(dict.fromkeys(str(op.state.name) for op in self.ops
                                   if op.kind in ("persist", "partition_persist") and op.state is not None))

    @property
    def describe_as(self) -> str:
        """What ``Topology.describe`` shows as the class: the stage's operations where its
        component id does not already say them (a stage the user named)."""
        return f"{type(self).__name__}: {self.description}" if self.named else type(self).__name__

    def __repr__(self) -> str:
        return f"TridentBolt({self.description})"


class TridentCommitterBolt(TridentBolt, Committer):
    """A stage that updates or queries state: in the commit phase, in txid order."""
