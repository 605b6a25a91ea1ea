"""The processors of committer stages, in the commit phase: ``persistent_aggregate``
(``PersistProc``), ``partition_persist`` and ``state_query``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trident.operation import ReducerAggregator, TridentTuple
from trident.runtime.arrow import SumOverflow, _concat, _keys_values, arrow_group_agg
from trident.runtime.op import GLOBAL_KEY, key_of, op_label
from trident.runtime.processors import _MISSING, Proc, _Collect

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

class PersistProc(Proc):
    """``persistent_aggregate``, in the commit phase: the combined partials (or, for a
    reducer, the raw tuples) of each key folded into the map once per txid, through one
    ``multi_get`` and one write. Emits ``(key fields..., new value)`` when its new values
    stream has a consumer."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.map = bolt.context.map_state(op.state.name, op.state.state_type.value)
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
        if keys and op.state.state_type.value == "counter":
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
        self.map = bolt.context.map_state(op.state.name, op.state.state_type.value)
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
        if self.tuples:
            op.fn.update_state(self.map, self.tuples, c)
        Proc.finish(self)


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
        self.view = _ReadView(bolt.context.map_state(op.state.name, op.state.state_type.value))
        self.tt = TridentTuple.of(op.in_fields)
        self.buffered: list[tuple] = []

    def row(self, r: tuple) -> None:
        self.buffered.append(r)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        if self.buffered:
            tts = [self.tt(tuple(r[i] for i in op.in_idx)) for r in self.buffered]
            results = op.fn.batch_retrieve(self.view, tts)
            if len(results) != len(tts):
                msg = f"batch_retrieve returned {len(results)} results for {len(tts)} tuples"
                raise ValueError(msg)
            c = _Collect(nxt.row, len(op.out_fields) - len(op.fields), op_label(op))
            for r, t, res in zip(self.buffered, tts, results, strict=True):
                c.current = r
                op.fn.execute(t, res, c)
        Proc.finish(self)
