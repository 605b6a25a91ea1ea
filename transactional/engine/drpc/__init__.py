"""Distributed RPC on the batch machinery (docs/drpc.md): the sink a spout takes its
requests from (``sink_for``: the request queues of ``LocalDRPC``,
``transactional.engine.drpc.queue``, or the DRPC servers through
``transactional.engine.drpc.remote``), the spout that carries requests in batches,
CoordinatedBolt's per-request bookkeeping, and the bolt that returns results.

A DRPC request is carried by a batch (a txid): the spout's coordinator takes up to
``drpc_batch_size`` waiting requests, and they become the batch's metadata (stored before
the batch runs, so a replay re-runs exactly those requests). The emitter sends each
request ``(attempt, id, args)`` to the first bolt, and ``(attempt, id, args, attempts,
origin)`` (the request's attempts so far; the server it came from, or "") on the ids
stream to every task of every bolt and to the return bolt.

``RequestBolt`` is Storm's CoordinatedBolt over a batch task: it makes one instance of the
user's bolt per request that reaches the task, and at the end of the task's partition --
when the task has every tuple of the batch, hence of each of its requests -- it calls
``finish_batch`` (and ``finished_id``) once per request of the batch, also for requests no
tuple of which came to this task. What the user's bolt raises for one request fails that
request only (a tuple on the failed stream), not the batch.

``ReturnResults`` is a committer: in the commit phase, in txid order, it answers each
request of the batch once -- the first result of the last bolt, or the error -- and puts a
failed request back in its queue until it failed ``max_attempts`` times.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
from typing import Any

from transactional.bolt import BaseBasicBolt, BaseBatchBolt, BasicBoltAdapter, Committer
from transactional.engine.drpc.queue import _LOCAL, DEFAULT_TIMEOUT_SECS, RequestQueue, _LocalSink, local_queues
from transactional.engine.drpc.sink import Entry, Sink
from transactional.engine.wakeup import WakesDriver
from transactional.exceptions import ConfigError, InvalidTupleError
from transactional.spout import Coordinator, Emitter, TransactionalSpout
from transactional.tuples import Fields, TransactionAttempt, Tuple

__all__ = ["ATTEMPT", "DEFAULT_TIMEOUT_SECS", "DRPCSpout", "FAILED_STREAM", "IDS_STREAM", "RETURN_ID", "SPOUT_ID",
           "RequestBolt", "RequestQueue", "ReturnResults", "driver_rules", "drpc_spouts", "local_queues", "on_driver",
           "sink_for"]
log = logging.getLogger("trident")

ATTEMPT = "__attempt"          # the hidden first field of every DRPC tuple in the engine
IDS_STREAM = "__drpc_ids"      # spout -> every task: the requests of the batch
FAILED_STREAM = "__drpc_failed"  # every bolt -> return-results: a request failed in a task
SPOUT_ID = "prepare-request"
RETURN_ID = "return-results"
#: the remote sinks of this process: (servers, function) -> sink
_REMOTE: dict[tuple[Any, ...], Sink] = {}
_REMOTE_LOCK = threading.Lock()


def sink_for(source: str, function: str, conf: dict[str, Any]) -> Sink:
    """The sink of ``function`` for a topology made with source ``source``: a
    ``LocalDRPC``'s queue ("local:<id>"), or the DRPC servers of ``conf["drpc.servers"]``
    ("remote"). ``ConfigError`` when a remote topology has no server configured, or a local
    one runs where its ``LocalDRPC`` is not (another process)."""
    if source.startswith("local:"):
        queues = _LOCAL.get(source)
        if queues is None or function not in queues:
            msg = (f"DRPC function {function!r} was made with create_local_topology(drpc) for a LocalDRPC of "
                   "another process: run it in the process that made the LocalDRPC (LocalCluster), or build it "
                   "with create_remote_topology() and set TopologyConfig.drpc_servers")
            raise ConfigError(msg)
        return _LocalSink(queues[function])
    servers = tuple(conf.get("drpc.servers") or ())
    if not servers:
        msg = (f"DRPC function {function!r} is a remote topology (create_remote_topology(), or new_drpc_stream "
               "without a LocalDRPC) but TopologyConfig.drpc_servers is empty: name the `trident drpc` servers, "
               "e.g. TopologyConfig(drpc_servers=['127.0.0.1:3774']) (TRIDENT_DRPC_SERVERS for `trident run`)")
        raise ConfigError(msg)
    with _REMOTE_LOCK:
        key = (servers, function, conf.get("drpc.token"))
        sink = _REMOTE.get(key)
        if sink is None:
            from transactional.engine.drpc.remote import RemoteSink

            sink = _REMOTE[key] = RemoteSink(servers, function, conf.get("drpc.token"))
        return sink


def drpc_spouts(topology: Any) -> list[DRPCSpout]:
    """The DRPC spouts of ``topology`` (instances, recognised by type: ``DRPCSpout`` and
    its subclasses), for the run's settings and ``LocalCluster``'s set-up."""
    return [s for s in (c.new_instance() for c in topology.spouts) if isinstance(s, DRPCSpout)]


def driver_rules(topology: Any, most: int) -> dict[str, Callable[[Any], int | None]]:
    """The DRPC spouts' part of the rule of which batches run their processing in the
    driver's process (``transactional.engine.placement``): spout id -> a test of that spout's
    metadata in a batch, giving its number of calls, or None when it holds more than ``most``."""
    if most <= 0:
        return {}

    def calls(m: Any) -> int | None:
        n = len((m or {}).get("requests", ()))
        return n if n <= most else None
    return {c.id: calls for c in topology.spouts if isinstance(c.new_instance(), DRPCSpout)}


def on_driver(topology: Any, conf: dict[str, Any]) -> Callable[[Any], bool] | None:
    """Which batches of ``topology`` may run their processing in the driver's process
    rather than as a Spark job, for ``conf["drpc.on.driver.max.calls"]`` = N (the engine
    sets it from ``TopologyConfig.drpc_on_driver_max_calls``; absent or 0: none): a test of
    a batch's metadata (``{spout_id: meta}``), true when it carries only DRPC calls, at most
    N; None when no batch does."""
    most = int(conf.get("drpc.on.driver.max.calls") or 0)
    rules = driver_rules(topology, most)
    if not rules:
        return None

    def small(meta: Any) -> bool:
        calls = 0
        for sid, m in (meta or {}).items():
            if m is None:
                continue
            n = rules[sid](m) if sid in rules else None
            if n is None:
                return False
            calls += n
        return calls <= most
    return small


# -- the spout --------------------------------------------------------------------------------------

class DRPCSpout(TransactionalSpout):
    """The requests of ``function`` as batches (Storm's DRPCSpout and PrepareRequest). Each
    batch's metadata is ``{"requests": [[id, args, attempts, origin], ...]}``."""

    def __init__(self, function: str, source: str) -> None:
        self.function = function
        self.source = source

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> Coordinator:
        sink = sink_for(self.source, self.function, conf)
        sink.open()
        return _DRPCCoordinator(sink, int(conf.get("drpc.batch.size", 256)))

    def get_emitter(self, conf: dict[str, Any], context: Any) -> Emitter:
        return _DRPCEmitter()

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields(ATTEMPT, "id", "args"))
        declarer.declare(Fields(ATTEMPT, "id", "args", "attempts", "origin"), IDS_STREAM)


