"""Building a transactional topology; the result is plain, immutable, picklable data.

``TransactionalTopologyBuilder(...).build()`` validates everything it can before Spark
starts (unknown components, streams and fields, groupings that do not fit the stream,
cycles, bolts that cannot be shipped to executors) and returns a ``Topology``. The runner
is its one interpreter; ``trident describe`` only reads it.

How components are pickled (for executors by value, for the driver by identity) is
``transactional.pickling``'s docstring.
"""

from __future__ import annotations

import dataclasses
import pickle
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transactional.bolt import BaseBasicBolt, BaseBatchBolt, Committer
from transactional.exceptions import TopologyError
from transactional.pickling import _DRIVER_OBJECTS, _executor_pickle, _pickle
from transactional.tuples import Fields

GROUPINGS = ("shuffle", "local_or_shuffle", "fields", "global", "all", "none", "direct")


@dataclass(frozen=True)
class Subscription:
    """``consumer`` reads ``source``'s ``stream`` with ``grouping`` (on ``fields``)."""

    source: str
    stream: str
    grouping: str
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class StreamSpec:
    """A declared output stream: its fields, and whether it is direct (``emit_direct``)."""
    fields: Fields
    direct: bool = False


@dataclass(frozen=True)
class ComponentSpec:
    """One spout or bolt: its id, parallelism, inputs, declared streams and its pickled
    instance (``new_instance()`` gives a fresh one, as Storm deserializes a fresh bolt
    per batch): ``blob`` for executors (user classes by value), ``driver_blob`` for the
    process that built it (user classes by identity; usable where ``origin``, the build's
    id, is known; see the module docstring)."""

    id: str
    kind: str                       # "spout" or "bolt"
    parallelism: int
    committer: bool
    basic: bool
    inputs: tuple[Subscription, ...]
    streams: Mapping[str, StreamSpec]
    blob: bytes = field(repr=False)
    class_name: str = ""
    driver_blob: bytes = field(default=b"", repr=False)
    origin: str = field(default="", repr=False)
    accepts_columns: bool = False   # the bolt takes ``ColumnBatch`` values (transactional.columns)
    core: str = ""                  # core topologies: how the bolt runs ("rich", "basic", "stateful")
    writes: tuple[str, ...] = ()    # the states the component writes (Trident stages' maps), for the page
    conf: Mapping[str, Any] = field(default_factory=dict)   # its own settings (``add_configuration``)
    #: what the component says about its state and source, for the recorded layout
    #: (``transactional.engine.layout``): a stage's states, a spout's kind and source
    layout: Mapping[str, Any] = field(default_factory=dict)
    #: the bolt merges the outputs of several of its tasks (``combine_outputs``:
    #: ``transactional.engine.combine``), e.g. Trident's partial aggregates
    combines: bool = False

    def new_instance(self) -> Any:
        """A fresh instance of the component, as the user wrote it (the engine's plan picks
        the adapter a bolt runs through: ``transactional.engine.plan.new_bolt``).

        In the process that built the topology (or one forked from it after the build)
        this loads ``driver_blob``: a copy of the instance's state whose classes,
        functions and modules are the user's own objects, so the commit phase and the
        spout's coordinator share module globals with the user's code (Storm's
        ``LocalCluster``). In any other process (Spark's Python workers) it loads
        ``blob``, where the user's classes come by value. The by-value form is never
        loaded in the building process (cloudpickle would rewrite the user's classes in
        place there)."""
        table = _DRIVER_OBJECTS.get(self.origin) if self.driver_blob else None
        if table is None and not self.blob:
            msg = (f"component {self.id!r} ({self.class_name}) runs only in the driver process that built "
                   "the topology; it was not pickled for executors. Build the topology in the process "
                   "that runs it, or place its phase on the executors (Topology.placed('executors'))")
            raise TopologyError(msg)
        return pickle.loads(self.driver_blob if table is not None else self.blob)


