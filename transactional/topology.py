"""Building a transactional topology; the result is plain, immutable, picklable data.

``TransactionalTopologyBuilder(...).build()`` validates everything it can before Spark
starts (unknown components, streams and fields, groupings that do not fit the stream,
cycles, bolts that cannot be shipped to executors) and returns a ``Topology``. The runner
is its one interpreter; ``trident describe`` only reads it.

Where user classes come from. Each component is pickled for the driver at build, and
for executors when it runs there:

* ``ComponentSpec.blob``, for executors (Spark's Python workers, other processes): with
  cloudpickle, classes and functions of scripts, test modules and topology files (which a
  worker cannot import) *by value*, with the module globals their code reads. Their
  modules are registered with ``cloudpickle.register_pickle_by_value`` only while this
  blob is made. Only components that run on executors get one: at build, the spouts'
  emitters (not a core topology's spouts, which run on the driver) and the
  processing-phase bolts; the commit components only when a run places them on the
  executors (``Topology.placed("executors")``, at the run's start). So a committer on the
  driver may use module globals that cannot be pickled (Storm's ``DATABASE`` map holding
  locks); a component on executors that reaches one is a ``TopologyError`` naming the
  global, its module and the fix.
* ``ComponentSpec.driver_blob``, for the process that built the topology (the driver: the
  commit phase, the spout's coordinator, the in-process executor): the instance's state by
  value, but every class, function and module *by identity* -- the very objects the
  builder was given, kept in a table of this process. So committers and coordinators run
  the user's own classes: module globals are shared, as in Storm's ``LocalCluster`` (the
  seed's static ``DATABASE`` map works), and later edits of those globals are seen.

``ComponentSpec.new_instance()`` uses the driver form in the process that built the
topology (and in processes forked from it afterwards, which hold the same table), the
executor form everywhere else. The by-value form is never loaded in the building
process: loading a by-value class where it was defined makes cloudpickle overwrite the
user's class in place with methods whose globals are a frozen copy of the module's.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import sys
import threading
import types
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark import cloudpickle

from transactional.bolt import BaseBasicBolt, BaseBatchBolt, BasicBoltAdapter, Committer
from transactional.exceptions import TopologyError
from transactional.tuples import Fields

GROUPINGS = ("shuffle", "local_or_shuffle", "fields", "global", "all", "none", "direct")
_OWN_PACKAGES = ("transactional", "spouts", "state")


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

    def new_instance(self) -> Any:
        """A fresh instance of the component.

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
        obj = pickle.loads(self.driver_blob if table is not None else self.blob)
        if self.core and self.kind == "bolt":
            return obj      # the engine runs it through its batch-path adapter (``_task.new_bolt``)
        return BasicBoltAdapter(obj) if self.basic else obj


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


def freeze(topology_id: str, spouts: dict[str, tuple[Any, int]], bolts: dict[str, tuple[Any, int, bool, str]],
           inputs: dict[str, list[Subscription]], kind: str, confs: dict[str, dict] | None = None) -> Topology:
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
                                   type(spout).__name__, driver_blob, origin))
    for bid in order:
        bolt, par, committer, core = bolts[bid]
        # commit components run on the driver unless a run places them on executors (``placed``)
        blob, driver_blob = _pickle(bid, bolt, origin, table, executors=bid not in commit)
        comps.append(ComponentSpec(bid, "bolt", par, committer, isinstance(bolt, BaseBasicBolt),
                                   tuple(inputs[bid]), dict(streams[bid]), blob,
                                   getattr(bolt, "describe_as", type(bolt).__name__), driver_blob, origin,
                                   bool(getattr(bolt, "accepts_columns", False)), core,
                                   tuple(getattr(bolt, "writes_states", ())), dict((confs or {}).get(bid, {}))))
    _DRIVER_OBJECTS[origin] = table
    return Topology(topology_id, first, tuple(comps), frozenset(commit), kind)


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


# -- pickling components -----------------------------------------------------------------------

#: build id -> the classes, functions and modules its driver blobs refer to (kept for the
#: life of the process: a few objects per build). A process that does not hold a build's
#: table (any process but the builder and its later forks) loads the executor blobs.
_DRIVER_OBJECTS: dict[str, list] = {}
#: modules whose classes and functions always go to executors by value (``ship_by_value``)
_SHIPPED_BY_VALUE: set[str] = set()
#: cloudpickle's by-value registry is process-wide: one executor blob at a time
_REGISTRATION = threading.Lock()


