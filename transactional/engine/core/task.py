"""The task side of core Storm topologies: tuples with message ids, the collectors of
spouts and bolts (routing by grouping, anchoring, acks), and the adapters that run rich,
basic and stateful bolts on the batch path (run by ``transactional.engine.task.run_task``
as ``transactional.engine.core.task_kind.CORE_TASKS`` says).

A core record payload is ``(source, stream, source_task, [values, ...], ids)`` where
``ids`` is None (no tuple tracked) or one *message id* per tuple: ``{root: id}`` for every
spout tuple whose tree the tuple is in (``transactional.engine.core.acker``), or None for an
untracked tuple. Values carry no TransactionAttempt.

A task's acks are XOR-combined per root before they leave the task (XOR is associative
and commutative, so the acker sees the same ack val as from one report per tuple): the
task reports ``({root: xor}, [failed roots])``. Its tuple ids come from a generator
seeded by the run, txid, attempt, component and task, and its input is taken in a fixed
order, so a task Spark runs again (a lost executor) reports and emits exactly what the
first run did.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transactional.bolt import BaseBatchBolt
from transactional.engine.core.acker import TupleIds, new_id
from transactional.engine.task import Route, Router
from transactional.exceptions import FailedException, InvalidTupleError
from transactional.ticks import TICK_COMPONENT, TICK_FREQ_KEY, TICK_STREAM
from transactional.topology import ComponentSpec, Topology
from transactional.tuples import Fields, Tuple


class CoreTuple(Tuple):
    """A tuple of a core topology: a ``Tuple`` with its message id (``{root: id}``, or
    None when untracked) and its position in the task's input (for anchoring)."""

    __slots__ = ("message_id", "key")

    def __init__(self, values: tuple[Any, ...], fields: Fields, source_component: str, source_stream: str,
                 source_task: int, message_id: dict[int, int] | None, key: int) -> None:
        super().__init__(values, fields, source_component, source_stream, source_task)
        self.message_id = message_id
        self.key = key


def _anchor_pairs(component: str, task: int, anchors: Any) -> list[tuple[int, Mapping[int, int]]]:
    if anchors is None:
        return []
    if isinstance(anchors, CoreTuple):
        return [(anchors.key, anchors.message_id or {})]
    if isinstance(anchors, (list, tuple)) and all(isinstance(a, CoreTuple) for a in anchors):
        return [(a.key, a.message_id or {}) for a in anchors]
    msg = (f"{component!r} task {task}: anchors must be an input tuple of this task or a list of them; "
           f"got {anchors!r}")
    raise InvalidTupleError(msg)