class _DRPCCoordinator(Coordinator, WakesDriver):
    def __init__(self, sink: Sink, batch_size: int) -> None:
        self.sink = sink
        self.batch_size = batch_size
        self._closed = False
        self._wake: Callable[[], None] | None = None
        self._busy: Callable[[], bool] | None = None

    def wake_on_input(self, wake: Callable[[], None] | None) -> None:
        """A request arriving at the sink wakes the driver (``transactional.engine.wakeup``)."""
        if self._wake is not None:
            self.sink.on_input(self._wake, listen=False)
        self._wake = wake
        if wake is not None:
            self.sink.on_input(wake)

    def gather_while(self, busy: Callable[[], bool] | None) -> None:
        """While ``busy()`` (a batch of the run is processing), requests gather for the next
        batch: ``is_ready`` is true only once a full batch (``drpc_batch_size``) waits."""
        self._busy = busy

    def is_ready(self) -> bool:
        if not self.sink.has_requests():
            return False
        if self._busy is not None and self._busy():
            waiting = self.sink.waiting()
            return waiting is not None and waiting >= self.batch_size
        return True

    def initialize_transaction(self, txid: int, prev_meta: Any) -> Any:
        return {"requests": self.sink.take(self.batch_size)}

    def close(self) -> None:
        """The run ended: a remote sink tells its servers this driver no longer serves the
        function (their callers get 503 rather than wait for the timeout)."""
        if not self._closed:
            self._closed = True
            self.wake_on_input(None)
            self._busy = None
            self.sink.close()


