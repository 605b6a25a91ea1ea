"""The one task runner: prepare -> execute* -> finish_batch, with routing by grouping
(``transactional.engine.routing``).

Spark stages (processing phase, in executors) and the commit phase (on the driver) both
run tasks through ``run_task``. A task's input is a sequence of *payloads*
``(source_component, stream, source_task, [values, ...])``; its output is a list of
records ``(key, payload)`` where ``key = consumer_index * KEY_STRIDE + consumer_task``
(the consumer's position in ``Topology.components`` and its task), ready for a Spark
``partitionBy`` or a driver-side dict.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from transactional.bolt import BasicBoltAdapter
from transactional.columns import ColumnBatch, rows_of
from transactional.engine.faults import task_fault
from transactional.engine.routing import DIRECT, KEY_STRIDE, choose_tasks, direct, grouper, shuffle_start
from transactional.engine.routing import stable_hash as stable_hash  # noqa: F401 - its old home, re-exported
from transactional.engine.task_states import TaskStates, TaskStatesBase
from transactional.engine.user_states import TaskUserStates
from transactional.exceptions import (
    AggregateOverflowError,
    ConfigError,
    ConflictingWriteError,
    FailedException,
    InvalidTupleError,
    LeadershipLostError,
    SpoutError,
    StateAheadError,
    StateCorruptError,
    StateUnavailableError,
    TopologyFailedError,
    UnstorableValueError,
)
from transactional.metrics import MetricsContext
from transactional.topology import ComponentSpec, Topology
from transactional.tuples import Fields, TransactionAttempt, Tuple

Payload = tuple[Any, ...]  # (source, stream, source_task, list[tuple])
Record = tuple[Any, ...]   # (key, Payload)
# programming and configuration errors, and state that must not be written: no replay helps
FATAL = (InvalidTupleError, StateAheadError, StateCorruptError, SpoutError, TopologyFailedError,
         ConfigError, LeadershipLostError, ConflictingWriteError, AggregateOverflowError,
         UnstorableValueError)


@dataclass
class TaskFailure:
    """What went wrong in one task, carried from executors to the driver as data."""

    component: str
    task: int
    txid: int
    attempt_id: int
    kind: str          # "failed" (FailedException), "error" (any other), "fatal" (stops the run)
    error_type: str
    message: str
    traceback: str

    @classmethod
    def of(cls, exc: BaseException, component: str, task: int, attempt: TransactionAttempt) -> TaskFailure:
        kind = "failed" if isinstance(exc, FailedException) else (
            "fatal" if isinstance(exc, FATAL) else "error")
        message = str(exc)
        if isinstance(exc, ModuleNotFoundError):
            # the same on every attempt: code the workers do not have (docs/cluster.md)
            kind = "fatal"
            message += (f" (in the process running this task: install {exc.name!r} there, or ship it: "
                        "`trident run` ships the topology's local modules to a non-local master; add "
                        "more with --py-files / TopologyConfig(py_files=...), or a packed environment "
                        "with --archives)")
        # an outage names its server and what to do: a traceback of the client's connect adds nothing
        trace = "" if isinstance(exc, StateUnavailableError) else "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(component, task, attempt.txid, attempt.attempt_id, kind, type(exc).__name__, message, trace)

    def describe(self) -> str:
        return (f"txid {self.txid} (attempt {self.attempt_id}), component {self.component!r}, "
                f"task {self.task}: {self.error_type}: {self.message}")


class Route:
    """One subscription of one stream: the consumer (its index in ``Topology.components``
    and its first global task id), its per-task lists of values and, where tuples are
    tracked (core topologies), of message ids; and how a tuple finds its task(s):
    ``send(values)`` appends it (transactional topologies' hot path), ``choose(values)``
    names the task indexes (core topologies: Storm's ``chooseTasks``)."""

    __slots__ = ("index", "stream", "values", "ids", "base", "direct", "send", "choose")

    def __init__(self, index: int, stream: str, n: int, base: int, direct: bool) -> None:
        self.index = index
        self.stream = stream
        self.values: list[list[Any]] = [[] for _ in range(n)]
        self.ids: list[list[Any]] = [[] for _ in range(n)]
        self.base = base
        self.direct = direct
        self.send: Callable[[tuple[Any, ...]], Any] = _unrouted
        self.choose: Callable[[tuple[Any, ...]], Sequence[int]] = _unrouted


def _unrouted(values: tuple[Any, ...]) -> Any:
    """How a direct subscription's tuple finds its task: never (``emit_direct`` names it)."""
    msg = "a direct subscription's task is named by emit_direct, not chosen"
    raise InvalidTupleError(msg)


class Router:
    """The one router of every topology kind: where a task's tuples go (per stream its
    field count, whether it is direct, its ``Route`` to each consumer), and the records
    for the consumers at the end (``records``). It is also the collector a transactional
    task emits into (``emit``, ``emit_direct``, ``emit_columns``: each tuple checked and
    routed by grouping); a core task's collector (``transactional.engine.core.task.CoreRouter``,
    ``SpoutCollector``) routes through one made with ``seed`` (its tuples tracked, each
    with its message ids, and no ``attempt`` in the values)."""

    __slots__ = ("component", "task", "attempt", "streams", "tracked", "_routes", "_emit", "_direct", "_columns",
                 "emitted")

    def __init__(self, topology: Topology, component: ComponentSpec, task: int,
                 attempt: TransactionAttempt | None, only: Callable[[str], bool] | None = None, *,
                 seed: int | None = None) -> None:
        self.component = component.id
        self.task = task
        self.attempt = attempt
        self.tracked = seed is not None
        self.emitted = 0
        self.streams: dict[str, tuple[int, bool, list[Route]]] = {}
        self._routes: list[Route] = []
        self._emit: dict[str, Callable[[tuple[Any, ...]], None]] = {}
        self._direct: dict[str, list[tuple[int, Callable[[int, tuple[Any, ...]], Any]]]] = {}   # stream -> (tasks, send)
        self._columns: dict[str, tuple[int, list[list[Any]]]] = {}   # stream -> (fields, lists taking columns)
        start = shuffle_start(task, seed if seed is not None else attempt.txid if attempt is not None else 0)
        index = {c.id: i for i, c in enumerate(topology.components)}
        for stream, spec in component.streams.items():
            routes: list[Route] = []
            columnar: list[list[Any]] | None = []
            for consumer, sub in topology.consumers(component.id):
                if sub.stream != stream or (only is not None and not only(consumer.id)):
                    continue
                is_direct = sub.grouping == DIRECT
                r = Route(index[consumer.id], stream, consumer.parallelism, topology.task_ids(consumer.id).start,
                          is_direct)
                local = not is_direct and topology.is_local(consumer)
                field_idx = [spec.fields.index(f) for f in sub.fields]
                if self.tracked and not is_direct:
                    r.choose = choose_tasks(sub.grouping, consumer.parallelism, field_idx, task=task, start=start,
                                            local=topology.is_local(consumer))
                elif not self.tracked and not is_direct:
                    r.send = grouper(sub.grouping, [l.append for l in r.values], field_idx, task=task, start=start,
                                     local=local)
                routes.append(r)
                self._routes.append(r)
                if columnar is not None and local and consumer.accepts_columns:
                    columnar.append(r.values[task])
                else:
                    columnar = None
            self.streams[stream] = (len(spec.fields), spec.direct, routes)
            if self.tracked:
                continue
            self._emit[stream] = _checked_emit(self, stream, len(spec.fields), spec.direct,
                                               [r.send for r in routes if not r.direct])
            if columnar and not spec.direct:
                self._columns[stream] = (len(spec.fields) - 1, columnar)
            if spec.direct:
                self._direct[stream] = [(len(r.values), direct([l.append for l in r.values]))
                                        for r in routes if r.direct]

    # -- the routing of core collectors ----------------------------------------------------
    def stream(self, stream: str, values: Any, direct: bool) -> tuple[tuple[Any, ...], list[Route]]:
        """The checked values and the routes of an emit on ``stream`` (a core collector's)."""
        try:
            nfields, is_direct, routes = self.streams[stream]
        except KeyError:
            msg = (f"{self.component!r} task {self.task} emitted on undeclared stream {stream!r}; declared: "
                   f"{sorted(self.streams)}. Declare it in declare_output_fields")
            raise InvalidTupleError(msg) from None
        if is_direct != direct:
            msg = (f"{self.component!r} task {self.task} used emit_direct on stream {stream!r}, which is not "
                   "declared direct; declare(fields, stream, direct=True)" if direct else
                   f"{self.component!r} task {self.task} used emit() on direct stream {stream!r}; use "
                   "emit_direct(task, values, ...)")
            raise InvalidTupleError(msg)
        if type(values) is not tuple:
            if not isinstance(values, (list, tuple)):
                msg = f"{self.component!r} task {self.task} emitted {values!r}; emit a tuple of values, e.g. (word, 1)"
                raise InvalidTupleError(msg)
            values = tuple(values)
        if len(values) != nfields:
            msg = (f"{self.component!r} task {self.task} emitted {len(values)} values on stream {stream!r}, "
                   f"which declares {nfields} fields: {values!r}")
            raise InvalidTupleError(msg)
        return values, routes

    def direct_task(self, routes: list[Route], task_id: int) -> tuple[Route, int]:
        """The route and task index of global task id ``task_id`` among ``routes``."""
        for r in routes:
            if r.base <= task_id < r.base + len(r.values):
                return r, task_id - r.base
        owners = ", ".join(f"{r.base}..{r.base + len(r.values) - 1}" for r in routes) or "none"
        msg = (f"{self.component!r} task {self.task} used emit_direct to task {task_id}, which does not "
               f"subscribe to that stream (subscribers' task ids: {owners}; see context.get_component_tasks)")
        raise InvalidTupleError(msg)

    # -- the collector API -------------------------------------------------------------------
    def emit(self, values: tuple[Any, ...], stream: str = "default") -> None:
        try:
            fn = self._emit[stream]
        except KeyError:
            msg = (
                f"{self.component!r} task {self.task} emitted on undeclared stream {stream!r}; "
                f"declared: {sorted(self._emit)}. Declare it in declare_output_fields"
            )
            raise InvalidTupleError(msg) from None
        fn(values)

    def columnar(self, stream: str = "default") -> bool:
        """True when every consumer of ``stream`` takes whole batches as columns, in this
        very task (``transactional.columns``): ``emit_columns`` may be used."""
        return stream in self._columns

    def emit_columns(self, batch: Any, stream: str = "default") -> None:
        """Emit a ``pyarrow.RecordBatch`` of rows at once (its columns: the stream's
        fields after the attempt). Where a consumer does not take columns
        (``columnar(stream)`` is False), its rows are emitted one by one instead."""
        target = self._columns.get(stream)
        if target is None:
            for row in rows_of(batch):
                self.emit((self.attempt, *row), stream)
            return
        nfields, lists = target
        if batch.num_columns != nfields:
            msg = (f"{self.component!r} task {self.task} emitted a batch of columns {batch.schema.names} "
                   f"on stream {stream!r}, which has {nfields} fields after the attempt")
            raise InvalidTupleError(msg)
        cb = ColumnBatch(cast(TransactionAttempt, self.attempt), batch)
        for values in lists:
            values.append(cb)
        self.emitted += batch.num_rows

    def emit_direct(self, task: int, values: tuple[Any, ...], stream: str = "default", *, rows: int = 1) -> None:
        """Emit ``values`` to task ``task`` of each consumer of the direct ``stream``.
        ``rows``: how many tuples this counts as in ``emitted`` (an Arrow buffer holds many)."""
        targets = self._direct.get(stream)
        if targets is None:
            msg = (
                f"{self.component!r} task {self.task} used emit_direct on stream {stream!r}, "
                "which is not declared direct; declare(fields, stream, direct=True)"
            )
            raise InvalidTupleError(msg)
        self._check(values, stream)
        for n, send in targets:
            if not 0 <= task < n:
                msg = (
                    f"{self.component!r} emit_direct to task {task}, but the "
                    f"consumer has tasks 0..{n - 1}"
                )
                raise InvalidTupleError(msg)
            send(task, values)
        self.emitted += rows

    def report_error(self, error: BaseException) -> None:
        import logging

        logging.getLogger("trident").warning("%s task %d reported: %r", self.component, self.task, error)

    def _check(self, values: Any, stream: str) -> None:
        if not isinstance(values, tuple):
            if isinstance(values, list):
                values = tuple(values)
            else:
                msg = (
                    f"{self.component!r} task {self.task} emitted {values!r}; "
                    "emit a tuple, e.g. Values(self.id, ...)"
                )
                raise InvalidTupleError(msg)
        if not values or (values[0] is not self.attempt and values[0] != self.attempt):
            msg = (
                f"{self.component!r} task {self.task} emitted a tuple without its "
                f"TransactionAttempt as the first field: {values!r}; emit Values(self.id, ...) "
                "(in a BaseBasicBolt: Values(tuple[0], ...))"
            )
            raise InvalidTupleError(msg)

    # -- output --------------------------------------------------------------------------------
    def records(self) -> list[Record]:
        """``(key, payload)`` per consumer task that got tuples: ``(component, stream, task,
        values)``, with the values' message ids (None: none tracked) where tuples are
        tracked, whose lists then start again (a core spout task's, once per micro-batch)."""
        out: list[Record] = []
        tracked = self.tracked
        for r in self._routes:
            base = r.index * KEY_STRIDE
            for t, vals in enumerate(r.values):
                if not vals:
                    continue
                if tracked:
                    ids = r.ids[t]
                    out.append((base + t, (self.component, r.stream, self.task, vals,
                                           ids if any(m is not None for m in ids) else None)))
                    r.values[t], r.ids[t] = [], []
                else:
                    out.append((base + t, (self.component, r.stream, self.task, vals)))
        return out


def _slow_path(router: Router, stream: str, nfields: int) -> Callable[[Any], tuple[Any, ...]]:
    attempt = router.attempt
    comp, task = router.component, router.task

    def slow_path(values: Any) -> tuple[Any, ...]:
        """``values`` failed the inline check: a list of the right form becomes a tuple;
        anything else is an InvalidTupleError saying what is wrong."""
        if type(values) is list and len(values) == nfields and values and values[0] == attempt:
            return tuple(values)
        router._check(values, stream)
        msg = (
            f"{comp!r} task {task} emitted {len(values)} values on stream {stream!r}, which "
            f"declares {nfields} fields: {values!r}"
        )
        raise InvalidTupleError(msg)
    return slow_path


def _emit_on_direct(router: Router, stream: str) -> Callable[[tuple[Any, ...]], None]:
    comp, task = router.component, router.task

    def emit_on_direct(values: tuple[Any, ...]) -> None:
        msg = (
            f"{comp!r} task {task} used emit() on direct stream {stream!r}; "
            "use emit_direct(task, values, stream)"
        )
        raise InvalidTupleError(msg)
    return emit_on_direct


def _checked_emit(router: Router, stream: str, nfields: int, direct: bool,
                  routes: list[Callable[[tuple[Any, ...]], None]]) -> Callable[[tuple[Any, ...]], None]:
    if direct:
        return _emit_on_direct(router, stream)
    attempt = router.attempt
    slow_path = _slow_path(router, stream, nfields)

    # the check is inlined in both variants: this is the per-tuple hot path
    if len(routes) == 1:
        route = routes[0]

        def emit1(values: tuple[Any, ...]) -> None:
            if type(values) is not tuple or len(values) != nfields or (
                    values[0] is not attempt and values[0] != attempt):
                values = slow_path(values)
            route(values)
            router.emitted += 1
        return emit1

    def emit(values: tuple[Any, ...]) -> None:
        if type(values) is not tuple or len(values) != nfields or (
                values[0] is not attempt and values[0] != attempt):
            values = slow_path(values)
        for r in routes:
            r(values)
        router.emitted += 1
    return emit


class TaskContext(MetricsContext):
    """The ``context`` given to ``prepare`` (see ``transactional.bolt.TopologyContext``); its
    ``register_counter/gauge/histogram/meter`` are the user's metrics (``transactional.metrics``)."""

    def __init__(self, topology: Topology, component: ComponentSpec, task: int, phase: str,
                 states: TaskStates | None = None) -> None:
        self.topology_id = topology.topology_id
        self.component_id = component.id
        self.task_index = task
        self.num_tasks = component.parallelism
        self.phase = phase
        self._topology = topology
        #: the task's one door to state (a task with none: ``TaskStatesBase``, which refuses)
        self._states: TaskStates = states if states is not None else TaskStatesBase(component.id, task)

    def component_tasks(self, component_id: str) -> int:
        return self._topology.component(component_id).parallelism

    @property
    def task_id(self) -> int:
        """This task's global id (Storm's ``getThisTaskId``; see ``Topology.task_ids``)."""
        return self._topology.task_ids(self.component_id)[self.task_index]

    def get_component_tasks(self, component_id: str) -> list[int]:
        """The global task ids of ``component_id`` (Storm's ``getComponentTasks``), e.g.
        for ``emit_direct`` in a core topology."""
        return list(self._topology.task_ids(component_id))

    def key_value_state(self, owner: Any = None) -> Any:
        """The task's ``KeyValueState`` (stateful bolts of core topologies; the framework
        passes it to ``init_state``). ``owner``: the bolt instance that hears the
        checkpoint hooks (``pre_prepare``, ``pre_commit``, ``pre_rollback``)."""
        return self._states.key_value_state(owner)

    def window_state(self) -> Any:
        """The task's windows, kept on the driver across micro-batches (windowed bolts of
        core topologies: ``transactional.engine.core.window_keeper``)."""
        return self._states.window_state()

    def map_state(self, name: str, opaque: bool | str = False, *, ttl_secs: float | None = None,
                  ttl_from: str = "write", ttl_grace_secs: float | None = None) -> Any:
        """The map ``name`` of the topology (``opaque``: see ``state.map.map_class``).
        ``ttl_secs``: a key not written (``ttl_from="read"``: nor read) for that long,
        by the txids' recorded times, is gone (``state.map.ttl``; docs/operations.md)."""
        from state.map.ttl import Ttl, configure_ttl

        ttl = Ttl.of(ttl_secs, ttl_from, ttl_grace_secs)
        return configure_ttl(self._states.map_state(name, opaque), ttl)

    # -- states of the user's own systems (docs/states.md) -------------------------------
    @property
    def epoch(self) -> int | None:
        """The driver's epoch: every new driver of the topology takes a higher one. A
        committer that writes to its own store fences its writes with it (refuse a write
        whose epoch is below the one stored)."""
        return self._states.epoch

    def state(self, factory: Any) -> Any:
        """The state ``factory`` makes for this task (Storm's ``StateFactory.make_state``),
        kept across batches; the framework calls its ``begin_commit(txid)`` now and its
        ``commit(txid)`` after ``finish_batch``, in txid order (``transactional.engine.user_states``)."""
        return self._states.user_state(factory)


#: ``trident replay --trace``: called after each bolt task with ``(component, task, attempt,
#: payloads in, records out)`` (``set_tracer``); None: off
_TRACER: Callable[[str, int, TransactionAttempt, list[Any], list[Any]], None] | None = None


def set_tracer(tracer: Callable[[str, int, TransactionAttempt, list[Any], list[Any]], None] | None) -> None:
    """Have ``tracer`` see every bolt task this process runs: its input payloads and output
    records (``trident replay --trace`` runs its tasks in its own process); None: off."""
    global _TRACER
    _TRACER = tracer


def payload_order(p: Payload) -> tuple[str, str, int]:
    return p[0], p[1], p[2]


@dataclass(frozen=True)
class TaskKind:
    """How one kind of topology runs a bolt's task (``run_task``): its collector (the
    router a task emits into), how a task's input is fed to its bolt, what the task
    reports to the ackers, and how a bolt as the user wrote it becomes the batch bolt the
    task drives (``adapters``, by the name ``adapter_of`` gives a component). Each kind
    declares its own: ``TRANSACTIONAL_TASKS`` here, ``transactional.engine.core.task_kind.CORE_TASKS``."""

    name: str
    #: ``(topology, component, task, attempt, conf, only)`` -> the task's collector
    collector: Callable[[Topology, ComponentSpec, int, TransactionAttempt, dict[str, Any],
                         Callable[[str], bool] | None], Any]
    #: ``(bolt, topology, component, payloads, conf)`` -> tuples executed
    feed: Callable[[Any, Topology, ComponentSpec, list[Any], dict[str, Any]], int]
    #: the collector -> the task's report to the ackers (None: no acks)
    acks: Callable[[Any], Any]
    adapters: Mapping[str, Callable[[Any], Any]]
    adapter_of: Callable[[ComponentSpec], str]
    #: tasks reach the user's own states (``TaskContext.state``)
    user_states: bool = False

    def new_bolt(self, adapter: str, component: ComponentSpec) -> Any:
        """A fresh instance of ``component``'s bolt as a task drives it (adapter ``adapter``)."""
        return self.adapters[adapter](component.new_instance())


def run_task(kind: TaskKind, topology: Topology, component: ComponentSpec, bolt: Any, task: int,
             attempt: TransactionAttempt, payloads: Iterable[Any], conf: dict[str, Any], phase: str,
             states: TaskStates | None = None,
             only: Callable[[str], bool] | None = None) -> tuple[list[Record], int, int, Any]:
    """Run one task of a bolt (``bolt``: a fresh instance, as the plan's adapter made it)
    for one batch, the way topologies of ``kind`` run it: prepare with the kind's
    collector, feed it the input, finish_batch. Returns (records, tuples executed,
    emitted, the task's report to the ackers: None but in core topologies).

    Exceptions propagate; callers turn them into ``TaskFailure``. The input is taken in a
    fixed order (by source, stream, source task: Spark fetches shuffle blocks in any
    order), so a task run again emits the same tuples to the same tasks (``transactional.engine.routing``).
    """
    payloads = sorted(payloads, key=payload_order)
    task_fault(component.id, task, attempt.txid, attempt.attempt_id)
    door: TaskStates = states if states is not None else TaskStatesBase(component.id, task)
    if kind.user_states:
        door.user = TaskUserStates(conf, topology.topology_id, component.id, task, component.parallelism,
                                   attempt, door.epoch, phase)
    context = TaskContext(topology, component, task, phase, door)
    collector = kind.collector(topology, component, task, attempt, conf, only)
    bolt.prepare(conf, context, collector, attempt)
    n = kind.feed(bolt, topology, component, payloads, conf)
    bolt.finish_batch()
    if door.user is not None:
        door.user.commit()                # the states it opened: commit(txid), in txid order
    records = collector.records()
    if _TRACER is not None:
        _TRACER(component.id, task, attempt, payloads, records)
    acks = kind.acks(collector)
    if acks is None:      # a processing task of a staged counter map: its parts (transactional.engine.staged_maps)
        acks = getattr(bolt, "staged", None) or None
    return records, n, collector.emitted, acks


def feed_batch(bolt: Any, topology: Topology, component: ComponentSpec, payloads: list[Payload],
               conf: dict[str, Any]) -> int:
    """Execute every tuple of ``payloads`` (sorted) on a transactional ``bolt``; returns how many."""
    execute = bolt.execute
    # a bolt may take a whole payload's values at once (Trident's stages do): no Tuple objects;
    # it is told the source task (a window stage's watermark is per upstream partition)
    take = getattr(bolt, "execute_values", None)
    fields_of: dict[tuple[str, str], Fields] = {}
    n = 0
    for source, stream, source_task, values_list in payloads:
        if take is not None:
            took = take(values_list, source, stream, source_task)
            n += len(values_list) if took is None else took
            continue
        fields = fields_of.get((source, stream))
        if fields is None:
            fields = fields_of[(source, stream)] = topology.component(source).streams[stream].fields
        for v in values_list:
            execute(Tuple(v, fields, source, stream, source_task))
        n += len(values_list)
    return n


def _router(topology: Topology, component: ComponentSpec, task: int, attempt: TransactionAttempt,
            conf: dict[str, Any], only: Callable[[str], bool] | None) -> Router:
    return Router(topology, component, task, attempt, only)


def _no_acks(collector: Any) -> None:
    return None


def _as_it_is(bolt: Any) -> Any:
    return bolt


def _batch_or_basic(component: ComponentSpec) -> str:
    return "basic" if component.basic else "batch"


#: the task life of transactional topologies (and Trident's): a ``BaseBatchBolt`` (or a
#: committer) as it is, a transactional ``BaseBasicBolt`` through ``BasicBoltAdapter``
TRANSACTIONAL_TASKS = TaskKind("transactional", _router, feed_batch, _no_acks,
                               {"batch": _as_it_is, "basic": BasicBoltAdapter},
                               _batch_or_basic, user_states=True)
