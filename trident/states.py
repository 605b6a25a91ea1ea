"""Storm's Trident State API in Python: states of the user's own systems (docs/states.md).

>>> from trident import TridentTopology, FixedBatchSpout
>>> from trident.states import State, StateFactory, BaseStateUpdater
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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from state.map import MapState, commit_maps, map_class
from state.user_backing import IBackingMap, UserMapBacking, register_map_backing, registered_schemes
from transactional.engine.user_states import COMPONENT_ID, EPOCH, TOPOLOGY_ID, forget_states, mark_factory
from trident.operation import BaseQueryFunction, BaseStateUpdater, QueryFunction, StateUpdater

__all__ = [
    "State", "StateFactory", "StateUpdater", "BaseStateUpdater", "QueryFunction", "BaseQueryFunction",
    "IBackingMap", "BackingMapStateFactory", "TransactionalMapFactory", "OpaqueMapFactory", "NonTransactionalMapFactory",
    "register_map_backing", "registered_schemes", "EPOCH", "TOPOLOGY_ID", "COMPONENT_ID", "forget_states", "mark_factory",
    "is_state_factory",
]


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
        close = getattr(self.map.backing, "close", None)
        if close is not None:
            close()

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
