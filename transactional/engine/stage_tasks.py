"""The task functions the executors run: one spout emitter task, one bolt task.

``emit_task`` / ``bolt_task`` run wherever the executor runs them; a bolt task goes
through the one task runner (``transactional.engine.task.run_task``) as its stage's
task kind and adapter say.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.plan import COMMIT, PROCESSING, Stage, new_bolt
from transactional.engine.reports import report
from transactional.engine.spout_planner import SpoutContext, emit_spout_task, fetch_group, spout_kind
from transactional.engine.task import Router, TaskFailure, run_task
from transactional.metrics import collecting
from transactional.topology import Topology
from transactional.tuples import TransactionAttempt


class Shared(Protocol):
    """The topology as tasks reach it (a Spark broadcast; a plain holder in process)."""

    value: Topology


_SPOUTS: dict[tuple[str, str], Any] = {}
_SPOUTS_GUARD = threading.Lock()


def _spout_instance(run_id: str, spec: Any) -> Any:
    """The spout object of this run in this process (emitters are cached on it)."""
    with _SPOUTS_GUARD:
        s = _SPOUTS.get((run_id, spec.id))
        if s is None:
            for old in [k for k in _SPOUTS if k[0] != run_id]:
                del _SPOUTS[old]
            s = _SPOUTS[(run_id, spec.id)] = spec.new_instance()
        return s


class _EmitTask:
    """The emitter tasks of one spout stage for one attempt, as a task function
    ``(task, records) -> records``; ``together(tasks)`` says this process runs ``tasks``
    next, one after the other (the first of them then reads all their partitions at once,
    ``transactional.engine.spout_planner.fetch_group``)."""

    def __init__(self, shared: Shared, component_id: str, run_id: str, attempt: TransactionAttempt, meta: Any,
                 cleanup: int, conf: dict[str, Any], acc: Any) -> None:
        self.shared, self.component_id, self.run_id, self.attempt = shared, component_id, run_id, attempt
        self.meta, self.cleanup, self.conf, self.acc = meta, cleanup, conf, acc
        self._group: Sequence[int] = ()
        self._fetched: dict[int, Any] | None = None

    def together(self, tasks: Sequence[int]) -> None:
        """``tasks`` run next in this process, in this order (``task_groups.together``)."""
        self._group, self._fetched = tasks, None

    def _fetched_for(self, task: int, spout: Any, ctx: SpoutContext) -> dict[int, Any] | None:
        """What the group read for ``task``: read when its first task runs."""
        if task not in self._group:
            return None
        if self._fetched is None:
            self._fetched = {}     # once, even if the read raises (each task then reads its own)
            self._fetched = fetch_group(self.run_id, spout, spout_kind(spout), self.conf, ctx, self._group,
                                        self.attempt, self.meta) or {}
        return self._fetched

    def __call__(self, task: int, _: Iterable[Any]) -> Iterator[Any]:
        if self.meta is None:
            return iter(())
        t0 = time.perf_counter()
        attempt = self.attempt
        with paused_gc():   # loading the topology and emitting build many small objects
            topology: Topology = self.shared.value
            spec = topology.component(self.component_id)
            router = Router(topology, spec, task, attempt)
            try:
                spout = _spout_instance(self.run_id, spec)
                ctx = SpoutContext(topology.topology_id, spec.id, task, spec.parallelism)
                actual = emit_spout_task(self.run_id, spout, spout_kind(spout), self.conf, ctx, attempt, self.meta,
                                         router, self.cleanup, self._fetched_for(task, spout, ctx))
            except Exception as e:  # noqa: BLE001 - reported to the driver as data
                self.acc.add(report(spec.id, task, failure=TaskFailure.of(e, spec.id, task, attempt)))
                return iter(())
        self.acc.add(report(spec.id, task, 0, router.emitted, actual=actual, busy=time.perf_counter() - t0))
        return iter(router.records())


def emit_task(shared: Shared, component_id: str, run_id: str, attempt: TransactionAttempt, meta: Any,
              cleanup: int, conf: dict[str, Any], acc: Any) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The function of emitter task ``task`` of spout ``component_id``: emits its share of
    the batch (nothing when ``meta`` is None: the spout sits this txid out). It has
    ``together(tasks)`` (``transactional.engine.task_groups.together``)."""
    return _EmitTask(shared, component_id, run_id, attempt, meta, cleanup, conf, acc)


def bolt_task(shared: Shared, stage: Stage, attempt: TransactionAttempt, conf: dict[str, Any], acc: Any,
              phase: str = PROCESSING, states: Any = None) -> Callable[[int, Iterable[Any]], Iterator[Any]]:
    """The function of task ``task`` of a bolt: prepare, execute each input, finish_batch
    (through the stage's task runner and adapter)."""
    component_id, kind = stage.component, stage.task_kind

    def run(task: int, records: Iterable[Any]) -> Iterator[Any]:
        topology: Topology = shared.value
        spec = topology.component(component_id)
        task_states = None if states is None else states.for_task(component_id, task)
        t0 = time.perf_counter()
        try:
            # paused_gc also covers unpickling the input, which happens as it is read
            with paused_gc(), collecting(component_id, task) as metrics:
                out, n, e, acks = run_task(kind, topology, spec, new_bolt(stage, spec), task, attempt,
                                           (p for _, p in records), conf, phase, task_states)
                if task_states is not None:
                    task_states.finish()   # a committer task on an executor writes its maps
                mine = metrics.snapshot()
        except Exception as exc:  # noqa: BLE001 - reported to the driver as data
            if task_states is not None:
                task_states.abort()
            acc.add(report(component_id, task, failure=TaskFailure.of(exc, component_id, task, attempt)))
            return iter(())
        acc.add(report(component_id, task, n, e, acks=acks, busy=time.perf_counter() - t0, metrics=mine))
        if phase == COMMIT:
            crash_point("commit.after_task", txid=attempt.txid, component=component_id, task=task)
        return iter(out)
    return run
