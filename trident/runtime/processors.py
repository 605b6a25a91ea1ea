"""The processors of a stage's chain (see ``trident.runtime``): the base class, the
per-tuple and columnar functions, joins, and ``EmitProc``, the end of every chain."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transactional.columns import batch_of, rows_of
from transactional.engine import routing
from transactional.exceptions import AggregateOverflowError, InvalidTupleError
from transactional.tuples import Fields
from trident.operation import TridentCollector, TridentTuple
from trident.runtime import Row
from trident.runtime.arrow import SumOverflow, _as_batch, _concat, to_ipc
from trident.runtime.op import Op, op_label

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

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

    def row(self, r: Row) -> None:
        """One row."""
        raise NotImplementedError

    def values_sink(self, offset: int, width: int, what: str) -> Callable[[Sequence[Any]], None] | None:
        """An ``emit`` for the function ``what`` before this processor, which emits
        ``width`` values after a row of ``offset`` fields, when this processor reads none of
        the row's first ``offset`` values: it takes the emitted values alone (checking their
        number: ``width_error``), and the joined row is never built; None otherwise.
        Called after ``open``."""
        return None

    def rows(self, rs: list[Row]) -> None:
        """Many rows (a columnar processor collects them at once)."""
        row = self.row
        for r in rs:
            row(r)

    def batch(self, b: Any) -> None:
        """A record batch: its rows, one by one (a columnar processor overrides this)."""
        row = self.row
        for r in rows_of(b):
            row(r)

    def aggregator(self) -> Any:
        """The user's aggregator of this operation (errors name it)."""
        return None if self.op is None else self.op.fn

    def overflow(self, e: SumOverflow, field: str, what: str, holder: str = OVERFLOW_HOLDER,
                 fix: str = OVERFLOW_FIX) -> AggregateOverflowError:
        """The error for a sum of this operation that does not fit its type: names the
        aggregator, the field, the stage, the txid, the group, and the fix."""
        agg = type(self.aggregator()).__name__ if self.op is not None else "a sum"
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


def width_error(what: str, width: int, values: Row) -> InvalidTupleError:
    """The error of an operation ``what`` that emitted ``values`` but declares ``width``
    output fields."""
    msg = (f"{what} emitted {len(values)} values {values!r}, but it declares {width} output "
           f"field{'' if width == 1 else 's'}: emit exactly that many, or declare the fields it emits")
    return InvalidTupleError(msg)


class _Collect(TridentCollector):
    """What an operation emits into: each emit is ``current`` (the row a function is on, or
    the group an aggregator is completing) plus the emitted values, pushed downstream."""

    __slots__ = ("current", "push", "width", "what")

    def __init__(self, push: Callable[[Row], None], width: int, what: str) -> None:
        self.current: Row = ()
        self.push = push
        self.width = width
        self.what = what

    def emit(self, values: Sequence[Any]) -> None:
        if type(values) is not tuple:
            values = tuple(values)
        if len(values) != self.width:
            raise width_error(self.what, self.width, values)
        self.push(self.current + values)


class _ValuesCollect(TridentCollector):
    """A function's collector whose ``emit`` is the next processor's own function of the
    emitted values (``Proc.values_sink``): no joined row, no extra call per emit."""

    __slots__ = ("current", "emit")

    def __init__(self, emit: Callable[[Sequence[Any]], None]) -> None:
        self.current: Row = ()
        self.emit = emit  # type: ignore[method-assign,assignment]


class EachProc(Proc):
    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.tt = TridentTuple.of(op.in_fields)
        width, what = len(op.out_fields) - len(op.fields), op_label(op)
        sink = self.nxt.values_sink(len(op.fields), width, what)
        self.collector: _Collect | _ValuesCollect = (_ValuesCollect(sink) if sink is not None
                                                     else _Collect(self.nxt.row, width, what))
        self.execute = op.fn.execute
        self.pick = _picker(op.in_idx)
        c, tt, pick, execute = self.collector, self.tt, self.pick, self.execute

        def row(r: Row) -> None:          # the per-tuple hot path: one closure, no lookups
            c.current = r
            execute(tt(pick(r)), c)
        self.row = row  # type: ignore[method-assign]

    def row(self, r: Row) -> None:
        c = self.collector
        c.current = r
        self.execute(self.tt(self.pick(r)), c)


def _picker(idx: tuple[int, ...]) -> Callable[[Row], Row]:
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

        def row(r: Row) -> None:
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

        def check(v: Any) -> Row:
            t: Row = v if type(v) is tuple else tuple(v) if isinstance(v, (list, tuple)) else (v,)
            if len(t) != width:
                msg = f"{op.kind} produced {t!r}; its output fields are {list(op.out_fields)}"
                raise ValueError(msg)
            return t

        if op.kind == "map":
            def row(r: Row) -> None:
                push(check(fn(tt(tuple(r[i] for i in idx)))))
        else:
            def row(r: Row) -> None:
                for v in fn(tt(tuple(r[i] for i in idx))):
                    push(check(v))
        self.row = row  # type: ignore[method-assign]


class ProjectProc(Proc):
    def row(self, r: Row) -> None:
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
        self.pending: list[Row] = []
        self.batches: list[Any] = []

    def row(self, r: Row) -> None:
        self.pending.append(r)

    def rows(self, rs: list[Row]) -> None:
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


_MISSING = object()


