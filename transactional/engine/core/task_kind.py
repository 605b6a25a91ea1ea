"""The task life of core Storm topologies (``CORE_TASKS``, a
``transactional.engine.task.TaskKind``): a ``CoreRouter`` is a task's collector, its
input is fed as ``CoreTuple``s (then a tick, when due), it reports its acks, and its
bolts run through the adapters of ``transactional.engine.core.task`` and
``transactional.engine.core.window_keeper``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transactional.engine.core.task import TICKS, CoreRouter, adapter, feed, task_seed, tick_tuple
from transactional.engine.core.window_keeper import Windowed
from transactional.engine.task import TaskKind
from transactional.topology import ComponentSpec, Topology
from transactional.tuples import TransactionAttempt


def _router(topology: Topology, component: ComponentSpec, task: int, attempt: TransactionAttempt,
            conf: dict[str, Any], only: Callable[[str], bool] | None) -> CoreRouter:
    """The task's ``CoreRouter``, its tuple ids seeded by the run, txid, attempt, component
    and task (``task_seed``)."""
    seed = task_seed(int(conf.get("topology.run.salt", 0)), attempt.txid, attempt.attempt_id, component.id, task)
    return CoreRouter(topology, component, task, seed, only)


def _feed(bolt: Any, topology: Topology, component: ComponentSpec, payloads: list[Any], conf: dict[str, Any]) -> int:
    """The micro-batch's tuples, then a tick when the bolt gets one (``transactional.ticks``)."""
    n = feed(bolt, topology, payloads)
    tick = conf.get(TICKS, {}).get(component.id)
    if tick is not None:
        bolt.execute(tick_tuple(tick, n))
    return n


def _acks(router: CoreRouter) -> tuple[dict[int, int], list[int]]:
    return router.report()


def _rich(bolt: Any) -> Any:
    return adapter("rich", bolt)


def _basic(bolt: Any) -> Any:
    return adapter("basic", bolt)


def _stateful(bolt: Any) -> Any:
    return adapter("stateful", bolt)


def _core_adapter(component: ComponentSpec) -> str:
    return str(component.core)


#: the task life of core topologies' bolts (``ComponentSpec.core`` names the adapter)
CORE_TASKS = TaskKind("core", _router, _feed, _acks,
                      {"rich": _rich, "basic": _basic, "stateful": _stateful,
                       "windowed": Windowed, "swindowed": Windowed},   # windows kept on the driver
                      _core_adapter)
