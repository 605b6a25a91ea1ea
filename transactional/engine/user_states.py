"""States of the user's own systems in a task (Storm's Trident ``State`` API; docs/states.md).

A committer task reaches a state through its context, ``context.state(factory)``: the
factory's ``make_state(conf, metrics, partition_index, num_partitions)`` runs once per
process, driver epoch and task (the state is kept, with its connections, for the next
batches), and the framework brackets the task's batch with the state's
``begin_commit(txid)`` (when the task first asks for it) and ``commit(txid)`` (after the
task's ``finish_batch``). Commit tasks run in txid order, so every state sees its
``begin_commit``/``commit`` pairs in strictly increasing txid order, a replayed txid
again after a crash or a failed attempt.

``conf`` given to ``make_state`` is the topology's conf plus ``EPOCH`` (the driver's
epoch: a state fences its writes with it), ``TOPOLOGY_ID`` and ``COMPONENT_ID``.
A state may define ``begin_attempt(attempt)``: it is called with the batch's
``TransactionAttempt`` just before ``begin_commit``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Any

from transactional.exceptions import ConfigError, StateUnavailableError
from transactional.metrics import MetricsContext
from transactional.tuples import TransactionAttempt

#: conf keys ``make_state`` finds besides the topology's conf
EPOCH = "trident.epoch"
TOPOLOGY_ID = "trident.topology.id"
COMPONENT_ID = "trident.component.id"
#: the conf key of a commit phase's txid time (ms, ``CoordinatorStore.commit_time``)
TXID_TIME_MS = "transactional.txid.time.ms"
#: conf key: state id -> value version boundaries (``state.map.migrate``; the driver sets it)
MIGRATIONS = "trident.migrations"

log = logging.getLogger("trident")
#: set in the conf of a ``trident verify`` run (docs/verify.md): every user state is then made
#: by ``factory.scratch(<the run's topology id>)``, a copy writing into scratch copies
VERIFY = "trident.verify"

_cache: dict[Hashable, Any] = {}
_guard = threading.Lock()


def _factory_key(factory: Any) -> Hashable:
    """A factory's identity across batches: its own ``state_key()`` when it has one, else
    the key a Trident topology gave it when built (``mark_factory``), else its pickled form
    (a task gets a new copy of its factory every batch: copies of one factory give one
    key), else the object itself."""
    key = getattr(factory, "state_key", None)
    if callable(key):
        return (type(factory).__qualname__, key())
    given = getattr(factory, "_trident_key", None)     # set when a Trident topology is built
    if given is not None:
        return (type(factory).__qualname__, given)
    import pickle

    try:
        return (type(factory).__qualname__, pickle.dumps(factory, protocol=4))
    except Exception:  # noqa: BLE001 - e.g. a lambda inside: cloudpickle takes it by value
        pass
    try:
        import cloudpickle  # type: ignore[import-not-found]

        return (type(factory).__qualname__, cloudpickle.dumps(factory, protocol=4))
    except Exception:  # noqa: BLE001 - an unpicklable factory lives in this process only
        return ("id", id(factory))


def factory_key(factory: Any) -> Hashable:
    """A factory's identity across its copies (``_factory_key``)."""
    return _factory_key(factory)


def factory_name(factory: Any) -> str:
    """How messages call a factory: its ``name``, else its class name."""
    try:
        return str(getattr(factory, "name", None) or type(factory).__name__)
    except Exception:  # noqa: BLE001 - a user's name property that fails
        return type(factory).__name__


def scratch_factory(factory: Any, namespace: str, where: str) -> Any:
    """``factory.scratch(namespace)``: the copy a ``trident verify`` run writes through;
    ``ConfigError`` naming the state, ``where`` it is used and the fix when the factory
    cannot make one (nothing is written then)."""
    make = getattr(factory, "scratch", None)
    copy = make(namespace) if callable(make) else None
    if copy is None:
        msg = (f"{where} writes the state {factory_name(factory)!r} ({type(factory).__name__}), which cannot be "
               "redirected to a scratch copy: trident verify never writes into your real systems, so it runs "
               f"every state against copies it owns. Implement scratch(namespace) on {type(factory).__name__}, "
               "returning a factory that writes into a copy named by namespace (and read_scratch() / "
               "drop_scratch() on that copy, so verify compares and removes it; docs/verify.md)")
        raise ConfigError(msg)
    return copy