class JoinProc(Proc):
    """An inner join of two or more streams on their join fields within the batch; emits
    ``join fields + the other fields of each stream in order``."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        assert self.op is not None
        self.sides: list[dict[Any, list[Row]]] = [{} for _ in self.op.fn]

    def side_row(self, side: int, r: Row) -> None:
        idx, rest = self.op.fn[side][:2]    # type: ignore[union-attr]
        self.sides[side].setdefault(tuple(r[i] for i in idx), []).append(tuple(r[i] for i in rest))

    def row(self, r: Row) -> None:
        self.side_row(0, r)

    def finish(self) -> None:
        import itertools

        assert self.nxt is not None and self.op is not None
        specs = self.op.fn
        outer = [len(spec) > 2 and spec[2] for spec in specs]
        if not any(outer):                  # inner: the keys of the first stream every stream has
            first, others = self.sides[0], self.sides[1:]
            for k, rows in first.items():
                matches = [o.get(k) for o in others]
                if not all(matches):
                    continue
                for combo in itertools.product(rows, *matches):
                    self.nxt.row(k + sum(combo, ()))
        else:                               # Storm's JoinerMultiReducer: every key of any stream
            keys = dict.fromkeys(k for side in self.sides for k in side)
            nulls = [[(None,) * len(spec[1])] for spec in specs]
            for k in keys:
                groups: list[list[Row]] = []
                for side, is_outer, null in zip(self.sides, outer, nulls, strict=True):
                    got = side.get(k)
                    if got is None and not is_outer:
                        break
                    groups.append(got or null)
                else:
                    for parts in itertools.product(*groups):
                        self.nxt.row(k + sum(parts, ()))
        Proc.finish(self)


@dataclass
class ArrowOut:
    """One consumer fed Arrow buffers: its stream (``arrow-<consumer id>``), grouping, key
    columns and task count when built (a run takes the count from the running topology,
    ``tasks_now``: a rebalance or a replay with an earlier layout changes it)."""

    stream: str
    grouping: str                     # "local", "shuffle", "fields", "global", "all"
    keys: tuple[str, ...]
    tasks: int

    def tasks_now(self, context: Any) -> int:
        """The consumer's task count in the running topology (``context.component_tasks``)."""
        try:
            return int(context.component_tasks(self.stream[len("arrow-"):]))
        except (AttributeError, KeyError):
            return self.tasks


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
        self.buffered: list[Row] = []
        self.batches: list[Any] = []
        if self.rows_out and not self.arrow_outs:
            emit, att = bolt.collector.emit, (bolt.attempt,)
            self.row = lambda r: emit(att + r)  # type: ignore[method-assign]
        elif not self.rows_out and not self.arrow_outs:
            self.row = lambda r: None  # type: ignore[method-assign]
            self.batch = lambda b: None  # type: ignore[method-assign]

    def row(self, r: Row) -> None:
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
        tasks = out.tasks_now(self.bolt.context)
        parts = routing.split_batch(grouping, b, tasks, out.keys, task=self.bolt.task,
                                    local=self.bolt.num_tasks == tasks)
        uncounted = 0 if counted else b.num_rows      # a row counts once, however many tasks get it
        buffers: dict[int, bytes] = {}                # one IPC buffer for a part sent to several tasks
        for t, part in parts:
            buf = buffers.get(id(part))
            if buf is None:
                buf = buffers[id(part)] = to_ipc(part)
            rows = min(part.num_rows, uncounted)
            uncounted -= rows
            direct(t, (att, buf), out.stream, rows=rows)


class MultiReduceProc(JoinProc):
    """``multi_reduce``: every stream's rows to one ``MultiReducer`` (per group, for grouped
    streams: a ``GroupedMultiReducer``), in the order they arrive; ``op.fn`` is the reducer,
    ``op.spec`` per stream ``(group_idx, in_idx, in_fields)`` and the group fields."""

    def open(self, bolt: TridentBolt) -> None:
        Proc.open(self, bolt)
        assert self.op is not None and self.nxt is not None
        self.reducer = self.op.fn
        specs, group_fields = self.op.spec
        self.grouped = bool(group_fields)
        self.tts = [TridentTuple.of(f) for _, _, f in specs]
        self.gtt = TridentTuple.of(group_fields)
        self.collector = _Collect(self.nxt.row, len(self.op.out_fields) - len(group_fields), op_label(self.op))
        self.states: dict[Any, Any] = {}
        if not self.grouped:
            self.states[()] = self.reducer.init(self.collector)

    def side_row(self, side: int, r: Row) -> None:
        gidx, idx, _ = self.op.spec[0][side]    # type: ignore[union-attr]
        t = self.tts[side](tuple(r[i] for i in idx))
        if not self.grouped:
            self.reducer.execute(self.states[()], side, t, self.collector)
            return
        key = self.gtt(tuple(r[i] for i in gidx))
        st = self.states.get(key, _MISSING)
        self.collector.current = key
        if st is _MISSING:
            st = self.states[key] = self.reducer.init(self.collector, key)
        self.reducer.execute(st, side, key, t, self.collector)

    def finish(self) -> None:
        for key, st in self.states.items():
            self.collector.current = key
            if self.grouped:
                self.reducer.complete(st, key, self.collector)
            else:
                self.reducer.complete(st, self.collector)
        self.states = {}
        Proc.finish(self)