@dataclass(frozen=True)
class Topology:
    """A validated transactional topology. Immutable; build it with
    ``TransactionalTopologyBuilder``.

    ``components`` lists the spouts first (in the order they were added), then bolts in
    a topological order; ``commit_components`` are the committers and every bolt
    downstream of one (they run in the commit phase). ``spout_id`` is the first spout's.
    """

    topology_id: str
    spout_id: str
    components: tuple[ComponentSpec, ...]
    commit_components: frozenset[str]
    kind: str = "transactional"     # or "core": a Storm topology of core spouts (transactional.core)
    api: str = ""                   # "trident" when compiled from a TridentTopology (what `trident list` shows)
    #: the State API factories the topology writes or queries (Trident's partition_persist,
    #: state_query): each one's ``check(conf)`` runs when the driver starts, before any batch
    user_states: tuple[Any, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a broadcast to executors) without ``user_states``: only the driver checks
        them, and a factory's class may live where an executor cannot import it (a script, a
        test module; the components carry their own copies by value)."""
        return {**self.__dict__, "user_states": ()}

    @property
    def shown_kind(self) -> str:
        """What ``trident list`` and the status page call it: ``trident``, ``transactional`` or ``core``."""
        return self.api or self.kind

    @property
    def core(self) -> bool:
        """True for a core Storm topology (at least once: tuple trees and the acker)."""
        return self.kind == "core"

    def task_ids(self, component_id: str) -> range:
        """The global ids of a component's tasks (Storm's ``getComponentTasks``): the
        components' tasks numbered in ``components`` order, from 0."""
        base = 0
        for c in self.components:
            if c.id == component_id:
                return range(base, base + c.parallelism)
            base += c.parallelism
        raise KeyError(component_id)

    def component(self, component_id: str) -> ComponentSpec:
        """The component with id ``component_id``; ``KeyError`` if there is none."""
        for c in self.components:
            if c.id == component_id:
                return c
        raise KeyError(component_id)

    @property
    def spout(self) -> ComponentSpec:
        """The first spout's component (always first)."""
        return self.components[0]

    @property
    def spouts(self) -> tuple[ComponentSpec, ...]:
        """Every spout's component: each batch (txid) holds a part of each spout's stream."""
        return tuple(c for c in self.components if c.kind == "spout")

    @property
    def bolts(self) -> tuple[ComponentSpec, ...]:
        """The bolts' components, in topological order."""
        return tuple(c for c in self.components if c.kind == "bolt")

    def is_local(self, component: ComponentSpec) -> bool:
        """True when ``component`` runs in the same Spark tasks as its one source
        (``local_or_shuffle`` grouping, equal parallelism, both in the processing phase)."""
        if len(component.inputs) != 1 or component.inputs[0].grouping != "local_or_shuffle":
            return False
        src = self.component(component.inputs[0].source)
        return (src.parallelism == component.parallelism and component.id not in self.commit_components)

    def consumers(self, source: str) -> list[tuple[ComponentSpec, Subscription]]:
        """Who reads ``source``, with the subscription."""
        return [(c, s) for c in self.components for s in c.inputs if s.source == source]

    def placed(self, commit_placement: str) -> Topology:
        """This topology as a run with ``commit_placement`` runs it: with ``"executors"``
        the commit components (which run on the driver otherwise) are pickled for executors
        now, from their driver form; ``TopologyError`` names a component, or a module global
        it reaches, that cannot be. With ``"driver"``, the topology itself."""
        if commit_placement != "executors":
            return self
        comps = tuple(
            dataclasses.replace(c, blob=_executor_blob_later(c)) if c.id in self.commit_components and not c.blob
            else c for c in self.components)
        return dataclasses.replace(self, components=comps)

    def with_tasks(self, tasks: Mapping[str, int]) -> Topology:
        """This topology with the task counts of ``tasks`` (component id -> count) for the
        components it names: how a txid written with an earlier layout is replayed with it,
        and how a rebalance runs (``transactional.engine.layout``)."""
        comps = tuple(dataclasses.replace(c, parallelism=int(tasks[c.id])) if c.id in tasks else c
                      for c in self.components)
        return dataclasses.replace(self, components=comps)

    def describe(self) -> str:
        """A human-readable listing: components, parallelism, groupings, phases."""
        lines = [f"topology {self.topology_id!r}" + (" (core: at least once)" if self.core else "")]
        for c in self.components:
            phase = "spout" if c.kind == "spout" else (
                "commit" if c.id in self.commit_components else "processing")
            tag = (" stateful" if self.core else " committer") if c.committer else ""
            lines.append(f"  {c.id} ({c.class_name}) x{c.parallelism} [{phase}{tag}]")
            for sname, s in c.streams.items():
                lines.append(f"      emits {sname}{' (direct)' if s.direct else ''}: {tuple(s.fields)}")
            for sub in c.inputs:
                on = f" on {sub.fields}" if sub.fields else ""
                lines.append(f"      <- {sub.source}/{sub.stream} {sub.grouping}{on}")
        return "\n".join(lines)


