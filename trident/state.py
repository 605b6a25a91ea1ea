"""Trident state: Storm's State API for the user's own systems, and map state factories
in Trident's three flavours with the pairing rule (docs/states.md).

**States of the user's own systems.**
>>> from trident import TridentTopology, FixedBatchSpout
>>> from trident.state import State, StateFactory, BaseStateUpdater
>>> from transactional import Fields, TopologyConfig, run_topology
>>> ROWS = []
>>> class ListState(State):                      # a toy sink: one list, txid-guarded
...     def __init__(self): self.last, self.pending = 0, []
...     def begin_commit(self, txid): self.txid, self.pending = txid, []
...     def commit(self, txid):
...         if txid > self.last: ROWS.extend(self.pending); self.last = txid
>>> class ListFactory(StateFactory):
...     def make_state(self, conf, metrics, partition_index, num_partitions): return ListState()
>>> class Append(BaseStateUpdater):
...     def update_state(self, state, tuples, collector): state.pending += [t["w"] for t in tuples]
>>> t = TridentTopology("doc-states")
>>> _ = t.new_stream("s", FixedBatchSpout(Fields("w"), 2, ("a",), ("b",), ("c",))).partition_persist(
...     ListFactory(), Fields("w"), Append())
>>> _ = run_topology(t.build(), TopologyConfig(executor="in-process", progress=False))
>>> ROWS
['a', 'b', 'c']

The contract (Storm's): a task's batch is applied in the commit phase as
``begin_commit(txid)``, then the updater's ``update_state`` (or a query's
``batch_retrieve``), then ``commit(txid)``; commits run strictly in txid order, and the
newest txid may come again (a crash, a failed attempt) -- a state is exactly once when
it records the last txid it applied *in the same write as the data* and handles that
replay: skip it (transactional spouts: a replay is the same batch) or undo and redo it
(opaque spouts: a replay may be another batch). ``conf[EPOCH]`` is the driver's epoch:
store it with the txid and refuse a write from a lower one (a paused driver that lost
its lock writes nothing).

**Map state factories.** A factory names a map and its flavour; the backing is the topology's state
(``TopologyConfig.state``: ``memory://`` or ``redis://...``), as for bolts'
``context.map_state``. So ``transactional("counts")`` is the ``TransactionalMap`` called
``counts`` of the topology, readable after a run with ``result.map_state("counts")``.

| spout \\ state      | transactional, counters | opaque | non-transactional |
| ------------------- | ----------------------- | ------ | ----------------- |
| transactional       | exactly-once            | exactly-once | at-least-once |
| opaque              | **refused**             | exactly-once | at-least-once |

``counters(name)`` is a transactional map of numbers for ``Count``/``Sum``: each txid's
additions go to the store in one atomic write that records the txid (``CounterMap``),
with no read of the keys -- the fastest exactly-once persistent count; it needs the
commit phase on the driver (``commit_placement="driver"``).

An opaque spout may replay a txid with different tuples; a transactional map rebuilds
only the keys the replay updates, so it would keep the first attempt's value for keys the
replay does not touch (an opaque map puts those back). ``check_pairing`` refuses that
pairing when the topology is built.
The rule is about the spouts whose tuples *update* a map: an opaque spout's stream may
query a transactional map (``state_query``) and write its answers to an opaque map.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from state.keys import check_state_name
from state.map import MapState, commit_maps, map_class
from state.map.backing import Closing
from state.user_backing import IBackingMap, UserMapBacking, register_map_backing, registered_schemes
from transactional.engine.user_states import COMPONENT_ID, EPOCH, TOPOLOGY_ID, forget_states, mark_factory
from transactional.exceptions import ConfigError
from trident.operation import BaseQueryFunction, BaseStateUpdater, QueryFunction, StateUpdater

__all__ = [
    "State", "StateFactory", "StateUpdater", "BaseStateUpdater", "QueryFunction", "BaseQueryFunction",
    "IBackingMap", "BackingMapStateFactory", "TransactionalMapFactory", "OpaqueMapFactory", "NonTransactionalMapFactory",
    "register_map_backing", "registered_schemes", "EPOCH", "TOPOLOGY_ID", "COMPONENT_ID", "forget_states", "mark_factory",
    "is_state_factory",
    "StateType", "MapStateFactory", "transactional", "opaque", "counters", "non_transactional",
    "PAIRING_TABLE", "check_pairing", "state_name", "TridentState",
]


class StateType(str, enum.Enum):
    """Trident's state flavours (the names of ``state.map.MAP_KINDS``)."""

    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"
    NON_TRANSACTIONAL = "non-transactional"
    COUNTER = "counter"