class CoreRouter:
    """The ``OutputCollector`` of a core bolt task: routes emits by grouping, gives each
    copy of an anchored tuple its own ids, and XOR-combines the task's acks per root."""

    def __init__(self, topology: Topology, component: ComponentSpec, task: int, seed: int,
                 only: Callable[[str], bool] | None = None) -> None:
        self.outputs = Router(topology, component, task, None, only, seed=seed)
        self.component = component.id
        self.task = task
        self.emitted = 0
        self.ids = TupleIds(random.Random(seed))
        self.acks: dict[int, int] = {}        # root -> XOR of this task's reports
        self.fails: set[int] = set()
        self._done: set[int] = set()          # input keys acked or failed
        self.errors: list[str] = []
        # stream -> (field count, routes) of the streams emit() may take without more checks
        self._fast = {st: (n, routes) for st, (n, direct, routes) in self.outputs.streams.items() if not direct}

    def emit(self, values: tuple[Any, ...], anchors: Any = None, stream: str = "default") -> list[int]:
        """See ``transactional.core.OutputCollector.emit``."""
        fast = self._fast.get(stream)
        if fast is not None and type(values) is tuple and len(values) == fast[0]:   # the per-tuple hot path
            routes = fast[1]
        else:
            values, routes = self.outputs.stream(stream, values, False)
        pairs: Sequence[tuple[int, Mapping[int, int]]]
        if type(anchors) is CoreTuple:
            if anchors.key in self._done:
                self._anchors(anchors)                  # raises, naming the mistake
            msg = anchors.message_id
            pairs = ((anchors.key, msg),) if msg else ()
        else:
            pairs = self._anchors(anchors) if anchors is not None else ()
        anchored = self.ids.anchored
        tasks = []
        for r in routes:
            for t in r.choose(values):
                r.values[t].append(values)
                r.ids[t].append((anchored(pairs) or None) if pairs else None)
                tasks.append(r.base + t)
        self.emitted += 1
        return tasks

    def emit_direct(self, task: int, values: tuple[Any, ...], anchors: Any = None, stream: str = "default") -> None:
        """See ``transactional.core.OutputCollector.emit_direct``."""
        values, routes = self.outputs.stream(stream, values, True)
        r, t = self.outputs.direct_task(routes, task)
        pairs = self._anchors(anchors)
        r.values[t].append(values)
        r.ids[t].append(self.ids.anchored(pairs) or None if pairs else None)
        self.emitted += 1

    def _anchors(self, anchors: Any) -> Sequence[tuple[int, Mapping[int, int]]]:
        pairs = _anchor_pairs(self.component, self.task, anchors)
        for key, _ in pairs:
            if key in self._done:
                msg = (f"{self.component!r} task {self.task} emitted a tuple anchored to an input it had already "
                       "acked or failed; emit (anchored) before you ack the input")
                raise InvalidTupleError(msg)
        return pairs

    def ack(self, tuple: CoreTuple) -> None:
        """See ``transactional.core.OutputCollector.ack``; a second ack or fail of one input is ignored."""
        key, done = tuple.key, self._done
        if key in done:
            return
        done.add(key)
        msg = tuple.message_id
        if msg:
            acks = self.acks
            get = acks.get
            for root, v in self.ids.report(key, msg).items():
                acks[root] = get(root, 0) ^ v

    def fail(self, tuple: CoreTuple) -> None:
        """See ``transactional.core.OutputCollector.fail``."""
        if tuple.key in self._done:
            return
        self._done.add(tuple.key)
        if tuple.message_id:
            self.ids.forget(tuple.key)
            self.fails.update(tuple.message_id)

    def report_error(self, error: BaseException) -> None:
        """See ``transactional.core.OutputCollector.report_error``."""
        import logging

        logging.getLogger("trident").warning("%s task %d reported: %r", self.component, self.task, error)
        self.errors.append(f"{type(error).__name__}: {error}")

    def records(self) -> list[tuple[int, tuple[Any, ...]]]:
        return self.outputs.records()

    def report(self) -> tuple[dict[int, int], list[int]]:
        """What this task sends the ackers: ``({root: xor of its acks}, [failed roots])``."""
        return {r: v for r, v in self.acks.items() if v}, sorted(self.fails)


def task_seed(salt: int, txid: int, attempt: int, component: str, task: int) -> int:
    """The seed of a task's tuple ids: the same for a task Spark runs again."""
    return zlib.crc32(f"{salt}:{txid}:{attempt}:{component}:{task}".encode()) << 32 | (salt & 0xFFFFFFFF)


#: The key, in a micro-batch's conf, of the bolts that get a tick: ``{component: interval}``.
TICKS = "topology.ticks"
_TICK_FIELDS = Fields("rate_secs")


def tick_tuple(freq: float, key: int) -> CoreTuple:
    """A tick tuple (``transactional.ticks``): untracked, from ``__system``'s ``__tick`` stream."""
    return CoreTuple((freq,), _TICK_FIELDS, TICK_COMPONENT, TICK_STREAM, -1, None, key)


def tick_freq(component: ComponentSpec, default: float | None) -> float | None:
    """A bolt's tick interval in seconds: its own setting, else the topology's."""
    v = component.conf.get(TICK_FREQ_KEY, default)
    return None if v is None else float(v)


def feed(bolt: Any, topology: Topology, payloads: list[tuple[Any, ...]]) -> int:
    """Execute every tuple of ``payloads`` (sorted) on a core ``bolt``; returns how many."""
    execute = bolt.execute
    key = n = 0
    fields_of: dict[tuple[str, str], Fields] = {}
    for source, stream, source_task, values_list, ids in payloads:
        fields = fields_of.get((source, stream))
        if fields is None:
            fields = fields_of[(source, stream)] = topology.component(source).streams[stream].fields
        if ids is None:
            for v in values_list:
                execute(CoreTuple(v, fields, source, stream, source_task, None, key))
                key += 1
        else:
            for v, m in zip(values_list, ids, strict=True):
                execute(CoreTuple(v, fields, source, stream, source_task, m, key))
                key += 1
        n += len(values_list)
    return n


# -- spouts (on the driver) ------------------------------------------------------------------