class _Declarer:
    """Collects ``declare_output_fields`` calls."""

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self.streams: dict[str, StreamSpec] = {}

    def declare(self, fields: Fields, stream: str = "default", direct: bool = False) -> None:
        if not isinstance(fields, Fields):
            fields = Fields(fields)
        if stream in self.streams:
            msg = f"component {self.component_id!r} declared stream {stream!r} twice"
            raise TopologyError(msg)
        self.streams[stream] = StreamSpec(fields, direct)

    def declare_stream(self, stream: str, fields: Fields, direct: bool = False) -> None:
        self.declare(fields, stream, direct)


class InputDeclarer:
    """Returned by ``set_bolt``: subscribe the bolt to sources, one call per grouping.
    Each method returns the declarer, so calls chain."""

    def __init__(self, builder: TransactionalTopologyBuilder, bolt_id: str) -> None:
        self._builder = builder
        self._id = bolt_id

    def _add(self, source: str, stream: str, grouping: str, fields: tuple[str, ...] = ()) -> InputDeclarer:
        self._builder._inputs[self._id].append(Subscription(source, stream, grouping, fields))
        return self

    def shuffle_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """Tuples spread evenly over the bolt's tasks."""
        return self._add(source, stream, "shuffle")

    def local_or_shuffle_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """Storm's localOrShuffleGrouping: when this bolt reads only ``source`` and has
        the same parallelism, task i reads what task i of ``source`` emitted, in the same
        Spark task (no shuffle); otherwise as shuffle."""
        return self._add(source, stream, "local_or_shuffle")

    def fields_grouping(self, source: str, fields: Fields | tuple[str, ...] | str,
                        stream: str = "default") -> InputDeclarer:
        """Tuples with equal values of ``fields`` go to the same task (a hash that is
        stable across processes and runs)."""
        if isinstance(fields, str):
            fields = (fields,)
        return self._add(source, stream, "fields", tuple(fields))

    def add_configuration(self, key: str, value: Any) -> InputDeclarer:
        """A setting of this bolt alone (Storm's ``addConfiguration``), e.g.
        ``"topology.tick.tuple.freq.secs"``; it wins over the topology's."""
        if not isinstance(key, str) or not key:
            msg = f"bolt {self._id!r}: add_configuration takes a setting name; got {key!r}"
            raise TopologyError(msg)
        confs = self._builder.__dict__.setdefault("_confs", {})
        confs.setdefault(self._id, {})[key] = value
        return self

    def global_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """Every tuple to task 0."""
        return self._add(source, stream, "global")

    def all_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """Every tuple to every task."""
        return self._add(source, stream, "all")

    def none_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """No preference (as shuffle)."""
        return self._add(source, stream, "none")

    def direct_grouping(self, source: str, stream: str = "default") -> InputDeclarer:
        """The emitter picks the task (``emit_direct``); ``stream`` must be declared direct."""
        return self._add(source, stream, "direct")


