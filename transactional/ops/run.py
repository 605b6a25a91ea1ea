"""A run as an operator sees it: the engine's run (``transactional.engine.driver``) with the
operator's tools wired in, in one place (``OperatorWatch``, an engine ``RunWatch``):

- progress lines (``transactional.ops.progress``; ``progress`` in the config, else when
  stderr is a terminal), the closing line when the run stops;
- the status page and metrics (``transactional.ops.webui``), when ``metrics_port`` is set,
  with the spouts' lag and a core topology's spout figures;
- the status record ``trident status`` shows (``transactional.ops.status``);
- ``trident deactivate|activate|kill`` (``transactional.ops.control``), heard between any
  two steps of the run and right after each commit.

``run_topology`` here is ``transactional.run_topology``: the CLI's ``trident run``,
``LocalCluster`` and a user's own code run topologies through it. The engine's
``run_topology`` runs one without any of these (``watch`` None), or with a watch of its
caller's own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from state.base import TransactionalState
from transactional.config import TopologyConfig
from transactional.engine import driver
from transactional.engine.coordinator import Action, Coordinator
from transactional.engine.runner import TopologyRunner
from transactional.ops.control import RunControl
from transactional.ops.progress import Progress
from transactional.ops.status import StatusRecorder
from transactional.ops.webui import RunObserver, attach, lag_source, spark_ui_url
from transactional.ops.webui.graph import topology_graph
from transactional.result import RunResult
from transactional.topology import Topology, TransactionalTopologyBuilder

__all__ = ["OperatorWatch", "OperatedRun", "run_topology"]


class OperatorWatch(driver.RunWatch):
    """The operator's tools on one run of the engine (see the module's docstring)."""

    def __init__(self) -> None:
        self.progress_lines: Progress | None = None
        self.observer: RunObserver | None = None      # the status page and metrics, when served
        self.recorder: StatusRecorder | None = None
        self.control: RunControl | None = None
        self.listeners: list[Callable[[Any], None]] = []

    def started(self, engine: driver.Engine) -> None:
        """Progress lines, and the status page when ``metrics_port`` is set."""
        config, topology = engine.config, engine.topology
        progress = config.progress if config.progress is not None else sys.stderr.isatty()
        if progress:
            self.progress_lines = Progress.for_topology(topology)
            engine.listeners.append(self.progress_lines)
        self.listeners = engine.listeners
        # the status page and metrics (docs/operations.md), when metrics_port is set
        self.observer = attach(engine.listeners, topology, config)

    def locked(self, engine: driver.Engine, state: TransactionalState, owner: str, runner: TopologyRunner) -> None:
        """The spouts' lag on the page, the status record, and the operator's requests heard."""
        config, topology = engine.config, engine.topology
        if self.observer is not None:
            self.observer.set_lag_source(lag_source(runner.spout_coordinators()))
        self.recorder = StatusRecorder(state, topology.shown_kind, owner, counts=runner.status_counts(),
                                       graph=topology_graph(topology), spouts=engine.result._spout_ids,
                                       max_attempts=config.max_attempts, heartbeat=True,
                                       verify=config.conf.get("trident.verify"),
                                       spark_ui=spark_ui_url if config.executor == "spark" else None)
        engine.listeners.append(self.recorder)       # the record `trident status` shows
        self.listeners = engine.listeners
        # `trident deactivate|activate|kill|rebalance`; a change of the record wakes the idle driver
        self.control = RunControl(state, owner, wake=engine.wakeup.set)
        self.control.applied = engine.applied_rebalance   # the last rebalance applied: not asked again

    def requests(self, coord: Coordinator, now: float, fresh: bool = False) -> list[Action]:
        """What ``trident deactivate|activate|kill`` (or the page's controls) asked."""
        return self.control.actions(coord, now, fresh=fresh) if self.control is not None else []

    def between(self, runner: TopologyRunner, now: float) -> None:
        """A core topology's spout figures to the status page."""
        if self.observer is not None:
            runner.show(self.observer, now)

    def rebalance_asked(self) -> dict[str, Any] | None:
        """The rebalance ``trident rebalance`` asked that stopped the loop (``RunControl``)."""
        return self.control.rebalance if self.control is not None else None

    def stopped(self) -> None:
        """The closing progress line."""
        if self.progress_lines is not None:
            self.progress_lines.final()

    def unlocking(self, error: BaseException | None) -> None:
        """The last status record (the run's end, and ``error``)."""
        if self.recorder is not None:
            self.recorder.close(error)
            if self.recorder in self.listeners:      # a rebalanced run goes on with a record of its own
                self.listeners.remove(self.recorder)
            self.recorder = None

    def ended(self) -> None:
        """The status page stops."""
        if self.observer is not None:
            self.listeners.remove(self.observer)
            self.observer.stop()


class OperatedRun(driver.Engine):
    """``Engine`` with the operator's tools (an ``OperatorWatch``); ``observer``: its status
    page, while it serves one."""

    def __init__(self, topology: Topology, config: TopologyConfig, sc: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None,
                 on_start: Callable[[], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.operator = OperatorWatch()
        super().__init__(topology, config, sc, on_commit, on_start, clock, self.operator)

    @property
    def observer(self) -> RunObserver | None:
        """The status page and metrics of the run, when served (``metrics_port``)."""
        return self.operator.observer


def run_topology(topology: Topology | TransactionalTopologyBuilder | Any, config: TopologyConfig | None = None,
                 max_batches: int | None = None, *, spark_context: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None,
                 on_start: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> RunResult:
    """Run ``topology`` until its spout has nothing more (see ``idle_timeout_secs``) or
    ``max_batches`` batches were committed, and return a ``RunResult`` -- with progress
    lines, the status record, the status page and ``trident kill|deactivate|activate``.

    Resumes from the coordinator state: a topology id that committed txids before goes
    on at the next one, replaying stored metadata of uncommitted txids first. Raises
    ``TopologyFailedError`` naming txid, component, task and cause when a txid fails
    ``max_attempts`` times or a task breaks the tuple contract. ``clock``: the driver's
    wall clock (seconds), which gives each txid its time (processing-time windows).
    """
    return driver.run_topology(topology, config, max_batches, spark_context=spark_context, on_commit=on_commit,
                               on_start=on_start, clock=clock, watch=OperatorWatch())