@dataclass(frozen=True)
class MapStateFactory:
    """A map state of the topology: its ``name`` and flavour (``state_type``); with
    ``ttl_secs``, a key not written (``ttl_from="read"``: nor read) for that long, by the
    txids' recorded times, is gone (docs/operations.md, "State that expires").

    ``version`` and ``migrate`` (docs/operations.md, "Changing a running topology"): the
    shape of the values it stores, and ``migrate(value, from_version)`` turning a value an
    earlier version stored into this version's; ``trident upgrade`` refuses a new version
    without one. ``uid``: the state's stable id when its name changes (default: the name)."""

    name: str
    state_type: StateType = StateType.OPAQUE
    ttl_secs: float | None = None
    ttl_from: str = "write"
    ttl_grace_secs: float | None = None
    version: int = 1
    migrate: Callable[[Any, int], Any] | None = None
    uid: str | None = None

    def __post_init__(self) -> None:
        from state.map.ttl import Ttl

        check_state_name(self.name)
        object.__setattr__(self, "state_type", StateType(self.state_type))
        ttl = Ttl.of(self.ttl_secs, self.ttl_from, self.ttl_grace_secs)    # checked now, before a run
        if ttl is not None:
            ttl.check_kind(self.name, self.state_type.value)
        if not isinstance(self.version, int) or isinstance(self.version, bool) or self.version < 1:
            msg = f"state {self.name!r}: version is an int >= 1 (the shape of its values); got {self.version!r}"
            raise ConfigError(msg)
        if self.migrate is not None and not callable(self.migrate):
            msg = f"state {self.name!r}: migrate is a function (value, from_version) -> value; got {self.migrate!r}"
            raise ConfigError(msg)

    @property
    def ttl(self) -> dict[str, Any]:
        """The TTL settings as ``context.map_state`` takes them."""
        return {"ttl_secs": self.ttl_secs, "ttl_from": self.ttl_from, "ttl_grace_secs": self.ttl_grace_secs}


#: what a map factory takes besides its name: a TTL (docs/operations.md, "State that
#: expires") and its value version (docs/operations.md, "Changing a running topology")
Migrate = Callable[[Any, int], Any] | None


def transactional(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
                  ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
                  uid: str | None = None) -> MapStateFactory:
    """A transactional map (exactly-once with a transactional spout)."""
    return MapStateFactory(name, StateType.TRANSACTIONAL, ttl_secs, ttl_from, ttl_grace_secs, version, migrate, uid)


def opaque(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
           ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
           uid: str | None = None) -> MapStateFactory:
    """An opaque map (exactly-once with any spout we have)."""
    return MapStateFactory(name, StateType.OPAQUE, ttl_secs, ttl_from, ttl_grace_secs, version, migrate, uid)


def counters(name: str, *, ttl_secs: float | None = None, version: int = 1, migrate: Migrate = None,
             uid: str | None = None) -> MapStateFactory:
    """A map of numbers that ``Count``/``Sum`` add to, exactly once per txid, in one atomic
    write per batch without reading the keys (``state.map.CounterMap``). It cannot expire
    keys (it never reads them): ``ttl_secs`` is refused, naming ``transactional``."""
    return MapStateFactory(name, StateType.COUNTER, ttl_secs, "write", None, version, migrate, uid)


