"""Storm's Trident API in Python, compiled onto the engine's plan (docs/trident.md).

``TridentTopology`` collects a graph of stream operations; ``build()`` compiles it once
into a ``transactional.Topology`` of spouts and ``TridentBolt`` stages, which
``run_topology`` runs like any other topology (same coordinator, plan and runner):

* operations between two repartitionings fuse into one stage (``each``, ``filter``,
  ``map``, ``flat_map``, ``project``, ``partition_aggregate``, ``each_batch``,
  ``map_batches``);
* ``shuffle``, ``partition_by``, ``global_``, ``broadcast`` and the aggregations of
  ``group_by`` / ``aggregate`` start a new stage with the matching grouping;
* a ``CombinerAggregator`` before such a boundary runs in two steps: a partial
  aggregation per task in the stage before the shuffle, and the combination of the
  partials after it (Trident's partial aggregation);
* ``persistent_aggregate``, ``partition_persist`` and ``state_query`` run in committer
  stages, in the commit phase, in txid order; their maps are the topology's maps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from transactional.exceptions import ConfigError
from transactional.topology import Topology, TransactionalTopologyBuilder, _Declarer
from transactional.tuples import Fields
from trident._runtime import ArrowOut, Op, TridentBolt, TridentCommitterBolt, op_label
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
from trident.state import MapStateFactory, StateType, TridentState, check_pairing
from trident.states import is_state_factory

COLUMNAR = {"each_batch", "map_batches"}


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

    def each(self, in_fields: Any, function: Function | Filter, out_fields: Any = None) -> Stream:
        """Run ``function`` on each tuple's ``in_fields``; what it emits (``out_fields``) is
        appended to the tuple. ``each(in_fields, filter)`` keeps the tuples a ``Filter`` keeps."""
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

    def state_query(self, state: TridentState, in_fields: Any, function: QueryFunction, out_fields: Any) -> Stream:
        """Query ``state`` with each tuple's ``in_fields`` (``MapGet()`` reads the value under
        that key); the results (``out_fields``) are appended. The query sees the state as
        every batch before this one left it: it runs in the commit phase, after the previous
        txid committed."""
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

    def apply_assembly(self, assembly: Any) -> Stream:
        """``assembly.apply(self)``: a reusable piece of stream (e.g. ``FirstN``)."""
        return assembly.apply(self)

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
               "non_transactional(name), or a trident.states.StateFactory (make_state(conf, metrics, "
               f"partition_index, num_partitions)); got {f!r}")
        raise ConfigError(msg)


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


def _persist(stream: Stream, group: Fields, factory: MapStateFactory, in_fields: Any, agg: Any,
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
    if isinstance(agg, CombinerAggregator):
        partial_fields = Fields(*group, out[0])
        p = Op("partial", stream.fields, partial_fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx,
               columnar=True)
        pnode = topo._add(Node("op", [stream.node], partial_fields, op=p)).node
        op = Op("persist", partial_fields, fields, fn=agg, group_idx=tuple(range(len(group))), state=factory)
        node = topo._add(Node("persist", [pnode], fields, op=op, grouping=grouping, keys=group)).node
    else:
        op = Op("persist", stream.fields, fields, fn=agg, in_idx=idx, in_fields=f, group_idx=gidx, state=factory)
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

    def chained_agg(self) -> ChainedAggregatorDeclarer:
        """Several aggregators per group in one pass."""
        return ChainedAggregatorDeclarer(self.stream, self.group_fields)

    def to_stream(self) -> Stream:
        """The stream, ungrouped."""
        return self.stream

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
        from trident._runtime import _Chained

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


# -- the topology and its compiler -----------------------------------------------------------

class TridentTopology:
    """Storm's ``TridentTopology``: ``new_stream(txid_name, spout)`` starts a stream;
    ``build()`` compiles every stream into one ``Topology`` (``run_topology`` runs it).

    ``txid_name`` names the spout (its coordinator state lives under it), as in Storm.
    """

    def __init__(self, topology_id: str = "trident") -> None:
        self.topology_id = topology_id
        self.nodes: list[Node] = []
        self.states: dict[str, TridentState] = {}

    def _add(self, node: Node) -> Stream:
        self.nodes.append(node)
        return Stream(self, node)

    def stream_of(self, node: Node) -> Stream:
        """The stream of ``node``, a node of this topology (e.g. a state's updates:
        ``TridentState.new_values_stream``)."""
        return Stream(self, node)

    def _state(self, factory: Any, node: Node | None) -> TridentState:
        if not isinstance(factory, MapStateFactory):      # a State API factory: its own state
            return TridentState(self, factory, node)
        old = self.states.get(factory.name)
        if old is not None and old.factory != factory:
            msg = (f"state {factory.name!r} is used as {old.factory.state_type.value} and as "
                   f"{factory.state_type.value}; one name, one kind")
            raise ConfigError(msg)
        s = TridentState(self, factory, node)
        self.states.setdefault(factory.name, s)
        return s

    def new_static_state(self, factory: Any) -> TridentState:
        """Storm's ``newStaticState``: a state that no stream of this topology updates,
        for ``Stream.state_query`` (e.g. a table of the user's database). ``factory``: a
        ``trident.states.StateFactory``, or a map factory of ``trident.state``."""
        _check_factory(factory)
        return self._state(factory, None)

    def new_stream(self, txid_name: str, spout: Any) -> Stream:
        """A stream of ``spout``'s batches (any transactional, partitioned or opaque spout,
        e.g. ``FixedBatchSpout``, ``MemoryTransactionalSpout``, the Kafka spouts)."""
        if any(n.spout_id == txid_name for n in self.nodes):
            msg = f"new_stream({txid_name!r}): a stream of that name exists; each spout needs its own name"
            raise ConfigError(msg)
        if not hasattr(spout, "declare_output_fields") or not hasattr(spout, "get_emitter"):
            msg = (f"new_stream({txid_name!r}) takes a transactional spout (e.g. FixedBatchSpout, "
                   f"MemoryTransactionalSpout, KafkaTransactionalSpout); got {spout!r}")
            raise ConfigError(msg)
        d = _Declarer(txid_name)
        spout.declare_output_fields(d)
        fields = d.streams["default"].fields
        return self._add(Node("spout", [], Fields(*fields[1:]), spout=spout, spout_id=txid_name))

    def merge(self, *streams: Stream) -> Stream:
        """The tuples of every stream of the batch as one stream (fields named as the first's;
        all must have as many fields)."""
        streams = tuple(streams[0]) if len(streams) == 1 and isinstance(streams[0], (list, tuple)) else streams
        if len(streams) < 2:
            msg = "merge() takes two or more streams"
            raise ConfigError(msg)
        n = len(streams[0].fields)
        bad = [list(s.fields) for s in streams if len(s.fields) != n]
        if bad:
            msg = f"merge(): streams must have as many fields as the first ({list(streams[0].fields)}); got {bad}"
            raise ConfigError(msg)
        return self._add(Node("merge", [s.node for s in streams], streams[0].fields, grouping="shuffle"))

    def join(self, *args: Any) -> Stream:
        """Join streams within each batch on their join fields: ``join(s1, Fields("k"), s2,
        Fields("k2"), Fields("k", "a", "b"))``. Output: the join fields, then the other fields
        of each stream in order, named by the last argument (an inner join)."""
        if len(args) < 5 or len(args) % 2 == 0:
            msg = "join(s1, fields1, s2, fields2, [s3, fields3, ...,] out_fields)"
            raise ConfigError(msg)
        pairs = [(args[i], args[i + 1]) for i in range(0, len(args) - 1, 2)]
        out = _fields(args[-1], "join: output fields")
        sides = []
        width = None
        for s, jf in pairs:
            if not isinstance(s, Stream):
                msg = f"join(): expected a Stream, got {s!r}"
                raise ConfigError(msg)
            f, idx = s._in(jf, "join")
            if width is not None and len(f) != width:
                msg = "join(): every stream joins on as many fields"
                raise ConfigError(msg)
            width = len(f)
            rest = tuple(i for i in range(len(s.fields)) if i not in idx)
            sides.append((s, f, idx, rest))
        n_out = width + sum(len(r) for _, _, _, r in sides)   # type: ignore[operator]
        if len(out) != n_out:
            names = list(sides[0][1]) + [s.fields[i] for s, _, _, r in sides for i in r]
            msg = f"join(): the output has {n_out} fields ({names}); out_fields names {len(out)}: {list(out)}"
            raise ConfigError(msg)
        op = Op("join", Fields(), out, fn=[(idx, rest) for _, _, idx, rest in sides])
        return self._add(Node("join", [s.node for s, _, _, _ in sides], out, op=op, grouping="fields",
                              extra=[f for _, f, _, _ in sides]))

    # -- compile ------------------------------------------------------------------------------
    def build(self) -> Topology:
        """Compile the streams into a ``Topology`` (validated; nothing runs)."""
        return _Compiler(self).compile()

    def describe(self) -> str:
        """The compiled topology, one component per line group."""
        return self.build().describe()


@dataclass(eq=False)
class _Input:
    segment: _Segment
    grouping: str                    # local, shuffle, fields, global, all
    keys: Fields = field(default_factory=Fields)
    side: int = 0


@dataclass(eq=False)
class _Segment:
    inputs: list[_Input] = field(default_factory=list)
    spout: Node | None = None
    ops: list[Op] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    committer: bool = False
    tail: Node | None = None
    fields: Fields = field(default_factory=Fields)
    hint: int | None = None
    consumers: list[tuple[_Segment, _Input]] = field(default_factory=list)
    cid: str = ""                    # the component producing this segment's output
    parallelism: int = 1

    @property
    def columnar_out(self) -> bool:
        """Whether the stage ends in record batches: a columnar function, an operation that
        keeps batches it is given, or the partial counts/sums of Count and Sum (numbers:
        always one Arrow batch)."""
        if not self.ops:
            return False
        last = self.ops[-1]
        if last.kind == "partial" and getattr(last.fn, "arrow_agg", None) is not None:
            return True
        return last.columnar and (last.kind in COLUMNAR or _columnar_before(self, len(self.ops) - 1))


def _columnar_before(seg: _Segment, i: int) -> bool:
    """Whether op ``i`` of ``seg`` gets record batches: an earlier columnar function in the
    stage, or Arrow input."""
    for op in reversed(seg.ops[:i]):
        if op.kind in COLUMNAR:
            return True
        if not op.columnar:
            return False
    return any(inp.segment.columnar_out for inp in seg.inputs)


FUSED = ("op",)


class _Compiler:
    def __init__(self, topology: TridentTopology) -> None:
        self.t = topology
        self.consumers: dict[int, int] = {}
        for n in topology.nodes:
            for p in n.parents:
                self.consumers[id(p)] = self.consumers.get(id(p), 0) + 1
        self.seg_of: dict[int, _Segment] = {}
        self.segments: list[_Segment] = []

    def _new(self, inputs: list[_Input], committer: bool = False) -> _Segment:
        s = _Segment(inputs=inputs, committer=committer)
        self.segments.append(s)
        for i in inputs:
            i.segment.consumers.append((s, i))
        return s

    def _open(self, parent: Node, committer: bool = False) -> _Segment:
        """The segment an operation on ``parent`` joins: the parent's, if the parent ends it
        and has no other consumer (fusion), else a new one reading it locally."""
        ps = self.seg_of[id(parent)]
        if ps.tail is parent and self.consumers.get(id(parent), 0) == 1 and ps.committer == committer \
                and not ps.consumers:
            return ps
        return self._new([_Input(ps, "local")], committer)

    def compile(self) -> Topology:
        if not any(n.kind == "spout" for n in self.t.nodes):
            msg = "the Trident topology has no stream: start one with new_stream(name, spout)"
            raise ConfigError(msg)
        for n in self.t.nodes:
            k = n.kind
            if k == "spout":
                seg = self._new([])
                seg.spout = n
            elif k == "op":
                p = n.parents[0]
                ps = self.seg_of[id(p)]
                seg = self._open(p, committer=ps.committer)
            elif k == "repartition":
                seg = self._new([_Input(self.seg_of[id(n.parents[0])], n.grouping, n.keys)],
                                self.seg_of[id(n.parents[0])].committer)
            elif k in ("boundary", "persist"):
                ps = self.seg_of[id(n.parents[0])]
                committer = k == "persist" or ps.committer
                seg = self._new([_Input(ps, n.grouping, n.keys)], committer)
            elif k == "query":
                seg = self._open(n.parents[0], committer=True)
            elif k == "merge":
                segs = [self.seg_of[id(p)] for p in n.parents]
                seg = self._new([_Input(s, "shuffle") for s in segs], any(s.committer for s in segs))
            elif k == "join":
                segs = [self.seg_of[id(p)] for p in n.parents]
                seg = self._new([_Input(s, "fields", jf, side=i) for i, (s, jf) in enumerate(
                    zip(segs, n.extra, strict=True))], any(s.committer for s in segs))
            else:   # pragma: no cover - every kind is above
                raise AssertionError(k)
            if n.op is not None:
                seg.ops.append(n.op)
            seg.nodes.append(n)
            if n.hint is not None:
                seg.hint = n.hint
            seg.tail = n
            seg.fields = n.fields
            self.seg_of[id(n)] = seg
        self._check_pairings()
        return self._emit()

    def _spouts_of(self, seg: _Segment, seen: set[int] | None = None) -> list[tuple[str, Any]]:
        seen = set() if seen is None else seen
        if id(seg) in seen:
            return []
        seen.add(id(seg))
        out = [(seg.spout.spout_id or "", seg.spout.spout)] if seg.spout is not None else []
        for i in seg.inputs:
            out += self._spouts_of(i.segment, seen)
        return out

    def _check_pairings(self) -> None:
        """Trident's pairing rule for every map a stream writes (``persistent_aggregate``,
        ``partition_persist``), against the spouts that feed those updates. A
        ``state_query`` only reads the map: the spouts of the querying stream do not count."""
        for seg in self.segments:
            for op in seg.ops:
                if op.state is not None and op.kind != "query":
                    check_pairing(op.state, self._spouts_of(seg))

    def _emit(self) -> Topology:
        segs = self.segments
        # parallelism: the hint, else the local parent's, else 1
        for s in segs:
            if s.hint is not None:
                s.parallelism = s.hint
            elif len(s.inputs) == 1 and s.inputs[0].grouping == "local":
                s.parallelism = s.inputs[0].segment.parallelism
            else:
                s.parallelism = 1
        # persist ops emit their new values only when something reads them
        for s in segs:
            if s.ops and s.ops[-1].kind == "persist":
                s.ops[-1].emit_values = bool(s.consumers) or any(o is not s.ops[-1] for o in s.ops)
        spouts = [s for s in segs if s.spout is not None]
        first = spouts[0]
        assert first.spout is not None and first.spout.spout_id is not None
        b = TransactionalTopologyBuilder(self.t.topology_id, first.spout.spout_id, first.spout.spout,
                                         first.parallelism)
        for s in spouts[1:]:
            assert s.spout is not None and s.spout.spout_id is not None
            b.set_spout(s.spout.spout_id, s.spout.spout, s.parallelism)
        # a stage's component id is what the user wrote: its name(), else its operations
        # ("each(Split) -> aggregate(Count)"), so errors, metrics and the page speak of them
        used = {s.spout.spout_id for s in spouts if s.spout is not None}
        for s in segs:
            if s.spout is not None and not s.ops:
                s.cid = s.spout.spout_id or ""
                continue
            label = next((n.name for n in s.nodes if n.name), None)
            base = _safe(label or " -> ".join(dict.fromkeys(op_label(op) for op in s.ops)) or "pass")
            s.cid, k = base, 2
            while s.cid in used:
                s.cid, k = f"{base} #{k}", k + 1
            used.add(s.cid)
        for s in segs:
            if not s.cid or (s.spout is not None and not s.ops):
                continue
            self._bolt(b, s)
        return b.build()

    def _bolt(self, b: TransactionalTopologyBuilder, s: _Segment) -> None:
        inputs: list[tuple[str, str, str, Fields, int, bool]] = []   # (cid, stream, grouping, keys, side, arrow)
        if s.spout is not None:
            inputs.append((s.spout.spout_id or "", "default", "local", Fields(), 0, False))
        for i in s.inputs:
            src = i.segment
            if src.columnar_out:
                inputs.append((src.cid, f"arrow-{s.cid}", "direct", i.keys, i.side, True))
            else:
                inputs.append((src.cid, "default", i.grouping, i.keys, i.side, False))
        arrow_outs = [ArrowOut(f"arrow-{c.cid}", i.grouping, tuple(i.keys), c.parallelism)
                      for c, i in s.consumers if s.columnar_out]
        rows_out = any(not s.columnar_out for _ in s.consumers)
        bolt_cls = TridentCommitterBolt if s.committer else TridentBolt
        desc = " -> ".join(dict.fromkeys(op_label(op) for op in s.ops)) or "pass"   # partial, final: once
        bolt = bolt_cls(list(s.ops), s.fields, rows_out, arrow_outs,
                        {(c, st): side for c, st, _, _, side, _ in inputs},
                        {(c, st) for c, st, _, _, _, arrow in inputs if arrow}, desc,
                        named=any(n.name for n in s.nodes))
        d = (b.set_committer_bolt if s.committer else b.set_bolt)(s.cid, bolt, s.parallelism)
        for cid, stream, grouping, keys, _, _ in inputs:
            if grouping == "direct":
                d.direct_grouping(cid, stream)
            elif grouping == "local":
                d.local_or_shuffle_grouping(cid, stream)
            elif grouping == "fields":
                d.fields_grouping(cid, keys, stream)
            elif grouping == "global":
                d.global_grouping(cid, stream)
            elif grouping == "all":
                d.all_grouping(cid, stream)
            else:
                d.shuffle_grouping(cid, stream)


def _safe(name: str) -> str:
    """A component id from a stage's name: no '/' or ':' (the builder's rule)."""
    return re.sub(r"[/:]+", "_", name).strip() or "x"
