"""Trident's streams: ``Stream`` (each, filter, map, aggregate, repartition, persist,
query...), ``GroupedStream`` and ``ChainedAggregatorDeclarer``. Every method adds a
``Node`` to the ``TridentTopology`` and returns the stream it produces; ``build()``
compiles the nodes (``trident.compiler``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from transactional.exceptions import ConfigError
from transactional.tuples import Fields
from trident.builtin import Peek
from trident.operation import (
    Aggregator,
    BatchFunction,
    CombinerAggregator,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
)
from trident.runtime.map_updaters import MapCombinerAggStateUpdater, MapReducerAggStateUpdater
from trident.runtime.op import Op
from trident.state import MapStateFactory, StateType, TridentState, is_state_factory, mark_factory
from trident.windowing import (
    Duration,
    SlidingCountWindow,
    SlidingDurationWindow,
    TumblingCountWindow,
    TumblingDurationWindow,
    session_spec,
    window_spec,
)

if TYPE_CHECKING:
    from trident.topology import TridentTopology


def _fields(f: Fields | Sequence[str] | str, what: str) -> Fields:
    if isinstance(f, Fields):
        return f
    if isinstance(f, str):
        return Fields(f)
    if isinstance(f, (list, tuple)) and all(isinstance(x, str) for x in f):
        return Fields(*f)
    msg = f"{what} must be Fields(...) (or a list of field names); got {f!r}"
    raise ConfigError(msg)


@dataclass(eq=False)
class Node:
    """One operation of the graph, with the fields of the stream it produces."""

    kind: str
    parents: list[Node]
    fields: Fields
    op: Op | None = None
    spout: Any = None
    spout_id: str | None = None
    grouping: str = ""              # repartition / aggregation boundaries
    keys: Fields = field(default_factory=Fields)
    hint: int | None = None
    name: str | None = None
    extra: Any = None               # join: per parent (key positions, other positions)


class Stream:
    """A stream of tuples with named fields; every method returns a new ``Stream``.

    >>> from trident import TridentTopology, FixedBatchSpout, Count
    >>> from transactional import Fields
    >>> t = TridentTopology("doc")
    >>> s = t.new_stream("words", FixedBatchSpout(Fields("word"), 2, ("a",), ("b",)))
    >>> s.group_by(Fields("word")).persistent_aggregate(
    ...     __import__("trident").state.transactional("counts"), Count(), Fields("count"))
    TridentState('counts', transactional)
    """

    def __init__(self, topology: TridentTopology, node: Node) -> None:
        self.topology = topology
        self.node = node

    @property
    def fields(self) -> Fields:
        """The stream's field names."""
        return self.node.fields

    def get_output_fields(self) -> Fields:
        """The stream's field names (Storm's name)."""
        return self.node.fields

    # -- naming and parallelism --------------------------------------------------------------
    def name(self, name: str) -> Stream:
        """Name the stage this operation runs in (its component id ends with it)."""
        self.node.name = name
        return self

    def parallelism_hint(self, n: int) -> Stream:
        """The number of tasks of the operations since the last repartitioning (the spout's
        too, right after ``new_stream``)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            msg = f"parallelism_hint must be an int >= 1; got {n!r}"
            raise ConfigError(msg)
        self.node.hint = n
        return self

    # -- per-tuple operations ----------------------------------------------------------------
    def _in(self, in_fields: Any, what: str) -> tuple[Fields, tuple[int, ...]]:
        f = _fields(in_fields, f"{what}: input fields")
        missing = [x for x in f if x not in self.fields]
        if missing:
            msg = (f"{what} reads field(s) {missing}, but the stream has fields {list(self.fields)}; "
                   "fix the field names (or project/each them in first)")
            raise ConfigError(msg)
        return f, tuple(self.fields.index(x) for x in f)

    def _new_fields(self, out: Fields, what: str) -> Fields:
        dup = [x for x in out if x in self.fields]
        if dup or len(set(out)) != len(out):
            msg = (f"{what} declares output field(s) {dup or list(out)} that the stream already has "
                   f"({list(self.fields)}) or repeats; choose new names")
            raise ConfigError(msg)
        return Fields(*self.fields, *out)

    def _op(self, kind: str, fn: Any, in_fields: Any, out_fields: Fields, **kw: Any) -> Stream:
        f, idx = self._in(in_fields, kind) if in_fields is not None else (self.fields, tuple(range(len(self.fields))))
        op = Op(kind, self.fields, out_fields, fn=fn, in_idx=idx, in_fields=f, **kw)
        return self.topology._add(Node("op", [self.node], out_fields, op=op))

    def each(self, in_fields: Any, function: Function | Filter | Any = None, out_fields: Any = None) -> Stream:
        """Run ``function`` on each tuple's ``in_fields``; what it emits (``out_fields``) is
        appended to the tuple. ``each(in_fields, filter)`` keeps the tuples a ``Filter`` keeps.
        Without input fields (``each(function, out_fields)``, ``each(filter)``) the operation
        reads the whole tuple."""
        if isinstance(in_fields, (Function, Filter)):
            in_fields, function, out_fields = None, in_fields, function
        if out_fields is None and isinstance(function, Filter):
            return self.filter(in_fields, function)
        if not isinstance(function, Function):
            msg = (f"each() takes a trident.Function (execute(tuple, collector)); got {function!r}. "
                   "For a plain callable use map() or flat_map()")
            raise ConfigError(msg)
        out = _fields(out_fields, "each: output fields")
        return self._op("each", function, in_fields, self._new_fields(out, "each"))

    def filter(self, in_fields: Any, filter: Filter | Callable[[Any], bool] | None = None) -> Stream:
        """Keep the tuples for which ``filter.is_keep(tuple)`` (or ``filter(tuple)``) is true.
        ``filter(f)`` alone reads every field."""
        if filter is None:
            in_fields, filter = None, in_fields
        if not (isinstance(filter, Filter) or callable(filter)):
            msg = f"filter() takes a trident.Filter or a callable; got {filter!r}"
            raise ConfigError(msg)
        return self._op("filter", filter, in_fields, self.fields)

    def peek(self, fn: Callable[[Any], Any]) -> Stream:
        """Call ``fn`` with each tuple (a ``TridentTuple`` of every field) and pass the tuple on
        unchanged (Storm's ``peek``): for logging, metrics, debugging."""
        if not callable(fn):
            msg = f"peek() takes a callable (fn(tuple)); got {fn!r}"
            raise ConfigError(msg)
        return self._op("peek", Peek(fn), None, self.fields)

    def map(self, function: MapFunction | Callable[[Any], Any], out_fields: Any = None) -> Stream:
        """Replace each tuple by ``function(tuple)`` (a tuple of ``out_fields``; the stream's
        fields if not given)."""
        out = self.fields if out_fields is None else _fields(out_fields, "map: output fields")
        return self._op("map", _callable(function, MapFunction, "map"), None, out)

    def flat_map(self, function: FlatMapFunction | Callable[[Any], Iterable[Any]], out_fields: Any = None) -> Stream:
        """Replace each tuple by the tuples ``function(tuple)`` returns."""
        out = self.fields if out_fields is None else _fields(out_fields, "flat_map: output fields")
        return self._op("flat_map", _callable(function, FlatMapFunction, "flat_map"), None, out)

    def project(self, keep_fields: Any) -> Stream:
        """Keep only ``keep_fields``, in that order."""
        f, idx = self._in(keep_fields, "project")
        op = Op("project", self.fields, f, in_idx=idx, in_fields=f, columnar=True)
        return self.topology._add(Node("op", [self.node], f, op=op))

    # -- the columnar path -------------------------------------------------------------------
    def each_batch(self, in_fields: Any, function: BatchFunction | Callable[[Any], Any], out_fields: Any) -> Stream:
        """Columnar ``each``: ``function`` gets the task's whole batch of ``in_fields`` as a
        ``pyarrow.RecordBatch`` and returns the new columns ``out_fields`` (same rows),
        appended to the stream. Downstream stages receive Arrow buffers, not tuples."""
        out = _fields(out_fields, "each_batch: output fields")
        fn = _callable(function, BatchFunction, "each_batch")
        return self._op("each_batch", fn, in_fields, self._new_fields(out, "each_batch"), columnar=True)

    def map_batches(self, function: BatchFunction | Callable[[Any], Any], out_fields: Any,
                    in_fields: Any = None) -> Stream:
        """Columnar ``flat_map``: ``function(batch) -> batch`` replaces the task's whole batch
        (any number of rows) with columns ``out_fields``."""
        out = _fields(out_fields, "map_batches: output fields")
        fn = _callable(function, BatchFunction, "map_batches")
        return self._op("map_batches", fn, in_fields, out, columnar=True)

    # -- aggregation ---------------------------------------------------------------------------
    def partition_aggregate(self, in_fields: Any, aggregator: Any = None, out_fields: Any = None) -> Stream:
        """Aggregate each task's share of the batch (no repartitioning); the stream becomes
        the aggregator's output. ``partition_aggregate(aggregator, out_fields)`` reads no fields."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _aggregate(self, Fields(), in_fields, aggregator, out_fields, scope="partition")

    def aggregate(self, in_fields: Any, aggregator: Any = None, out_fields: Any = None) -> Stream:
        """Aggregate the whole batch into one place (global aggregation); a combiner is
        pre-aggregated per task first. One tuple per batch whatever the stage's
        ``parallelism_hint`` (for an empty batch: the aggregator's value of no tuples).
        ``aggregate(Count(), Fields("n"))`` reads no fields."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _aggregate(self, Fields(), in_fields, aggregator, out_fields, scope="global")

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Several aggregators over the same tuples in one pass (``.aggregate(...)...chain_end()``)."""
        return ChainedAggregatorDeclarer(self, Fields())

    def persistent_aggregate(self, state_factory: Any, in_fields: Any, aggregator: Any = None,
                             out_fields: Any = None) -> TridentState:
        """Aggregate every batch into one stored value (key ``"$GLOBAL"``) of the map,
        exactly once; ``persistent_aggregate(factory, Count(), Fields("count"))`` reads no
        fields."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _persist(self, Fields(), state_factory, in_fields, aggregator, out_fields)

    def group_by(self, fields: Any) -> GroupedStream:
        """Group by ``fields``: the aggregations that follow are per group."""
        f, _ = self._in(fields, "group_by")
        return GroupedStream(self, f)

    # -- repartitioning ------------------------------------------------------------------------
    def _repartition(self, grouping: str, keys: Fields | None = None) -> Stream:
        return self.topology._add(Node("repartition", [self.node], self.fields, grouping=grouping,
                                       keys=keys or Fields()))

    def shuffle(self) -> Stream:
        """Spread tuples evenly over the next stage's tasks."""
        return self._repartition("shuffle")

    def partition_by(self, fields: Any) -> Stream:
        """Send tuples with equal ``fields`` to the same task of the next stage."""
        f, _ = self._in(fields, "partition_by")
        return self._repartition("fields", f)

    def global_(self) -> Stream:
        """Send every tuple to one task."""
        return self._repartition("global")

    def broadcast(self) -> Stream:
        """Send every tuple to every task of the next stage."""
        return self._repartition("all")

    def local_or_shuffle(self) -> Stream:
        """Task i sends to task i of the next stage when both have the same number of tasks
        (no data moves), else a shuffle (Storm's ``localOrShuffle``)."""
        return self._repartition("local")

    def batch_global(self) -> Stream:
        """Every tuple of a batch to one task of the next stage (Storm's ``batchGlobal``).
        Here that task is always the first, as ``global_()``."""
        return self._repartition("global")

    def identity_partition(self) -> Stream:
        """Task i sends to task i of the next stage (Storm's ``identityPartition``); both
        stages must have the same number of tasks (``build()`` checks it)."""
        node = self._repartition("local").node
        node.extra = "identity"
        return Stream(self.topology, node)

    # -- comparisons per partition (Storm's minBy, maxBy, min, max) ---------------------------
    def _extreme(self, field: str | None, comparator: Any, greatest: bool, what: str) -> Stream:
        if field is not None:
            self._in(Fields(field), what)
        elif not callable(comparator):
            msg = f"{what} takes a comparator fn(t1, t2) -> int (negative: t1 first); got {comparator!r}"
            raise ConfigError(msg)
        from trident.builtin import MaxBy, MinBy

        agg = (MaxBy if greatest else MinBy)(field, comparator)
        return self.partition_aggregate(self.fields, agg, self.fields)

    def min_by(self, field: str) -> Stream:
        """Per partition, the tuple with the least value of ``field`` (the first of equals)."""
        return self._extreme(field, None, False, "min_by")

    def max_by(self, field: str) -> Stream:
        """Per partition, the tuple with the greatest value of ``field`` (the first of equals)."""
        return self._extreme(field, None, True, "max_by")

    def min(self, comparator: Callable[[Any, Any], int]) -> Stream:
        """Per partition, the least tuple by ``comparator(t1, t2)`` (negative: t1 is less)."""
        return self._extreme(None, comparator, False, "min")

    def max(self, comparator: Callable[[Any, Any], int]) -> Stream:
        """Per partition, the greatest tuple by ``comparator(t1, t2)``."""
        return self._extreme(None, comparator, True, "max")

    # -- state -------------------------------------------------------------------------------
    def partition_persist(self, state_factory: Any, in_fields: Any, updater: StateUpdater,
                          out_fields: Any = None) -> TridentState:
        """Hand each task's tuples of a batch to ``updater.update_state(map, tuples,
        collector)`` in the commit phase; what it emits (``out_fields``) is the state's
        ``new_values_stream``."""
        if not isinstance(updater, StateUpdater):
            msg = f"partition_persist takes a trident.StateUpdater; got {updater!r}"
            raise ConfigError(msg)
        _check_factory(state_factory)
        f, idx = self._in(in_fields, "partition_persist")
        out = Fields() if out_fields is None else _fields(out_fields, "partition_persist: output fields")
        op = Op("partition_persist", self.fields, out, fn=updater, in_idx=idx, in_fields=f, state=state_factory)
        node = self.topology._add(Node("persist", [self.node], out, op=op, grouping="local")).node
        return self.topology._state(state_factory, node)

    def state_query(self, state: TridentState, in_fields: Any, function: Any = None, out_fields: Any = None) -> Stream:
        """Query ``state`` with each tuple's ``in_fields`` (``MapGet()`` reads the value under
        that key); the results (``out_fields``) are appended. The query sees the state as
        every batch before this one left it: it runs in the commit phase, after the previous
        txid committed. ``state_query(state, function, out_fields)`` reads no input fields
        (Storm's three-argument ``stateQuery``, e.g. with ``SnapshotGet()``)."""
        if out_fields is None and isinstance(in_fields, QueryFunction):
            in_fields, function, out_fields = Fields(), in_fields, function
        if not isinstance(state, TridentState):
            msg = f"state_query takes the TridentState a persistent_aggregate returned; got {state!r}"
            raise ConfigError(msg)
        if not isinstance(function, QueryFunction):
            msg = f"state_query takes a trident.QueryFunction (e.g. MapGet()); got {function!r}"
            raise ConfigError(msg)
        f, idx = self._in(in_fields, "state_query")
        out = self._new_fields(_fields(out_fields, "state_query: output fields"), "state_query")
        op = Op("query", self.fields, out, fn=function, in_idx=idx, in_fields=f, state=state.factory)
        return self.topology._add(Node("query", [self.node], out, op=op))

    def window(self, window_config: Any, store_factory: Any, in_fields: Any, aggregator: Any, out_fields: Any,
               *, timestamp_field: str | None = None, lag: Any = None, late_stream: str | None = None) -> Stream:
        """Aggregate windows (``TumblingCountWindow.of(n)``, ...) exactly once, open ones kept
        by ``store_factory``; the stream becomes what the aggregator emits per window (it
        finds the bounds in ``collector.window``). ``timestamp_field``: event time, with
        ``lag``; ``late_stream``: late tuples on ``TridentTopology.late_stream(name)``."""
        spec = window_spec(self.fields, window_config, store_factory, aggregator, timestamp_field, lag, "window",
                           late_stream)
        f, idx = self._in(in_fields, "window")
        out = _fields(out_fields, "window: output fields")
        op = Op("window", self.fields, out, fn=spec, in_idx=idx, in_fields=f)
        return self.topology._add(Node("window", [self.node], out, op=op, grouping="global"))

    def tumbling_window(self, size: Any, store_factory: Any, in_fields: Any, aggregator: Any, out_fields: Any,
                        **event_time: Any) -> Stream:
        """``window`` over tumbling windows of ``size``: a number of tuples (``Count(n)`` or an
        int) or a ``Duration``; ``event_time``: ``window``'s keywords."""
        cfg = TumblingDurationWindow.of(size) if isinstance(size, Duration) else TumblingCountWindow.of(size)
        return self.window(cfg, store_factory, in_fields, aggregator, out_fields, **event_time)

    def sliding_window(self, size: Any, sliding: Any, store_factory: Any, in_fields: Any, aggregator: Any,
                       out_fields: Any, **event_time: Any) -> Stream:
        """``window`` over windows of ``size`` sliding by ``sliding`` (both counts or both
        ``Duration``s); ``event_time``: ``window``'s keywords."""
        cfg = SlidingDurationWindow.of(size, sliding) if isinstance(size, Duration) else \
            SlidingCountWindow.of(size, sliding)
        return self.window(cfg, store_factory, in_fields, aggregator, out_fields, **event_time)

    def session_window(self, gap: Any, store_factory: Any, in_fields: Any, aggregator: Any, out_fields: Any,
                       *, timestamp_field: str, lag: Any = None, late_stream: str | None = None) -> Stream:
        """Session windows over event time, exactly once: runs of tuples each less than
        ``gap`` after the one before, fired when the watermark passes the last plus ``gap``;
        a late tuple bridging two merges them (docs/windows.md)."""
        return _session(self, Fields(), gap, store_factory, in_fields, aggregator, out_fields, timestamp_field,
                        lag, late_stream)

    def apply_assembly(self, assembly: Any) -> Stream:
        """``assembly.apply(self)``: a reusable piece of stream (e.g. ``FirstN``)."""
        out: Stream = assembly.apply(self)
        return out

    def to_stream(self) -> Stream:
        """This stream (for symmetry with ``GroupedStream.to_stream``)."""
        return self

    def __repr__(self) -> str:
        return f"Stream({list(self.fields)})"


def _callable(fn: Any, cls: type, what: str) -> Any:
    if isinstance(fn, cls) or callable(fn):
        return fn
    msg = f"{what}() takes a trident.{cls.__name__} or a callable; got {fn!r}"
    raise ConfigError(msg)


def _check_factory(f: Any) -> None:
    if not isinstance(f, MapStateFactory) and not is_state_factory(f):
        msg = ("a state factory is trident.state.transactional(name), opaque(name) or "
               "non_transactional(name), or a trident.state.StateFactory (make_state(conf, metrics, "
               f"partition_index, num_partitions)); got {f!r}")
        raise ConfigError(msg)
    if is_state_factory(f):
        mark_factory(f)


def _check_aggregator(agg: Any, what: str) -> None:
    if not isinstance(agg, (CombinerAggregator, ReducerAggregator, Aggregator, _Chain)):
        msg = (f"{what} takes a CombinerAggregator, ReducerAggregator or Aggregator (e.g. Count(), "
               f"Sum()); got {agg!r}")
        raise ConfigError(msg)


def _aggregate(stream: Stream, group: Fields, in_fields: Any, agg: Any, out_fields: Any, scope: str) -> Stream:
    _check_aggregator(agg, f"{scope}_aggregate" if scope == "partition" else "aggregate")
    out = _fields(out_fields, "aggregate: output fields")
    f, idx = (stream._in(in_fields, "aggregate") if in_fields is not None else (Fields(), ()))
    gidx = tuple(stream.fields.index(g) for g in group)
    fields = Fields(*group, *out)
    topo = stream.topology
    if isinstance(agg, _Chain):
        agg = agg.build(stream)
        f, idx = stream.fields, tuple(range(len(stream.fields)))
    if scope == "partition":
        op = Op("aggregate", stream.fields, fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx)
        return topo._add(Node("op", [stream.node], fields, op=op))
    grouping = "fields" if group else "global"
    if isinstance(agg, CombinerAggregator):
        partial_fields = Fields(*group, out[-1]) if len(out) == 1 else None
        if partial_fields is None:
            msg = f"a CombinerAggregator has one output field; got {list(out)}"
            raise ConfigError(msg)
        p = Op("partial", stream.fields, partial_fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx,
               columnar=True)
        pnode = topo._add(Node("op", [stream.node], partial_fields, op=p)).node
        final = Op("final", partial_fields, fields, fn=agg, group_idx=tuple(range(len(group))), columnar=True,
                   single=not group)
        return topo._add(Node("boundary", [pnode], fields, op=final, grouping=grouping, keys=group))
    op = Op("aggregate", stream.fields, fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx, single=not group)
    return topo._add(Node("boundary", [stream.node], fields, op=op, grouping=grouping, keys=group))


def _persist(stream: Stream, group: Fields, factory: Any, in_fields: Any, agg: Any,
             out_fields: Any) -> TridentState:
    _check_factory(factory)
    if not isinstance(agg, (CombinerAggregator, ReducerAggregator)):
        msg = (f"persistent_aggregate takes a CombinerAggregator or ReducerAggregator (e.g. Count(), "
               f"Sum()); got {agg!r}: an Aggregator's output is not one value to store")
        raise ConfigError(msg)
    out = _fields(out_fields, "persistent_aggregate: output fields")
    if len(out) != 1:
        msg = f"persistent_aggregate stores one value per key; declare one output field, not {list(out)}"
        raise ConfigError(msg)
    f, idx = (stream._in(in_fields, "persistent_aggregate") if in_fields is not None else (Fields(), ()))
    if getattr(factory, "state_type", None) is StateType.COUNTER and getattr(agg, "arrow_agg", None) not in ("count", "sum"):
        msg = (f"state {factory.name!r} is a counter map: it adds numbers, so it takes Count() or Sum(), "
               f"not {type(agg).__name__}; use trident.state.transactional({factory.name!r}) for other aggregators")
        raise ConfigError(msg)
    gidx = tuple(stream.fields.index(g) for g in group)
    fields = Fields(*group, *out)
    topo = stream.topology
    grouping = "fields" if group else "global"
    # Storm's compilation: partial aggregates, then partition_persist with a combiner (or
    # reducer) updater that writes through the map's one door (trident.runtime.map_updaters)
    if isinstance(agg, CombinerAggregator):
        partial_fields = Fields(*group, out[0])
        p = Op("partial", stream.fields, partial_fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx,
               columnar=True, stages_to=factory.name if getattr(factory, "state_type", None) is StateType.COUNTER
               else None)
        pnode = topo._add(Node("op", [stream.node], partial_fields, op=p)).node
        op = Op("partition_persist", partial_fields, fields, fn=MapCombinerAggStateUpdater(agg, len(group)),
                group_idx=tuple(range(len(group))), state=factory, verb="persistent_aggregate")
        node = topo._add(Node("persist", [pnode], fields, op=op, grouping=grouping, keys=group)).node
    else:
        op = Op("partition_persist", stream.fields, fields, fn=MapReducerAggStateUpdater(agg, len(group)),
                in_idx=idx, in_fields=f, group_idx=gidx, state=factory, verb="persistent_aggregate")
        node = topo._add(Node("persist", [stream.node], fields, op=op, grouping=grouping, keys=group)).node
    return topo._state(factory, node)


class GroupedStream:
    """A stream grouped by ``group_fields`` (``Stream.group_by``): aggregations run per
    group; the output is the group fields followed by the aggregator's fields."""

    def __init__(self, stream: Stream, group_fields: Fields) -> None:
        self.stream = stream
        self.group_fields = group_fields

    def aggregate(self, in_fields: Any, aggregator: Any, out_fields: Any = None) -> Stream:
        """Aggregate each group of the batch (repartitioned by the group fields; a combiner
        is pre-aggregated per task before the shuffle)."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _aggregate(self.stream, self.group_fields, in_fields, aggregator, out_fields, scope="global")

    def partition_aggregate(self, in_fields: Any, aggregator: Any, out_fields: Any = None) -> Stream:
        """Aggregate each group within each task's share (no repartitioning)."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _aggregate(self.stream, self.group_fields, in_fields, aggregator, out_fields, scope="partition")

    def persistent_aggregate(self, state_factory: Any, in_fields: Any, aggregator: Any = None,
                             out_fields: Any = None) -> TridentState:
        """Aggregate each group of every batch into the map under the group's key (the
        value of one group field, a tuple of several), exactly once per txid."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        return _persist(self.stream, self.group_fields, state_factory, in_fields, aggregator, out_fields)

    def session_window(self, gap: Any, store_factory: Any, in_fields: Any, aggregator: Any, out_fields: Any,
                       *, timestamp_field: str, lag: Any = None, late_stream: str | None = None) -> Stream:
        """``Stream.session_window``, a session per group: outputs group fields + ``out_fields``."""
        return _session(self.stream, self.group_fields, gap, store_factory, in_fields, aggregator, out_fields,
                        timestamp_field, lag, late_stream)

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Several aggregators per group in one pass."""
        return ChainedAggregatorDeclarer(self.stream, self.group_fields)

    def state_query(self, state: TridentState, in_fields: Any, function: Any = None, out_fields: Any = None) -> Stream:
        """Storm's ``GroupedStream.stateQuery``: the tuples partitioned by the group fields,
        then ``Stream.state_query`` (the result is ungrouped; three arguments: no input
        fields)."""
        return self.stream.partition_by(self.group_fields).state_query(state, in_fields, function, out_fields)

    def to_stream(self) -> Stream:
        """The stream, ungrouped."""
        return self.stream

    def name(self, name: str) -> GroupedStream:
        """Name the stage the grouped stream's last operations run in (``Stream.name``)."""
        self.stream.name(name)
        return self

    @property
    def fields(self) -> Fields:
        """The stream's field names."""
        return self.stream.fields

    def __repr__(self) -> str:
        return f"GroupedStream({list(self.stream.fields)}, by {list(self.group_fields)})"


class _Chain:
    def __init__(self, parts: list[tuple[Any, Any, Fields]]) -> None:
        self.parts = parts

    def build(self, stream: Stream) -> Any:
        from trident.runtime.aggregators import _Chained

        return _Chained([(a, stream._in(f, "chained_agg")[1] if f is not None else (),
                          stream._in(f, "chained_agg")[0] if f is not None else Fields())
                         for a, f, _ in self.parts])


class ChainedAggregatorDeclarer:
    """Storm's ``ChainedAggregatorDeclarer``: ``stream.chained_agg().aggregate(Fields("a"),
    Sum(), Fields("sum")).aggregate(Count(), Fields("count")).chain_end()`` computes both in
    one pass; the output is the group fields and every aggregator's fields."""

    def __init__(self, stream: Stream, group: Fields) -> None:
        self.stream = stream
        self.group = group
        self.parts: list[tuple[Any, Any, Fields]] = []
        self.scope = "global"

    def aggregate(self, in_fields: Any, aggregator: Any = None, out_fields: Any = None) -> ChainedAggregatorDeclarer:
        """Add an aggregator over all the batch (or group)."""
        if out_fields is None:
            in_fields, aggregator, out_fields = None, in_fields, aggregator
        _check_aggregator(aggregator, "chained_agg")
        self.parts.append((aggregator, in_fields, _fields(out_fields, "chained_agg: output fields")))
        return self

    def partition_aggregate(self, in_fields: Any, aggregator: Any = None,
                            out_fields: Any = None) -> ChainedAggregatorDeclarer:
        """Add an aggregator per task (the whole chain then aggregates per task)."""
        self.scope = "partition"
        return self.aggregate(in_fields, aggregator, out_fields)

    def chain_end(self) -> Stream:
        """The stream of the chained results."""
        if not self.parts:
            msg = "chained_agg() needs at least one aggregate(...) before chain_end()"
            raise ConfigError(msg)
        out = Fields(*[f for _, _, fs in self.parts for f in fs])
        return _aggregate(self.stream, self.group, None, _Chain(self.parts), out, scope=self.scope)


def _session(stream: Stream, group: Fields, gap: Any, store_factory: Any, in_fields: Any, aggregator: Any,
             out_fields: Any, timestamp_field: str, lag: Any, late_stream: str | None) -> Stream:
    """The session window node of ``stream`` (per value of ``group``, when given)."""
    key_idx, (f, idx) = stream._in(group, "session_window")[1], stream._in(in_fields, "session_window")
    spec = session_spec(stream.fields, gap, store_factory, aggregator, timestamp_field, lag, late_stream,
                        key_idx, "session_window")
    out = Fields(*group, *_fields(out_fields, "session_window: output fields"))
    op = Op("window", stream.fields, out, fn=spec, in_idx=idx, in_fields=f)
    return stream.topology._add(Node("window", [stream.node], out, op=op, grouping="global"))