def ship_by_value(module: types.ModuleType) -> None:
    """Ship ``module``'s classes and functions to executors by value, wherever in a
    component they are reached (e.g. a topology file loaded by path, which executors
    cannot import). Only the executor blobs are affected: the module is registered with
    cloudpickle while they are made, never for the rest of the process."""
    if not isinstance(module, types.ModuleType):
        msg = f"ship_by_value takes a module; got {type(module).__name__}"
        raise TypeError(msg)
    _SHIPPED_BY_VALUE.add(module.__name__)


def _driver_object(origin: str, index: int) -> Any:
    """Unpickling a driver blob: the object at ``index`` of build ``origin``'s table."""
    return _DRIVER_OBJECTS[origin][index]


class _DriverPickler(cloudpickle.Pickler):
    """Pickles instances by value and every class, function and module by identity: as
    a reference into the build's table of this process's live objects."""

    def __init__(self, file: Any, origin: str, table: list) -> None:
        super().__init__(file)
        self._origin, self._table = origin, table
        self._index = {id(o): i for i, o in enumerate(table)}

    def reducer_override(self, obj: Any) -> Any:
        if obj is _driver_object:
            return NotImplemented             # by name: it is the loader itself
        if isinstance(obj, (type, types.FunctionType, types.ModuleType)):
            i = self._index.get(id(obj))
            if i is None:
                i = self._index[id(obj)] = len(self._table)
                self._table.append(obj)
            return _driver_object, (self._origin, i)
        return super().reducer_override(obj)


def _pickle(cid: str, obj: Any, origin: str, table: list[Any], *, executors: bool) -> tuple[bytes, bytes]:
    """The executor blob (``b""`` unless ``executors``: the component runs on executors
    whatever the placement) and the driver blob (see the module docstring) of a component."""
    blob = _executor_pickle(cid, obj, committer=False) if executors else b""
    try:
        buf = io.BytesIO()
        _DriverPickler(buf, origin, table).dump(obj)
    except Exception as e:  # noqa: BLE001 - reported with the component's name
        msg = (
            f"component {cid!r} ({type(obj).__name__}) cannot be pickled: {e}. Create connections "
            "and other unpicklable members in prepare(), not in __init__"
        )
        raise TopologyError(msg) from e
    return blob, buf.getvalue()


def _executor_blob_later(c: ComponentSpec) -> bytes:
    """The executor blob of commit component ``c``, made from its driver form (in the
    process that built the topology)."""
    if _DRIVER_OBJECTS.get(c.origin) is None:
        msg = (f"component {c.id!r} ({c.class_name}) cannot be placed on executors here: it was built "
               "in another process, for the driver. Build the topology in the process that runs it")
        raise TopologyError(msg)
    return _executor_pickle(c.id, pickle.loads(c.driver_blob), committer=True)


def _executor_pickle(cid: str, obj: Any, *, committer: bool) -> bytes:
    """``obj`` pickled for executors: classes and functions from scripts, test modules and
    topology files (which a worker cannot import) by value, with the globals they read.
    ``TopologyError`` names what cannot be pickled: a module global reached through such
    code, or else the component's own members."""
    with _REGISTRATION:
        before = set(cloudpickle.list_registry_pickle_by_value())
        modules = _by_value(obj, 3, set(), {})
        for name in _SHIPPED_BY_VALUE:
            if name in sys.modules:
                modules[name] = sys.modules[name]
        added = []
        for name, mod in modules.items():
            if name not in before:
                try:
                    cloudpickle.register_pickle_by_value(mod)
                except (ValueError, TypeError):
                    continue
                added.append(mod)
        try:
            return cloudpickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - reported with the component's name
            culprit = _unpicklable_global(obj)     # while the modules are still registered
            if culprit is None:
                msg = (
                    f"component {cid!r} ({type(obj).__name__}) cannot be pickled, but it is "
                    f"shipped to Spark executors: {e}. Create connections and other "
                    "unpicklable members in prepare(), not in __init__"
                )
                raise TopologyError(msg) from e
            name, module, reader, error = culprit
            where = getattr(module, "__file__", None)
            elsewhere = ("or run the commit phase on the driver (commit_placement='driver', the default), "
                         "where committers share the driver's module globals" if committer else
                         "or keep such state in a committer (it runs on the driver with "
                         "commit_placement='driver', the default, sharing the module's globals)")
            msg = (
                f"component {cid!r} ({type(obj).__name__}) runs on Spark executors, but {reader} reads "
                f"the module global {name} of {module.__name__}{f' ({where})' if where else ''}, which "
                f"cannot be pickled: {error}. Executors cannot import that module, so its code goes to "
                f"them by value with the globals it reads, and they are other processes: they never "
                f"share the driver's {name}. Create what {name} holds (locks, connections) in prepare(), "
                f"{elsewhere}, or in map state (context.map_state)"
            )
            raise TopologyError(msg) from e
        finally:
            for mod in added:
                try:
                    cloudpickle.unregister_pickle_by_value(mod)
                except ValueError:
                    pass