class SpoutCollector:
    """The ``SpoutOutputCollector`` of one core spout task (on the driver). A tuple
    emitted with a ``msg_id`` while tracking is on becomes a root: a new random id, and one
    new id per copy sent to a task (the acker's init val is their XOR); ``roots`` collects
    ``(root, val, msg_id)`` for the driver to register. With tracking off (``ackers=0``)
    the ``msg_id`` goes to ``acked_at_once``: the spout gets ``ack`` right after emitting."""

    def __init__(self, outputs: Router, tracking: bool) -> None:
        self.outputs = outputs
        self.tracking = tracking
        self.roots: list[tuple[int, int, Any]] = []
        self.acked_at_once: list[Any] = []
        self.emitted = 0

    def emit(self, values: tuple[Any, ...], msg_id: Any = None, stream: str = "default") -> list[int]:
        """Send ``values`` to the subscribers of ``stream``; returns the task ids it went to."""
        values, routes = self.outputs.stream(stream, values, False)
        return self._send(values, msg_id, [(r, t) for r in routes for t in r.choose(values)])

    def emit_direct(self, task: int, values: tuple[Any, ...], msg_id: Any = None, stream: str = "default") -> None:
        """Send ``values`` to the task with id ``task`` of the direct ``stream``'s subscribers."""
        values, routes = self.outputs.stream(stream, values, True)
        self._send(values, msg_id, [self.outputs.direct_task(routes, task)])

    def _send(self, values: tuple[Any, ...], msg_id: Any, targets: list[tuple[Route, int]]) -> list[int]:
        self.emitted += 1
        tracked = msg_id is not None and self.tracking
        root = val = 0
        if tracked:
            root = new_id()
        for r, t in targets:
            r.values[t].append(values)
            if tracked:
                cid = new_id()
                val ^= cid
                r.ids[t].append({root: cid})
            else:
                r.ids[t].append(None)
        if tracked:
            self.roots.append((root, val, msg_id))
        elif msg_id is not None:
            self.acked_at_once.append(msg_id)
        return [r.base + t for r, t in targets]

    def take(self) -> tuple[list[tuple[int, int, Any]], list[Any]]:
        """The roots and at-once acks emitted since the last call."""
        roots, at_once = self.roots, self.acked_at_once
        self.roots, self.acked_at_once = [], []
        return roots, at_once


# -- adapters: core bolts on the one task runner ---------------------------------------------

class _Rich(BaseBatchBolt):
    """A ``BaseRichBolt`` on the batch path: prepare with the router as its collector,
    execute each tuple, cleanup at the end of the task's micro-batch."""

    def __init__(self, bolt: Any) -> None:
        self.bolt = bolt

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.bolt.prepare(conf, context, collector)
        self.execute = self.bolt.execute       # type: ignore[method-assign]  # the per-tuple hot path

    def finish_batch(self) -> None:
        self.bolt.cleanup()

    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(declarer)


class _Stateful(_Rich):
    """A ``BaseStatefulBolt``: ``init_state`` with the task's KeyValueState after prepare."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        super().prepare(conf, context, collector, id)
        self.bolt.init_state(context.key_value_state(owner=self.bolt))


class _AnchoringCollector:
    """A basic bolt's collector: every emit is anchored to the input being executed."""

    __slots__ = ("router", "input")

    def __init__(self, router: CoreRouter) -> None:
        self.router = router
        self.input: CoreTuple | None = None

    def emit(self, values: tuple[Any, ...], stream: str = "default") -> list[int]:
        """Emit ``values`` anchored to the current input."""
        return self.router.emit(values, self.input, stream)

    def emit_direct(self, task: int, values: tuple[Any, ...], stream: str = "default") -> None:
        """Emit ``values`` to task id ``task``, anchored to the current input."""
        self.router.emit_direct(task, values, self.input, stream)

    def report_error(self, error: BaseException) -> None:
        """Log ``error`` against this task."""
        self.router.report_error(error)


class _Basic(BaseBatchBolt):
    """A ``BaseBasicBolt`` in a core topology: emits anchored to the input, which is acked
    when ``execute`` returns and failed when it raises ``FailedException`` (Storm's
    ``BasicBoltExecutor``)."""

    def __init__(self, bolt: Any) -> None:
        self.bolt = bolt

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.bolt.prepare(conf, context)
        self.router: CoreRouter = collector
        self.out = _AnchoringCollector(collector)

    def execute(self, tuple: Any) -> None:
        self.out.input = tuple
        try:
            self.bolt.execute(tuple, self.out)
        except FailedException as e:
            self.router.fail(tuple)
            if str(e):
                self.router.report_error(e)
            return
        self.router.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(declarer)


def adapter(how: str, bolt: Any) -> BaseBatchBolt:
    """The batch-path form of a core bolt (``ComponentSpec.core``)."""
    return {"rich": _Rich, "stateful": _Stateful, "basic": _Basic}[how](bolt)