class TransactionalTopologyBuilder:
    """Storm's ``TransactionalTopologyBuilder``.

    >>> from spouts import MemoryTransactionalSpout
    >>> from transactional import Fields
    >>> from transactional.bolt import BaseBatchBolt
    >>> spout = MemoryTransactionalSpout({0: [("a",), ("b",)]}, Fields("word"), 1)
    >>> b = TransactionalTopologyBuilder("doc", "spout", spout, 1)
    >>> _ = b.set_bolt("count", BaseBatchBolt(), 2).shuffle_grouping("spout")
    >>> b.build().describe().splitlines()[0]
    "topology 'doc'"

    More spouts join with ``set_spout``: every txid then carries a batch of each (a
    spout with nothing new sits that txid out), committed together, exactly once.
    """

    def __init__(self, topology_id: str, spout_id: str, spout: Any, spout_parallelism: int = 1) -> None:
        _check_id("topology_id", topology_id)
        self.topology_id = topology_id
        self.spout_id = spout_id
        self.spout = spout
        self.spout_parallelism = spout_parallelism
        self._spouts: dict[str, tuple[Any, int]] = {}
        self._bolts: dict[str, tuple[Any, int, bool]] = {}
        self._inputs: dict[str, list[Subscription]] = {}
        self.set_spout(spout_id, spout, spout_parallelism)

    def set_spout(self, spout_id: str, spout: Any, parallelism: int = 1) -> None:
        """Add a spout with ``parallelism`` emitter tasks. Spouts of any kind mix: on a
        replay each re-emits as its kind does (transactional: the same batch; opaque:
        planned again). Bolts read it as any component (``shuffle_grouping(spout_id)``)."""
        _check_id("spout id", spout_id)
        if spout_id in self._spouts or spout_id in self._bolts:
            msg = f"component id {spout_id!r} is used twice; ids must be unique"
            raise TopologyError(msg)
        if not hasattr(spout, "declare_output_fields"):
            msg = (
                f"spout {spout_id!r} ({type(spout).__name__}) is not a "
                "transactional spout; subclass one of spouts.TransactionalSpout, "
                "PartitionedTransactionalSpout, OpaquePartitionedTransactionalSpout"
            )
            raise TopologyError(msg)
        self._spouts[spout_id] = (spout, _check_parallelism(spout_id, parallelism))

    def set_bolt(self, bolt_id: str, bolt: Any, parallelism: int = 1) -> InputDeclarer:
        """Add a bolt with ``parallelism`` tasks; a ``Committer`` bolt commits."""
        return self._set(bolt_id, bolt, parallelism, isinstance(bolt, Committer))

    def set_committer_bolt(self, bolt_id: str, bolt: Any, parallelism: int = 1) -> InputDeclarer:
        """Add a batch bolt whose ``finish_batch`` runs in the commit phase."""
        return self._set(bolt_id, bolt, parallelism, True)

    def _set(self, bolt_id: str, bolt: Any, parallelism: int, committer: bool) -> InputDeclarer:
        _check_id("bolt id", bolt_id)
        if bolt_id in self._spouts or bolt_id in self._bolts:
            msg = f"component id {bolt_id!r} is used twice; ids must be unique"
            raise TopologyError(msg)
        if not isinstance(bolt, (BaseBatchBolt, BaseBasicBolt)):
            msg = (
                f"bolt {bolt_id!r} is a {type(bolt).__name__}; subclass BaseBatchBolt, "
                "BaseTransactionalBolt or BaseBasicBolt"
            )
            raise TopologyError(msg)
        if committer and isinstance(bolt, BaseBasicBolt):
            msg = (
                f"bolt {bolt_id!r} is a BaseBasicBolt and cannot be a committer; "
                "committers are batch bolts (BaseTransactionalBolt)"
            )
            raise TopologyError(msg)
        self._bolts[bolt_id] = (bolt, _check_parallelism(bolt_id, parallelism), committer)
        self._inputs[bolt_id] = []
        return InputDeclarer(self, bolt_id)

    def build(self) -> Topology:
        """Validate and freeze. Raises ``TopologyError`` naming the problem and the fix."""
        bolts = {bid: (bolt, par, committer, "") for bid, (bolt, par, committer) in self._bolts.items()}
        return freeze(self.topology_id, self._spouts, bolts, self._inputs, "transactional",
                      getattr(self, "_confs", None))