class _DRPCEmitter(Emitter):
    def emit_batch(self, tx: TransactionAttempt, meta: Any, collector: Any) -> None:
        for rid, args, attempts, origin in (meta or {}).get("requests", ()):
            collector.emit((tx, rid, args))
            collector.emit((tx, rid, args, attempts, origin), IDS_STREAM)


# -- CoordinatedBolt over a batch task --------------------------------------------------------------

class _RequestCollector:
    """The collector a user's bolt emits into for one request: checks that the request id
    comes first and puts the batch's attempt before it."""

    __slots__ = ("_router", "_attempt", "_id", "_component")

    def __init__(self, router: Any, attempt: TransactionAttempt, request_id: str, component: str) -> None:
        self._router = router
        self._attempt = attempt
        self._id = request_id
        self._component = component

    def _checked(self, values: Any) -> tuple[Any, ...]:
        if not isinstance(values, (tuple, list)) or not values or values[0] != self._id:
            msg = (f"DRPC bolt {self._component!r} emitted {values!r} for request {self._id!r} without the request "
                   "id as its first value: emit Values(id, ...) with the id prepare() was given (a basic bolt: "
                   "tuple[0])")
            raise InvalidTupleError(msg)
        return (self._attempt, *values)

    def emit(self, values: Any, stream: str = "default") -> None:
        """Emit ``values`` (the request id first) on ``stream``."""
        self._router.emit(self._checked(values), stream)

    def emit_direct(self, task: int, values: Any, stream: str = "default") -> None:
        """Emit ``values`` to task ``task`` of the direct ``stream``."""
        self._router.emit_direct(task, self._checked(values), stream)

    def report_error(self, error: BaseException) -> None:
        self._router.report_error(error)


class _Declarer:
    def __init__(self, outer: Any) -> None:
        self.outer = outer

    def declare(self, fields: Any, stream: str = "default", direct: bool = False) -> None:
        self.outer.declare(Fields(ATTEMPT, *Fields(fields)), stream, direct)

    def declare_stream(self, stream: str, fields: Any, direct: bool = False) -> None:
        self.declare(fields, stream, direct)


