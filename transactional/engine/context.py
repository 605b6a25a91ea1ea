"""What a run's collaborators need of it (``RunContext``), instead of the whole ``Engine``.

The engine (``transactional.engine.driver.Engine``) builds one per locked run and hands it
to the kind's runner (``transactional.engine.runner``), its commit protocol
(``transactional.engine.commit``) and the attempts in flight (``transactional.engine.attempts``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transactional.config import TopologyConfig
from transactional.engine.executors import Executor
from transactional.engine.maps import StateRegistry
from transactional.engine.plan import ExecutionPlan
from transactional.engine.stage_tasks import Shared
from transactional.result import RunResult
from transactional.topology import Topology


@dataclass(frozen=True)
class RunContext:
    """One run of a topology as its collaborators see it: the topology (with the task
    counts of this run) and its compiled ``plan``; the ``config`` and the ``conf`` its
    tasks see; its user ``states`` (maps); the ``result`` it fills; the driver's wall
    ``clock`` (each txid's time); and the executor that runs commit stages in this
    process (``driver_executor``, with the topology as its tasks reach it, ``driver_shared``)."""

    topology: Topology
    plan: ExecutionPlan
    config: TopologyConfig
    conf: dict[str, Any]
    states: StateRegistry
    result: RunResult
    clock: Callable[[], float]
    driver_executor: Executor
    driver_shared: Shared