def _unpicklable_global(obj: Any) -> tuple[str, types.ModuleType, str, Exception] | None:
    """The first module global that code pickled by value with ``obj`` reads and that
    cannot be pickled: (its name, its module, the function reading it, the error); None
    when there is none (call with the by-value modules registered)."""
    from pyspark.cloudpickle.cloudpickle import _extract_code_globals, _should_pickle_by_reference

    seen: set[int] = set()
    todo: list[tuple[Any, int]] = [(obj, 0)]
    while todo:
        x, depth = todo.pop(0)
        if id(x) in seen or depth > 6:
            continue
        seen.add(id(x))
        if isinstance(x, types.FunctionType):
            if _should_pickle_by_reference(x):
                continue
            module = sys.modules.get(x.__globals__.get("__name__", ""))
            for name in sorted(_extract_code_globals(x.__code__)):
                if name not in x.__globals__:
                    continue
                value = x.__globals__[name]
                if isinstance(value, (type, types.FunctionType)):
                    todo.append((value, depth + 1))
                    continue
                if isinstance(value, types.ModuleType) or module is None:
                    continue
                try:
                    cloudpickle.dumps(value)
                except Exception as e:  # noqa: BLE001 - the culprit
                    return name, module, f"{x.__qualname__}()", e
            cells = [c.cell_contents for c in x.__closure__ or () if c.cell_contents is not None]
            todo.extend((v, depth + 1) for v in [*cells, *(x.__defaults__ or ())])
        elif isinstance(x, type):
            if x.__module__ == "builtins" or _should_pickle_by_reference(x):
                continue
            for v in vars(x).values():
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                if isinstance(v, property):
                    todo.extend((f, depth + 1) for f in (v.fget, v.fset, v.fdel) if f is not None)
                elif isinstance(v, (types.FunctionType, type)):
                    todo.append((v, depth + 1))
        else:
            todo.extend((t, depth + 1) for t in type(x).__mro__)
            if isinstance(x, (dict, list, tuple, set, frozenset)):
                if len(x) <= 32:
                    todo.extend((v, depth + 1) for v in (x.values() if isinstance(x, dict) else x))
            elif hasattr(x, "__dict__"):
                todo.extend((v, depth + 1) for v in vars(x).values())
    return None


def _by_value(obj: Any, depth: int, seen: set[int], found: dict[str, types.ModuleType]) -> dict[str, types.ModuleType]:
    """The modules (by name) of ``obj``'s classes, and of the classes and functions it
    holds (a wrapped bolt, a callback), that are neither ours nor installed: they go to
    executors by value."""
    if id(obj) in seen or depth < 0:
        return found
    seen.add(id(obj))
    targets = [obj] if callable(obj) and not isinstance(obj, type) and hasattr(obj, "__module__") else []
    targets += list(type(obj).__mro__) if not isinstance(obj, type) else list(obj.__mro__)
    for t in targets:
        name = getattr(t, "__module__", None)
        mod = sys.modules.get(name or "")
        if mod is None or name is None or name in ("builtins", "__main__"):
            continue
        f = getattr(mod, "__file__", "") or ""
        if name.split(".")[0] not in _OWN_PACKAGES and "site-packages" not in f and "/lib/python" not in f:
            found[name] = mod
    children: list[Any] = []
    if isinstance(obj, (dict, list, tuple, set, frozenset)):
        if len(obj) <= 32:  # settings and wrapped components, not data
            children = list(obj.values() if isinstance(obj, dict) else obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        children = list(vars(obj).values())
    for c in children:
        if not isinstance(c, (str, bytes, int, float, bool, type(None))):
            _by_value(c, depth - 1, seen, found)
    return found
