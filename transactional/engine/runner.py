"""One runner per topology kind: what the driver's loop (``transactional.engine.driver``)
asks of a topology's spouts and commits, behind one interface (``TopologyRunner``).

Every kind commits through the one ``transactional.engine.commit.CommitProtocol``, with
its own hooks. ``TransactionalRunner`` (here): the spouts' coordinators plan each txid's
metadata on the driver, their emitters run as the first stages of the processing job, and
a txid commits its maps (``MapCommit``). ``CoreRunner`` (``transactional.engine.core.runner``):
core spouts run on the driver and *feed* the processing job, and a micro-batch commits
its acks and checkpoints (``CoreCommit``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from state.base import TransactionalState
from transactional.engine.attempts import Jobs
from transactional.engine.commit import CommitProtocol, MapCommit
from transactional.engine.coordinator import Commit, CoordinatorSettings
from transactional.engine.events import SpoutFigures
from transactional.engine.reports import ProcessingResult
from transactional.engine.spout_planner import Planner, SpoutsPlanner
from transactional.engine.staged_maps import StagedMapCommit
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TRANSACTIONAL_TASKS, TaskKind
from transactional.topology import Topology

if TYPE_CHECKING:
    from transactional.engine.context import RunContext


class TopologyRunner(ABC):
    """The driver's interface to one kind of topology: its spouts' ``planner`` (plans a
    txid's metadata, feeds its processing job, keeps the spouts' timers; ``Planner``),
    ``commit`` a txid; and the spouts' figures between commits."""

    planner: Planner
    #: how this kind's bolt tasks run (``transactional.engine.task.run_task``)
    task_kind: TaskKind
    #: how a txid commits: ``CommitProtocol`` with this kind's hooks
    protocol: CommitProtocol

    @abstractmethod
    def __init__(self, ctx: RunContext, state: TransactionalState, store: CoordinatorStore, epoch: int) -> None:
        """Open the spouts of the run ``ctx``, with this driver's lock held and its ``epoch``."""

    @staticmethod
    def run_conf(topology: Topology) -> dict[str, Any]:
        """What a run of ``topology`` adds to the conf its tasks see."""
        return {}

    @staticmethod
    def keeps_state(topology: Topology) -> bool:
        """True when ``topology`` keeps user state of its own (whatever the maps recorded)."""
        return False

    @abstractmethod
    def settings(self) -> CoordinatorSettings:
        """The coordinator's settings for this kind (how many txids in flight)."""

    def in_flight(self) -> int:
        """The most processing jobs in flight at once."""
        return self.settings().max_spout_pending

    def commit(self, a: Commit, r: ProcessingResult, jobs: Jobs) -> dict[str, Any]:
        """Commit attempt ``a`` (``AttemptFailed`` when it fails) through the one commit
        protocol, with this kind's hooks; what ``committed`` reports."""
        return self.protocol.commit(a, r, jobs)

    def status_counts(self) -> Callable[[], dict[str, Any]] | None:
        """The spout figures of the status record, or None."""
        return None

    def spout_coordinators(self) -> dict[str, Any]:
        """The spouts' coordinators on the driver, by spout id (their ``lag()``, when they
        have one, is shown on the status page)."""
        return {}

    @abstractmethod
    def show(self, figures: SpoutFigures, now: float) -> None:
        """Between commits: tell ``figures`` (the status page) what changed since the last commit."""


class TransactionalRunner(TopologyRunner):
    """Transactional topologies (and Trident's): the spouts' coordinators plan on the
    driver (``SpoutsPlanner``), a txid commits through ``CommitProtocol``."""

    planner: SpoutsPlanner
    task_kind = TRANSACTIONAL_TASKS

    def __init__(self, ctx: RunContext, state: TransactionalState, store: CoordinatorStore, epoch: int) -> None:
        self.ctx = ctx
        ctx.states.raise_epoch(epoch)
        if ctx.plan.commits_on_executors:
            ctx.states.known.update(store.recover_maps())
            ctx.states.declare(ctx.plan, ctx.conf)
        self.planner = SpoutsPlanner(ctx.topology, ctx.conf, state=state)
        hooks = StagedMapCommit(ctx, store, epoch) if ctx.config.staged_counters else MapCommit(ctx, store)
        self.protocol = CommitProtocol(ctx, store, self.planner, state, hooks)

    def settings(self) -> CoordinatorSettings:
        return CoordinatorSettings.of(self.ctx.config)

    def spout_coordinators(self) -> dict[str, Any]:
        return {sid: p.coordinator for sid, p in self.planner.planners.items()}

    def show(self, figures: SpoutFigures, now: float) -> None:
        """Nothing changes between commits (the spouts' lag is read by the page itself)."""