def non_transactional(name: str, *, ttl_secs: float | None = None, ttl_from: str = "write",
                      ttl_grace_secs: float | None = None, version: int = 1, migrate: Migrate = None,
                      uid: str | None = None) -> MapStateFactory:
    """A non-transactional map (at-least-once: a replayed batch is applied again)."""
    return MapStateFactory(name, StateType.NON_TRANSACTIONAL, ttl_secs, ttl_from, ttl_grace_secs, version, migrate,
                           uid)


PAIRING_TABLE = """\
  spout \\ state   transactional   opaque         non-transactional
                  (and counters)
  transactional   exactly-once    exactly-once   at-least-once
  opaque          REFUSED         exactly-once   at-least-once"""


def check_pairing(factory: Any, spouts: list[tuple[str, Any]]) -> None:
    """Refuse a transactional map whose updates come from an opaque spout (see the module
    docstring); ``spouts``: the spouts feeding the stream that writes the map (a stream
    that only queries it does not count). A State API factory (``trident.state``) says
    with ``opaque_safe`` whether it is exactly once with an opaque spout."""
    if not isinstance(factory, MapStateFactory):
        bad = [sid for sid, spout in spouts if getattr(spout, "opaque", False)]
        if bad and not getattr(factory, "opaque_safe", True):
            name = state_name(factory)
            msg = (f"state {name!r} skips a replayed txid, which is exactly once only with transactional "
                   f"spouts, but it is fed by the opaque spout(s) {bad}: a replayed batch of an opaque spout "
                   "may hold other tuples. Use the state's opaque mode (see docs/states.md) or a "
                   "transactional spout")
            raise ConfigError(msg)
        return
    if factory.state_type not in (StateType.TRANSACTIONAL, StateType.COUNTER):
        return
    bad = [sid for sid, spout in spouts if getattr(spout, "opaque", False)]
    if bad:
        msg = (
            f"state {factory.name!r} is {factory.state_type.value}, but it is fed by the opaque spout(s) "
            f"{bad}: a replayed batch of an opaque spout may hold other tuples, and a "
            "transactional map would keep some keys from one attempt and some from another. "
            f"Use trident.state.opaque({factory.name!r}). Trident's table:\n{PAIRING_TABLE}"
        )
        raise ConfigError(msg)


def state_name(factory: Any) -> str:
    """How messages and the status page call a state: its ``state_name`` (the framework's
    factories), else a ``name`` it set (a str: a user's ``self.name = name``), else its
    class name."""
    for attr in ("state_name", "name"):
        v = getattr(factory, attr, None)
        if isinstance(v, str) and v:
            return v
    return type(factory).__name__


class TridentState:
    """What ``persistent_aggregate`` and ``partition_persist`` return: the state, to query
    with ``Stream.state_query``, and the stream of updated values."""

    def __init__(self, topology: Any, factory: Any, node: Any) -> None:
        self.topology = topology
        self.factory = factory
        self._node = node

    @property
    def name(self) -> str:
        """The map's name (``result.map_state(name)`` reads it after a run), or a State API
        factory's ``name``."""
        return state_name(self.factory)

    def new_values_stream(self) -> Any:
        """The stream of ``(key fields..., new value)`` this state's updates produce (in the
        commit phase, after each update)."""
        if self._node is None:
            msg = f"{self!r} is a static state (new_static_state): no stream updates it, so it has no new values"
            raise ConfigError(msg)
        return self.topology.stream_of(self._node)

    def parallelism_hint(self, n: int) -> TridentState:
        """The number of tasks updating this state."""
        if self._node is not None:
            self._node.hint = n
        return self

    def __repr__(self) -> str:
        kind = getattr(getattr(self.factory, "state_type", None), "value", "State API")
        return f"TridentState({self.name!r}, {kind})"