class RequestBolt(BaseBatchBolt):
    """Storm's CoordinatedBolt, on a batch task: one instance of ``bolt`` per request of
    the batch (``prepare(conf, context, collector, request_id)``), ``execute`` with the
    request's tuples (the batch's attempt taken off), then ``finish_batch`` and
    ``finished_id(id)`` once per request of the batch that this task is told of on the ids
    stream, whether or not a tuple of it came: every task of a middle bolt (all grouping),
    and for the last bolt the one task the request id hashes to (fields grouping on
    ``id``), as Storm's last CoordinatedBolt finishes a request only on the task that got
    its id tuple."""

    def __init__(self, bolt: Any, component: str) -> None:
        self.bolt = bolt
        self.component = component
        self.describe_as = type(bolt).__name__

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.conf, self.context, self.router, self.attempt = conf, context, collector, id
        self.requests: dict[str, None] = {}              # the batch's requests, in order
        self.instances: dict[str, Any] = {}
        self.failed: dict[str, BaseException] = {}
        self.fields: dict[tuple[str, str], Fields] = {}

    def _instance(self, rid: str) -> Any:
        inst = self.instances.get(rid)
        if inst is None:
            inst = copy.deepcopy(self.bolt)
            if isinstance(inst, BaseBasicBolt):
                inst = BasicBoltAdapter(inst)
            inst.prepare(self.conf, self.context, _RequestCollector(self.router, self.attempt, rid, self.component),
                         rid)
            self.instances[rid] = inst
        return inst

    def execute(self, tuple: Tuple) -> None:
        rid = tuple.values[1]
        if tuple.source_stream == IDS_STREAM:
            self.requests[rid] = None
            return
        if rid in self.failed:
            return
        key = (tuple.source_component, tuple.source_stream)
        fields = self.fields.get(key)
        if fields is None:
            fields = self.fields[key] = Fields(*tuple.fields[1:])
        try:
            self._instance(rid).execute(Tuple(tuple.values[1:], fields, tuple.source_component,
                                              tuple.source_stream, tuple.source_task))
        except Exception as e:  # noqa: BLE001 - fails this request only (see the module docstring)
            self.failed[rid] = e

    def finish_batch(self) -> None:
        for rid in self.requests:
            if rid not in self.failed:
                try:
                    inst = self._instance(rid)
                    inst.finish_batch()
                    finished = getattr(inst.bolt if isinstance(inst, BasicBoltAdapter) else inst, "finished_id",
                                       None)
                    if finished is not None:
                        finished(rid)
                except Exception as e:  # noqa: BLE001 - as in execute
                    self.failed[rid] = e
        for rid, error in self.failed.items():
            fatal = isinstance(error, InvalidTupleError)
            where = f"{self.component} task {self.context.task_index}"
            self.router.emit((self.attempt, rid, f"{where}: {type(error).__name__}: {error}", fatal), FAILED_STREAM)

    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(_Declarer(declarer))
        declarer.declare(Fields(ATTEMPT, "id", "error", "fatal"), FAILED_STREAM)


class ReturnResults(BaseBatchBolt, Committer):
    """Answers each request of a batch once, in the commit phase (Storm's JoinResult and
    ReturnResults): the first ``(id, result)`` of the last bolt as text (``render``), the
    error of a request that failed ``max_attempts`` times (or broke the tuple contract), or
    queues a failed request again."""

    def __init__(self, function: str, source: str, last: str, render: Callable[[list[Any]], str] | None = None,
                 per_request: bool = False) -> None:
        self.function = function
        self.source = source
        self.last = last
        self.render = render
        #: a Trident stream (``render``) whose rows carry their request id (many requests a batch)
        self.per_request = per_request

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.sink = sink_for(self.source, self.function, conf)
        self.max_attempts = int(conf.get("topology.max.attempts", 5))
        self.entries: dict[str, Entry] = {}
        self.results: dict[str, list[Any]] = {}
        self.errors: dict[str, tuple[str, bool]] = {}

    def execute(self, tuple: Tuple) -> None:
        v = tuple.values
        if tuple.source_stream == IDS_STREAM:
            self.entries[v[1]] = [v[1], v[2], v[3], v[4]]
        elif tuple.source_stream == FAILED_STREAM:
            self.errors.setdefault(v[1], (v[2], v[3]))
        elif self.render is not None and not self.per_request:   # one request per batch, rows without its id
            self.results.setdefault("", []).append(v[1:])
        else:
            self.results.setdefault(v[1], []).append(v[2:])

    def finish_batch(self) -> None:
        for rid, entry in self.entries.items():
            origin = entry[3]
            error = self.errors.get(rid)
            if error is not None:
                attempts = entry[2] + 1
                message, fatal = error
                if fatal or attempts >= self.max_attempts:
                    tried = "" if fatal else f" (failed {attempts} times: max_attempts={self.max_attempts})"
                    self.sink.fail(rid, f"{self.function}: {message}{tried}", origin)
                else:
                    log.info("DRPC %s request %s failed (attempt %d of max_attempts=%d), queued again: %s",
                             self.function, rid, attempts, self.max_attempts, message.splitlines()[0])
                    self.sink.retry(entry, attempts)
                continue
            rows = self.results.get("" if self.render is not None and not self.per_request else rid)
            if self.render is not None:
                self.sink.answer(rid, self.render(rows or []), origin)
            elif rows:
                self.sink.answer(rid, str(rows[0][0]), origin)
            else:
                self.sink.fail(rid, f"{self.function}: the last bolt {self.last!r} emitted no result for the "
                                    "request; emit Values(id, result) from it", origin)

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""

