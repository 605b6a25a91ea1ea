"""The processors of committer stages, in the commit phase: ``persistent_aggregate``
(``PersistProc``), ``partition_persist`` and ``state_query``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from state.map.backing import Scanning
from state.map.base import MapState
from state.map.migrate import VALUE_FIELDS, MigratingBacking
from transactional.engine.user_states import MIGRATIONS
from trident.operation import TridentTuple
from trident.runtime import Row
from trident.runtime.arrow import SumOverflow, _concat, _keys_values, arrow_group_agg
from trident.runtime.map_updaters import MapAggStateUpdater, MapReducerAggStateUpdater
from trident.runtime.op import GLOBAL_KEY, key_of, op_label
from trident.runtime.processors import _MISSING, Proc, _Collect
from trident.state import is_state_factory

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt


class PersistProc(Proc):
    """``persistent_aggregate`` (a ``partition_persist`` with a ``MapAggStateUpdater``), in
    the commit phase: the combined partials (or, for a reducer, the raw tuples) of each key
    gathered -- as Arrow columns when they come so -- and handed to the updater's ``write``,
    which folds them into the map once per txid through the map's one door
    (``MapState.apply``). Emits ``(key fields..., new value)`` when its new values stream
    has a consumer."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.map = _open_state(bolt, op)
        self.bolt_txid: int = bolt.attempt.txid
        self.updater: MapAggStateUpdater = op.fn
        self.agg = self.updater.agg
        self.reducer = isinstance(self.updater, MapReducerAggStateUpdater)
        self.tt = TridentTuple.of(op.in_fields)
        self.acc: dict[Any, Any] = {}
        self.batches: list[Any] = []

    def aggregator(self) -> Any:
        """The user's aggregator the updater folds in."""
        return self.agg

    def row(self, r: Row) -> None:
        op = self.op
        assert op is not None
        if self.reducer:
            k = key_of(r, op.group_idx)
            self.acc.setdefault(k, []).append(self.tt(tuple(r[i] for i in op.in_idx)))
        else:
            ng = len(op.group_idx)
            k = r[0] if ng == 1 else r[:-1] if ng else GLOBAL_KEY
            old = self.acc.get(k, _MISSING)
            self.acc[k] = r[-1] if old is _MISSING else self.agg.combine(old, r[-1])

    def batch(self, b: Any) -> None:
        if self.reducer or getattr(self.agg, "arrow_agg", None) is None:
            super().batch(b)
        else:
            self.batches.append(b)

    def finish(self) -> None:
        op = self.op
        assert op is not None
        if len(self.batches) > 1:
            self._sum_batches()
        if self.batches:
            b = self.batches[0]
            if not self.acc and b.num_columns == 2:
                # one group field, nothing folded in Python: the columns go to the map as they
                # are (a counter map adds them without a read; the others take them as lists)
                new = self._combine(b.column(0), b.column(1))
                if op.emit_values:
                    self._emit(b.column(0).to_pylist(), new)
                Proc.finish(self)
                return
            keys, values = _keys_values(b)
            if self.acc:
                self._fold(keys, values)
            else:
                self.acc = dict(zip(keys, values, strict=True))
        keys = list(self.acc)
        if keys:
            if getattr(op.state, "state_type", None) == "counter":
                self._check_counter_totals()
            self._emit(keys, self._write(keys))
        Proc.finish(self)

    def _fold(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """Combine ``values`` into the task's partials under ``keys``."""
        assert self.op is not None
        acc, fn = self.acc, self.agg
        for k, v in zip(keys, values, strict=True):
            old = acc.get(k, _MISSING)
            acc[k] = v if old is _MISSING else fn.combine(old, v)

    def _sum_batches(self) -> None:
        """The record batches of partials as one, summed per key in Arrow; or, when the sum
        is beyond Arrow's integers (not the map's), folded into ``acc`` in Python (exact),
        as the fold into the map does."""
        b = _concat(self.batches)
        group = list(b.schema.names[:-1])
        try:
            self.batches = [arrow_group_agg(b, group, b.schema.names[-1], "sum", b.schema.names[-1])]
        except SumOverflow:
            for part in self.batches:
                self._fold(*_keys_values(part))
            self.batches = []

    def _check_counter_totals(self) -> None:
        """A counters map adds 64-bit integers (Redis INCRBY): a total of this batch's
        partials beyond them stops here, named, before anything is written."""
        op = self.op
        assert op is not None
        for k, v in self.acc.items():
            if type(v) is int and not -2 ** 63 <= v < 2 ** 63:
                raise self.overflow(SumOverflow(k, v, "int64"), op.fields[-1], "its total",
                                    f"what counters map {op.state.name!r} holds",
                                    f"Store it in a transactional or opaque map (trident.state."
                                    f"transactional({op.state.name!r})), which holds Python ints "
                                    "without bound, or sum smaller numbers") from None

    def _write(self, keys: list[Any]) -> list[Any]:
        """Fold the task's values of ``keys`` into the map (one read, one write); the new
        values (none when nobody reads them and the map adds without a read)."""
        return self._combine(keys, [self.acc[k] for k in keys])

    def _combine(self, keys: Any, values: Any) -> list[Any]:
        """``values`` (each key's partial, or a reducer's tuples) folded into ``keys`` of
        the map by the updater (Storm's ``MapCombinerAggStateUpdater``)."""
        op = self.op
        assert op is not None
        new = self.updater.write(self.map, self.bolt_txid, keys, values, op.emit_values)
        return [] if new is None else list(new)

    def _emit(self, keys: list[Any], new: list[Any]) -> None:
        """``(key fields..., new value)`` per key, when the new values have a consumer."""
        op, nxt = self.op, self.nxt
        assert op is not None
        if op.emit_values and nxt is not None:
            ng = len(op.group_idx)
            for k, v in zip(keys, new, strict=True):
                nxt.row((v,) if ng == 0 else (k, v) if ng == 1 else (*k, v))


class PartitionPersistProc(Proc):
    """``partition_persist``: the task's tuples handed to the ``StateUpdater`` with the map,
    in the commit phase; what it emits goes on as ``new_values_stream``."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None
        self.bolt = bolt
        # a map of the topology is opened now (the driver finds the maps committers open in
        # prepare); a State API state in finish
        self.map = None if is_state_factory(op.state) else _open_state(bolt, op)
        self.tt = TridentTuple.of(op.in_fields)
        self.tuples: list[TridentTuple] = []

    def row(self, r: Row) -> None:
        assert self.op is not None
        self.tuples.append(self.tt(tuple(r[i] for i in self.op.in_idx)))

    def finish(self) -> None:
        op = self.op
        assert op is not None
        push = self.nxt.row if self.nxt is not None else (lambda r: None)
        c = _Collect(push, len(op.out_fields), op_label(op))
        if self.map is None:
            # a State API state: every task opens it every batch, also with no tuples, so a
            # replay that gives this task none still takes back what an earlier attempt of
            # the txid wrote here (an opaque spout's replay may be another batch)
            st = _open_state(self.bolt, op)
            if self.tuples:
                op.fn.update_state(st, self.tuples, c)
        elif self.tuples:     # Storm's rule: a task with no tuples leaves the map alone
            op.fn.update_state(self.map, self.tuples, c)
        Proc.finish(self)


def _open_state(bolt: TridentBolt, op: Any) -> Any:
    """The state of a persist or query op: a map of the topology (``trident.state``), or
    what a State API factory makes for this task (``context.state``: the framework runs
    its ``begin_commit``/``commit`` around the task's batch)."""
    if is_state_factory(op.state):
        return bolt.context.state(op.state)
    sid = op.state.uid or op.state.name
    m = bolt.context.map_state(sid, op.state.state_type.value, **op.state.ttl)
    bounds = (getattr(bolt, "conf", None) or {}).get(MIGRATIONS, {}).get(sid)
    kind = op.state.state_type.value
    if bounds and op.state.migrate is not None and kind in VALUE_FIELDS and not isinstance(m.backing, MigratingBacking):
        m.backing = MigratingBacking(m.backing, kind, op.state.migrate, bounds)   # values of earlier versions
    return m


class _ReadView:
    """A query's view of a map: the values committed before this batch."""

    def __init__(self, m: MapState[Any]) -> None:
        self._m = m

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        values: list[Any] = self._m.multi_get_committed(keys)
        return values

    def get(self, key: Any) -> Any:
        return self.multi_get([key])[0]

    def items(self) -> list[tuple[Any, Any]]:
        """Every ``(key, value)`` committed before this batch (``TupleCollectionGet``): the
        backing lists its keys (``Scanning``: memory, Redis); another backing cannot."""
        from transactional.exceptions import ConfigError

        m = self._m
        if not m.caps.scanning:
            msg = (f"TupleCollectionGet lists every key of map {m.name!r}, but its backing "
                   f"{type(m.backing).__name__} cannot list keys; keep that map in memory:// or redis://")
            raise ConfigError(msg)
        keys = list(cast(Scanning, m.backing).scan())
        values = self.multi_get(keys)
        return [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]


class QueryProc(Proc):
    """``state_query``: the task's tuples, one ``batch_retrieve`` against the state as it was
    committed before this batch, then ``execute`` per tuple; output appended to the row."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.bolt = bolt
        self.view = None if is_state_factory(op.state) else _ReadView(_open_state(bolt, op))
        self.tt = TridentTuple.of(op.in_fields)
        self.buffered: list[Row] = []

    def row(self, r: Row) -> None:
        self.buffered.append(r)

    def finish(self) -> None:
        op, nxt = self.op, self.nxt
        assert op is not None and nxt is not None
        if self.buffered:
            tts = [self.tt(tuple(r[i] for i in op.in_idx)) for r in self.buffered]
            results = op.fn.batch_retrieve(self.view if self.view is not None else _open_state(self.bolt, op), tts)
            if len(results) != len(tts):
                msg = f"batch_retrieve returned {len(results)} results for {len(tts)} tuples"
                raise ValueError(msg)
            c = _Collect(nxt.row, len(op.out_fields) - len(op.fields), op_label(op))
            for r, t, res in zip(self.buffered, tts, results, strict=True):
                c.current = r
                op.fn.execute(t, res, c)
        Proc.finish(self)