class State:
    """Storm's ``State``: a task's view of a user system. Subclass it.

    ``begin_commit(txid)`` is called before a batch's updates in the commit phase and
    ``commit(txid)`` after them, in strictly increasing txid order except that the newest
    txid may come again after a failure (see the module docstring). Optional:
    ``begin_attempt(attempt)`` (the ``TransactionAttempt``, just before ``begin_commit``),
    ``begin_time(time_ms)`` (the txid's recorded time, the same on every replay of it:
    what expiry or a time column should use), ``close()`` (when the framework drops the
    state)."""

    def begin_commit(self, txid: int) -> None:
        """A batch's updates start."""

    def commit(self, txid: int) -> None:
        """The batch's updates end: make them durable, with ``txid``, atomically."""


class StateFactory:
    """Storm's ``StateFactory``: ``make_state(conf, metrics, partition_index,
    num_partitions)`` builds the state of one task (``partition_index`` of
    ``num_partitions``). Called once per process, task and driver epoch; the state is kept
    for later batches. A factory is pickled to executors: keep connection settings in it,
    open connections in ``make_state``.

    ``state_name``: how the status page and errors call the state: a ``name`` the
    factory sets (``self.name = name``, as Storm users write it), else the class name.
    The framework takes no attribute of the user's: ``name`` is the factory's own.
    ``opaque_safe``: True when the state is exactly once with opaque spouts too (it undoes
    a replayed txid's earlier attempt); a state that only skips a replayed txid is exactly
    once with transactional spouts only, and Trident refuses pairing it with an opaque one.

    A factory may define ``check(conf)``: the driver calls it once when a run starts, before
    any batch, for the factories a Trident topology writes or queries, to stop the run with
    the factory's own message when its system is not ready (a missing table, a column of
    another type, credentials the server refuses); ``metrics`` in ``make_state`` registers
    the state's own metrics (docs/operations.md, "Metrics of your own").
    """

    opaque_safe: bool = True

    @property
    def state_name(self) -> str:
        """The state's name in messages and on the status page."""
        own = getattr(self, "name", None)       # a user's attribute, or a subclass's property
        return own if isinstance(own, str) and own else type(self).__name__

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> State:
        """The state of task ``partition_index`` of ``num_partitions``."""
        raise NotImplementedError

    # -- trident verify (docs/verify.md): runs against scratch copies, never the real system --

    def scratch(self, namespace: str) -> StateFactory | None:
        """A factory like this one that writes into *scratch copies* named by ``namespace``
        (a schema, a directory, topics of their own), never into this factory's real
        table, directory or topic; None (the default) when it cannot, and then
        ``trident verify`` refuses the topology. Called in every process, so it must be
        a pure function of ``namespace`` and the factory (no I/O): create the copies
        lazily in the copy's ``make_state``. On the copy, ``read_scratch`` and
        ``drop_scratch`` let verify compare and remove them."""
        return None

    def read_scratch(self) -> dict[Any, Any] | None:
        """On a scratch copy: what it holds, as ``{key: value}`` (rows as a multiset:
        ``{row: count}``) for verify to compare run by run; None: it cannot say (the state
        is then reported as not compared)."""
        return None

    def drop_scratch(self) -> None:
        """On a scratch copy: remove the copies (verify calls it once it has read them)."""


def is_state_factory(obj: Any) -> bool:
    """Whether ``obj`` is a factory of the State API (anything with ``make_state``)."""
    return callable(getattr(obj, "make_state", None))


# -- map states over a user's backing (Storm's TransactionalMap.build(backing) ...) -------------