def as_topology(topology: Any, caller: str) -> Topology:
    """``topology`` as a ``Topology``: a builder (a ``TransactionalTopologyBuilder``, a
    ``trident.TridentTopology``) is built; ``TypeError`` naming ``caller`` for anything else."""
    if not isinstance(topology, Topology) and hasattr(topology, "build"):
        topology = topology.build()
    if not isinstance(topology, Topology):
        msg = (f"{caller} takes a Topology, a TransactionalTopologyBuilder or a trident.TridentTopology; "
               f"got {type(topology).__name__}")
        raise TypeError(msg)
    return topology


def freeze(topology_id: str, spouts: dict[str, tuple[Any, int]], bolts: dict[str, tuple[Any, int, bool, str]],
           inputs: dict[str, list[Subscription]], kind: str, confs: dict[str, dict[str, Any]] | None = None) -> Topology:
    """The ``Topology`` of validated parts (both builders end here): every component's
    streams declared, every subscription checked, bolts in topological order, the commit
    components (``bolts[id][2]``: committers, or stateful bolts, and everything downstream
    of one), each component pickled for executors and for the driver. ``bolts[id][3]`` is
    how a core bolt runs ("" for transactional bolts)."""
    streams: dict[str, dict[str, StreamSpec]] = {}
    for cid, obj in [*((sid, sp) for sid, (sp, _) in spouts.items()),
                     *((bid, b[0]) for bid, b in bolts.items())]:
        d = _Declarer(cid)
        obj.declare_output_fields(d)
        framework = getattr(obj, "declare_framework_streams", None)   # a windowed bolt's late-tuple stream
        if framework is not None:
            framework(d)
        streams[cid] = d.streams
    first = next(iter(spouts))
    for bid, subs in inputs.items():
        if not subs:
            msg = f"bolt {bid!r} has no input; subscribe it with e.g. .shuffle_grouping({first!r})"
            raise TopologyError(msg)
        for s in subs:
            _check_subscription(bid, s, streams)

    order = _topological_order(set(spouts), inputs)
    commit: set[str] = set()
    for bid in order:
        if bolts[bid][2] or any(s.source in commit for s in inputs[bid]):
            commit.add(bid)

    origin = uuid.uuid4().hex
    table: list[Any] = []     # this build's objects, for the driver forms
    comps = []
    for sid, (spout, par) in spouts.items():
        # a transactional spout's emitters run on executors; a core topology's spouts on the driver
        blob, driver_blob = _pickle(sid, spout, origin, table, executors=kind != "core")
        comps.append(ComponentSpec(sid, "spout", par, False, False, (), dict(streams[sid]), blob,
                                   type(spout).__name__, driver_blob, origin, layout=spout_layout(spout)))
    for bid in order:
        bolt, par, committer, core = bolts[bid]
        # commit components run on the driver unless a run places them on executors (``placed``)
        blob, driver_blob = _pickle(bid, bolt, origin, table, executors=bid not in commit)
        comps.append(ComponentSpec(bid, "bolt", par, committer, isinstance(bolt, BaseBasicBolt),
                                   tuple(inputs[bid]), dict(streams[bid]), blob,
                                   getattr(bolt, "describe_as", type(bolt).__name__), driver_blob, origin,
                                   bool(getattr(bolt, "accepts_columns", False)), core,
                                   tuple(getattr(bolt, "writes_states", ())), dict((confs or {}).get(bid, {})),
                                   dict(getattr(bolt, "layout_info", None) or {}),
                                   combines=bool(getattr(bolt, "combines_outputs", False))))
    _DRIVER_OBJECTS[origin] = table
    return Topology(topology_id, first, tuple(comps), frozenset(commit), kind)