def mark_factory(factory: Any) -> None:
    """Give ``factory`` a key that its copies keep (an attribute, pickled with it), so each
    task keeps one state across batches whatever the factory holds."""
    if getattr(factory, "_trident_key", None) is None:
        import uuid

        try:
            factory._trident_key = uuid.uuid4().hex
        except AttributeError:   # slots or frozen: the pickled form is the key
            pass


class TaskUserStates:
    """The user states one task opened in its batch (``TaskContext.state``)."""

    def __init__(self, conf: dict[str, Any], topology_id: str, component_id: str, task: int, num_tasks: int,
                 attempt: TransactionAttempt, epoch: int | None, phase: str) -> None:
        self.conf = conf
        self.topology_id = topology_id
        self.component_id = component_id
        self.task = task
        self.num_tasks = num_tasks
        self.attempt = attempt
        self.epoch = epoch
        self.phase = phase
        self.opened: list[Any] = []

    def state(self, factory: Any) -> Any:
        """The state ``factory`` makes for this task, in ``begin_commit(txid)`` of this batch."""
        if not callable(getattr(factory, "make_state", None)):
            msg = (f"{self.component_id!r}: context.state() takes a StateFactory (an object with "
                   f"make_state(conf, metrics, partition_index, num_partitions)); got {factory!r}")
            raise ConfigError(msg)
        if self.phase != "commit":
            msg = (f"{self.component_id!r} asked for state {factory!r} in the {self.phase} phase; user "
                   "states are written in the commit phase: mark the bolt a Committer (or put it "
                   "downstream of one)")
            raise ConfigError(msg)
        key = (self.topology_id, self.component_id, self.task, self.num_tasks, self.epoch, _factory_key(factory))
        with _guard:
            st = _cache.get(key)
            if st is None:
                conf = {**self.conf, EPOCH: self.epoch, TOPOLOGY_ID: self.topology_id,
                        COMPONENT_ID: self.component_id}
                if self.conf.get(VERIFY) is not None:     # a verify run: its scratch copies only
                    factory = scratch_factory(factory, self.topology_id, f"component {self.component_id!r}")
                st = _cache[key] = factory.make_state(conf, MetricsContext(), self.task, self.num_tasks)
        if not any(s is st for s in self.opened):
            begin_attempt = getattr(st, "begin_attempt", None)
            if begin_attempt is not None:
                begin_attempt(self.attempt)
            begin_time = getattr(st, "begin_time", None)
            if begin_time is not None and self.conf.get(TXID_TIME_MS) is not None:
                begin_time(int(self.conf[TXID_TIME_MS]))
            st.begin_commit(self.attempt.txid)
            self.opened.append(st)
        return st

    def commit(self) -> None:
        """The task finished its batch: ``commit(txid)`` every state it opened, in order."""
        for st in self.opened:
            st.commit(self.attempt.txid)
        self.opened = []


def check_factories(factories: Any, conf: dict[str, Any], topology_id: str) -> None:
    """Before any batch: each factory's ``check(conf)`` when it has one (a table that does not
    exist, a column of another type, a server that refuses the credentials stop the run here,
    with the factory's own message, not in the first commit). A server that is down now is
    an outage, not a mistake: logged, and the batches retry it as they would later. In a
    ``trident verify`` run the scratch copy is checked, never the user's own system."""
    for factory in factories:
        if conf.get(VERIFY) is not None:
            factory = scratch_factory(factory, topology_id, "the topology")
        check = getattr(factory, "check", None)
        if callable(check):
            try:
                check({**conf, TOPOLOGY_ID: topology_id})
            except StateUnavailableError as e:
                log.warning("%s: %s; the batches will retry it", topology_id, e)


def forget_states(topology_id: str | None = None) -> None:
    """Drop the kept states (of ``topology_id``, or all), closing those with ``close()``.
    For tests and for a driver that ends."""
    with _guard:
        keys = [k for k in _cache if topology_id is None or k[0] == topology_id]   # type: ignore[index]
        for k in keys:
            st = _cache.pop(k)
            close = getattr(st, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001, S110 - closing is best effort
                    pass