class _MapOverBacking(State):
    """A ``state.map`` map as a ``State``: Storm's ``MapState`` (``multi_get``,
    ``multi_update``, ``multi_put``; ``multi_combine``) over the user's backing, with the
    exactly-once rule of its kind, fenced by the driver's epoch when the backing takes
    ``fence=``."""

    def __init__(self, m: MapState[Any], epoch: int | None) -> None:
        self.map = m
        self.epoch = epoch
        self.attempt: int | None = None

    def begin_attempt(self, attempt: Any) -> None:
        self.attempt = attempt.attempt_id

    def begin_commit(self, txid: int) -> None:
        self.map.begin_commit(txid, self.attempt, epoch=self.epoch)
        # what an earlier, failed attempt of this txid wrote through this task: put back
        self.map.rollback([self.map.writer])

    def commit(self, txid: int) -> None:
        commit_maps([self.map], txid)

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """Replace the values of ``keys`` (Storm's ``MapState.multiPut``)."""
        self.map.multi_update(list(keys), [_replace(v) for v in values])

    def close(self) -> None:
        """Close the map's backing, when it holds connections (``Closing``)."""
        if self.map.caps.closing:
            cast(Closing, self.map.backing).close()

    def __getattr__(self, name: str) -> Any:       # multi_get, multi_update, multi_combine, get ...
        if name == "map":
            raise AttributeError(name)
        return getattr(self.map, name)


def _replace(v: Any) -> Callable[[Any], Any]:
    return lambda _old: v


class BackingMapStateFactory(StateFactory):
    """A map state over a user's backing: ``backing_factory(conf, partition_index,
    num_partitions)`` returns an ``IBackingMap`` (``multi_get``/``multi_put``); ``kind``:
    ``"transactional"``, ``"opaque"`` or ``"non-transactional"`` (Storm's
    ``TransactionalMap.build``, ``OpaqueMap.build``, ``NonTransactionalMap.build``). Use
    it with ``persistent_aggregate``, ``partition_persist``, ``state_query``.

    Keys reach the backing as strings (``state.keys.encode_key``); values as the
    wrappers' JSON-compatible dicts. A key must be updated by one task per txid (a
    fields grouping on the key does that: ``group_by``)."""

    def __init__(self, backing_factory: Callable[[dict[str, Any], int, int], Any], kind: str = "opaque",
                 name: str | None = None) -> None:
        self.backing_factory = backing_factory
        self.kind = map_class(kind).kind
        self.opaque_safe = self.kind != "transactional"
        self._name = name

    @property
    def state_name(self) -> str:
        """The name given, else the kind and the backing factory's name."""
        return self._name or f"{self.kind} map over {getattr(self.backing_factory, '__name__', 'a backing')}"

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> State:
        """The map of task ``partition_index``, over the backing made for it."""
        backing = UserMapBacking(self.backing_factory(conf, partition_index, num_partitions), self.state_name)
        m = map_class(self.kind)(backing, self.state_name, writer=f"task{partition_index}")
        return _MapOverBacking(m, conf.get(EPOCH))


def TransactionalMapFactory(backing_factory: Callable[[dict[str, Any], int, int], Any], name: str | None = None) -> BackingMapStateFactory:  # noqa: N802 - Storm's name
    """A ``TransactionalMap`` over the user's backing (exactly once with transactional spouts)."""
    return BackingMapStateFactory(backing_factory, "transactional", name)


def OpaqueMapFactory(backing_factory: Callable[[dict[str, Any], int, int], Any], name: str | None = None) -> BackingMapStateFactory:  # noqa: N802 - Storm's name
    """An ``OpaqueMap`` over the user's backing (exactly once with any spout)."""
    return BackingMapStateFactory(backing_factory, "opaque", name)


def NonTransactionalMapFactory(backing_factory: Callable[[dict[str, Any], int, int], Any], name: str | None = None) -> BackingMapStateFactory:  # noqa: N802 - Storm's name
    """A ``NonTransactionalMap`` over the user's backing (at least once)."""
    return BackingMapStateFactory(backing_factory, "non-transactional", name)