def spout_layout(spout: Any) -> dict[str, Any]:
    """A spout's identity in the recorded layout: its class, whether it is opaque, the
    source it reads (a topic, a stream key), and the ``uid`` a user gives to keep its
    identity across a rename."""
    source = next((str(getattr(spout, a)) for a in ("topic", "stream", "key") if isinstance(getattr(spout, a, None), str)),
                  None)
    return {"class": type(spout).__name__, "opaque": bool(getattr(spout, "opaque", False)), "source": source,
            "uid": getattr(spout, "uid", None)}


def _check_id(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value or "/" in value or ":" in value:
        msg = f"{what} must be a non-empty string without '/' or ':'; got {value!r}"
        raise TopologyError(msg)


def _check_parallelism(cid: str, n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        msg = f"parallelism of {cid!r} must be an int >= 1; got {n!r}"
        raise TopologyError(msg)
    return n


def _check_subscription(bid: str, s: Subscription, streams: dict[str, dict[str, StreamSpec]]) -> None:
    if s.source not in streams:
        msg = (
            f"bolt {bid!r} subscribes to unknown component {s.source!r}; "
            f"known components: {sorted(streams)}"
        )
        raise TopologyError(msg)
    if s.source == bid:
        msg = f"bolt {bid!r} subscribes to itself; topologies are acyclic"
        raise TopologyError(msg)
    declared = streams[s.source]
    if s.stream not in declared:
        msg = (
            f"bolt {bid!r} subscribes to stream {s.stream!r} of {s.source!r}, which "
            f"declares {sorted(declared) or 'no streams'}; declare it in "
            f"{s.source}.declare_output_fields or subscribe to a declared stream"
        )
        raise TopologyError(msg)
    spec = declared[s.stream]
    if s.grouping == "fields":
        if not s.fields:
            msg = f"fields grouping of {bid!r} on {s.source!r} names no field"
            raise TopologyError(msg)
        missing = [f for f in s.fields if f not in spec.fields]
        if missing:
            msg = (
                f"bolt {bid!r} groups {s.source!r}/{s.stream} by unknown field(s) "
                f"{missing}; that stream declares {tuple(spec.fields)}"
            )
            raise TopologyError(msg)
    if spec.direct and s.grouping != "direct":
        msg = (
            f"stream {s.stream!r} of {s.source!r} is direct; bolt {bid!r} must "
            "subscribe with direct_grouping"
        )
        raise TopologyError(msg)
    if s.grouping == "direct" and not spec.direct:
        msg = (
            f"bolt {bid!r} uses direct_grouping on {s.source!r}/{s.stream}, which "
            "is not declared direct; declare it with direct=True"
        )
        raise TopologyError(msg)


def _topological_order(spouts: set[str], inputs: dict[str, list[Subscription]]) -> list[str]:
    """Bolts in an order where every source comes first; raises on a cycle."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(n: str, path: list[str]) -> None:
        if state.get(n) == 2 or n in spouts:
            return
        if state.get(n) == 1:
            cycle = path[path.index(n):] + [n]
            msg = (
                f"the topology has a cycle: {' -> '.join(cycle)}; transactional "
                "topologies must be acyclic"
            )
            raise TopologyError(msg)
        state[n] = 1
        for s in inputs[n]:
            visit(s.source, path + [n])
        state[n] = 2
        order.append(n)

    for n in inputs:
        visit(n, [])
    return order


def _executor_blob_later(c: ComponentSpec) -> bytes:
    """The executor blob of commit component ``c``, made from its driver form (in the
    process that built the topology)."""
    if _DRIVER_OBJECTS.get(c.origin) is None:
        msg = (f"component {c.id!r} ({c.class_name}) cannot be placed on executors here: it was built "
               "in another process, for the driver. Build the topology in the process that runs it")
        raise TopologyError(msg)
    return _executor_pickle(c.id, pickle.loads(c.driver_blob), committer=True)
