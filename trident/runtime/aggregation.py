"""The aggregation processors: any aggregator per task (``AggregateProc``), and a
combiner's two steps around a shuffle (``PartialProc`` before, ``FinalProc`` after)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from transactional.columns import rows_of
from transactional.engine.plan import PROCESSING
from transactional.engine.staged_maps import STAGED_CONF, stage_counts
from trident.operation import TridentTuple
from trident.runtime import Row
from trident.runtime.aggregators import as_aggregator
from trident.runtime.arrow import SumOverflow, _acc_batch, _concat, _keys_values, arrow_group_agg
from trident.runtime.op import op_label
from trident.runtime.processors import _MISSING, Proc, _Collect, width_error

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

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

    def row(self, r: Row) -> None:
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


class PartialProc(Proc):
    """Partial aggregation of a combiner before the shuffle: per group (or in all), the
    combined value of the task's rows; emits ``(group..., partial)``. On a record batch,
    ``Count``/``Sum`` run as one Arrow hash aggregation."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.bolt = bolt
        self.c = op.fn
        self.tt = TridentTuple.of(op.in_fields)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []
        self.count = getattr(self.c, "arrow_agg", None) == "count"
        if self.count and len(op.group_idx) == 1:
            acc, get, i = self.acc, self.acc.get, op.group_idx[0]

            def count(r: Row) -> None:    # Count by one field: the per-tuple hot path
                k = r[i]
                acc[k] = get(k, 0) + 1
            self.row = count  # type: ignore[method-assign]

    def _staged(self, op: Any) -> bool:
        """Stage the task's partial counts for counter map ``op.stages_to`` when the run
        stages it (``transactional.engine.staged_maps``): True, and nothing is emitted."""
        bolt = self.bolt
        if bolt.context.phase != PROCESSING or STAGED_CONF not in bolt.conf:
            return False
        acc: dict[Any, Any] = {}
        if self.batches:
            group = [op.fields[i] for i in op.group_idx]
            column = None if self.count else op.in_fields[0]
            b = arrow_group_agg(_concat(self.batches), group, column, self.c.arrow_agg, op.out_fields[-1])
            acc = dict(zip(*_keys_values(b), strict=True))
        for k, v in self.acc.items():
            acc[k] = acc.get(k, 0) + v
        if not acc:
            return True
        pair = stage_counts(bolt.conf, op.stages_to, bolt.context.component_id, bolt.task, bolt.attempt,
                            list(acc), list(acc.values()))
        if pair is None:
            return False
        bolt.staged.append(pair)
        return True

    def values_sink(self, offset: int, width: int, what: str) -> Callable[[Sequence[Any]], None] | None:
        """Count by one field that the previous function emits: count its values as they
        come, without the joined row (the per-word path of a word count)."""
        op = self.op
        assert op is not None
        if not self.count or len(op.group_idx) != 1 or op.group_idx[0] < offset:
            return None
        acc, get, i = self.acc, self.acc.get, op.group_idx[0] - offset
        if width == 1:
            def emit_one(values: Sequence[Any]) -> None:
                try:
                    (k,) = values              # one value, checked by the unpacking itself
                except ValueError:
                    raise width_error(what, width, tuple(values)) from None
                acc[k] = get(k, 0) + 1
            return emit_one

        def emit(values: Sequence[Any]) -> None:
            if type(values) is not tuple:
                values = tuple(values)
            if len(values) != width:
                raise width_error(what, width, values)
            k = values[i]
            acc[k] = get(k, 0) + 1
        return emit

    def row(self, r: Row) -> None:
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
        if op.stages_to and self._staged(op):
            Proc.finish(self)
            return
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


class FinalProc(Proc):
    """Combines the partials ``(group..., partial)`` of every task per group; emits
    ``(group..., value)``. An ungrouped aggregation emits one row (``zero()`` if no
    partials came)."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []

    def row(self, r: Row) -> None:
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
