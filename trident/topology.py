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

The streams' methods are in ``trident.stream``, the compilation in ``trident.compiler``,
what the stages run in ``trident.runtime``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transactional.exceptions import ConfigError
from transactional.topology import Topology, _Declarer
from transactional.tuples import Fields
from trident.compiler import _Compiler
from trident.runtime.op import Op
from trident.state import MapStateFactory, TridentState
from trident.stream import Node, Stream, _fields

#: the nodes that may have a late stream: windows, interval joins, window joins
JOINS_IN_TIME = ("window", "ijoin", "wjoin")


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

    def late_stream(self, name: str) -> Stream:
        """The late tuples of the window that set ``late_stream=name``: each whole tuple of
        the window's input stream (its fields), in the txid it arrived in."""
        for n in self.nodes:
            if n.kind in JOINS_IN_TIME and n.op is not None and n.op.fn.late_stream == name:
                fields = n.op.fields if n.kind == "window" else Fields("side", "values")
                return self._add(Node("late", [n], fields, extra=f"late-{name}"))
        named = sorted(n.op.fn.late_stream for n in self.nodes
                       if n.kind in JOINS_IN_TIME and n.op is not None and n.op.fn.late_stream)
        msg = f"no window has late_stream={name!r} (those that have: {named}); pass late_stream={name!r} to it"
        raise ConfigError(msg)

    def interval_join(self, a: Stream, a_key: Any, a_ts: str, b: Stream, b_key: Any, b_ts: str, lower: Any,
                      upper: Any, store: Any, out_fields: Any, *, lag: Any = None,
                      late_stream: str | None = None) -> Stream:
        """Join ``a`` and ``b`` where the keys are equal and ``b.ts - lower <= a.ts <= b.ts +
        upper`` (event time, ms), exactly once, keeping rows only as long as the bounds
        need (``trident.runtime.interval_join``). Output: ``a``'s fields then ``b``'s, named
        ``out_fields``; ``store``: a ``WindowsStoreFactory``; late rows of either side on
        ``late_stream(name)`` as ``("a" or "b", values)``."""
        from trident.runtime.interval_join import IntervalJoinSpec
        from trident.windowing import WindowsStoreFactory, _ms

        keys = tuple(s._in(k, "interval_join")[1] for s, k in ((a, a_key), (b, b_key)))
        if len(keys[0]) != len(keys[1]):
            msg = f"interval_join: a's key {a_key!r} and b's key {b_key!r} must have as many fields"
            raise ConfigError(msg)
        ts = tuple(s._in(Fields(f), "interval_join")[1][0] for s, f in ((a, a_ts), (b, b_ts)))
        lo, hi, lag_ms = _ms(lower, "interval_join: lower"), _ms(upper, "interval_join: upper"), \
            0 if lag is None else _ms(lag, "interval_join: lag")
        if lo < 0 or hi < 0 or lag_ms < 0:
            msg = f"interval_join: lower, upper and lag are >= 0 ms; got {lower!r}, {upper!r}, {lag!r}"
            raise ConfigError(msg)
        if not isinstance(store, WindowsStoreFactory):
            msg = f"interval_join takes a WindowsStoreFactory (e.g. WindowsStoreFactory('joins')); got {store!r}"
            raise ConfigError(msg)
        out = _fields(out_fields, "interval_join: output fields")
        if len(out) != len(a.fields) + len(b.fields):
            msg = (f"interval_join: out_fields name a's fields then b's ({len(a.fields) + len(b.fields)} in all: "
                   f"{list(a.fields)} + {list(b.fields)}); got {list(out)}")
            raise ConfigError(msg)
        spec = IntervalJoinSpec((keys[0], keys[1]), (ts[0], ts[1]), lo, hi, lag_ms, store.name, late_stream)
        op = Op("ijoin", out, out, fn=spec)
        return self._add(Node("ijoin", [a.node, b.node], out, op=op, grouping="global"))

    def window_join(self, a: Stream, b: Stream, window_config: Any, a_fields: Any, b_fields: Any, out_fields: Any,
                    store: Any, *, join_type: str = "inner", timestamp_fields: Any = None, lag: Any = None,
                    late_stream: str | None = None) -> Stream:
        """Join ``a`` and ``b`` where the keys (``a_fields``, ``b_fields``) are equal and both
        tuples are in the same window of ``window_config`` (tumbling or sliding, count or
        ``Duration``), exactly once (``trident.runtime.window_join``). ``join_type``:
        ``"inner"`` or ``"left"`` (an ``a`` tuple without a match in its window, with None
        for ``b``'s fields). Output: the key, then ``a``'s other fields, then ``b``'s, named
        ``out_fields`` (two more names: each window's start and end). Event time with
        ``timestamp_fields`` (one name, or ``(a's, b's)``) and ``lag``; else the txid's
        time. ``store``: a ``WindowsStoreFactory``; late rows of either side on
        ``late_stream(name)`` as ``("a" or "b", values)``."""
        from trident.runtime.window_join import window_join_spec

        out = _fields(out_fields, "window_join: output fields")
        spec = window_join_spec(a, b, window_config, a_fields, b_fields, out, store, join_type, timestamp_fields,
                                lag, late_stream)
        op = Op("wjoin", out, out, fn=spec)
        return self._add(Node("wjoin", [a.node, b.node], out, op=op, grouping="global"))

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
        ``trident.state.StateFactory``, or a map factory of ``trident.state``."""
        from trident.stream import _check_factory

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
        types = getattr(fields, "types", {})     # the spout's declared column types, kept
        out = Fields(*fields[1:], types={k: t for k, t in types.items() if k in fields[1:]})
        return self._add(Node("spout", [], out, spout=spout, spout_id=txid_name))

    def new_drpc_stream(self, function: str, drpc: Any = None) -> Stream:
        """A stream of the DRPC calls of ``function`` (Storm's ``newDRPCStream``): one tuple
        per request, with the field ``args``; each request is its own batch, and the tuples
        at the end of the stream are the answer, a JSON list of lists (``trident.drpc``).
        ``drpc``: a ``transactional.drpc.LocalDRPC``, or None for the ``trident drpc``
        servers of ``TopologyConfig.drpc_servers``."""
        from trident.drpc import drpc_spout, spout_id

        return self.new_stream(spout_id(function), drpc_spout(function, drpc))

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

    def join(self, *args: Any, join_type: str | Sequence[str] = "inner") -> Stream:
        """Join streams within each batch on their join fields: ``join(s1, Fields("k"), s2,
        Fields("k2"), Fields("k", "a", "b"))``. Output: the join fields, then the other fields
        of each stream in order, named by the last argument. ``join_type``: ``"inner"`` (a
        key every stream has), ``"outer"`` (a key any stream has; the fields of a stream
        without it are None), or one per stream (Storm's mixed ``JoinType`` list: a key
        must be in every ``"inner"`` stream)."""
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
        types = [join_type] * len(sides) if isinstance(join_type, str) else list(join_type)
        if len(types) != len(sides) or any(jt not in ("inner", "outer") for jt in types):
            msg = (f"join(): join_type is \"inner\", \"outer\" or one of those per stream ({len(sides)} "
                   f"streams); got {join_type!r}")
            raise ConfigError(msg)
        op = Op("join", Fields(), out, fn=[(idx, rest, jt == "outer")
                                           for (_, _, idx, rest), jt in zip(sides, types, strict=True)])
        return self._add(Node("join", [s.node for s, _, _, _ in sides], out, op=op, grouping="fields",
                              extra=[f for _, f, _, _ in sides]))

    def multi_reduce(self, in_fields: Sequence[Any], streams: Sequence[Any], reducer: Any, out_fields: Any) -> Stream:
        """Storm's ``multiReduce``: the tuples of every stream of ``streams`` (their
        ``in_fields[i]``) to one reducer per batch, in one place. Streams: a
        ``MultiReducer``, output ``out_fields``. Grouped streams (``group_by``, as many
        group fields each): a ``GroupedMultiReducer`` per group, output the first stream's
        group fields then ``out_fields``."""
        from trident.operation import GroupedMultiReducer, MultiReducer
        from trident.stream import GroupedStream

        if len(in_fields) != len(streams) or not streams:
            msg = f"multi_reduce(): one input Fields per stream; got {len(in_fields)} for {len(streams)} streams"
            raise ConfigError(msg)
        grouped = all(isinstance(s, GroupedStream) for s in streams)
        if not grouped and not all(isinstance(s, Stream) for s in streams):
            msg = "multi_reduce(): the streams are all Streams or all GroupedStreams (group_by)"
            raise ConfigError(msg)
        want = GroupedMultiReducer if grouped else MultiReducer
        if not isinstance(reducer, want):
            msg = f"multi_reduce() over {'grouped ' if grouped else ''}streams takes a trident.{want.__name__}; got {reducer!r}"
            raise ConfigError(msg)
        plain = [s.stream if grouped else s for s in streams]
        groups = [s.group_fields if grouped else Fields() for s in streams]
        if len({len(g) for g in groups}) != 1:
            msg = f"multi_reduce(): every stream is grouped by as many fields; got {[list(g) for g in groups]}"
            raise ConfigError(msg)
        specs = []
        for s, g, f in zip(plain, groups, in_fields, strict=True):
            fs, idx = s._in(f, "multi_reduce")
            specs.append((tuple(s.fields.index(x) for x in g), idx, fs))
        out = Fields(*groups[0], *_fields(out_fields, "multi_reduce: output fields"))
        op = Op("multi_reduce", Fields(), out, fn=reducer, spec=(specs, groups[0]))
        return self._add(Node("join", [s.node for s in plain], out, op=op, grouping="fields", extra=groups))

    # -- compile ------------------------------------------------------------------------------
    def build(self) -> Topology:
        """Compile the streams into a ``Topology`` (validated; nothing runs)."""
        return _Compiler(self).compile()

    def describe(self) -> str:
        """The compiled topology, one component per line group."""
        return self.build().describe()
