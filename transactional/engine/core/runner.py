"""The runner of core Storm topologies (``transactional.engine.runner.TopologyRunner``):
the spouts, ackers and checkpoints on the driver (``CoreSpoutPlanner``) plan each micro-batch and
feed its processing job; a micro-batch's commit settles its acks and checkpoints."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from state.base import TransactionalState
from transactional.engine.attempts import AttemptFailed
from transactional.engine.commit import CommitHooks, CommitProtocol, RunStages
from transactional.engine.coordinator import Commit, CoordinatorSettings
from transactional.engine.core.spout_planner import CoreSpoutPlanner
from transactional.engine.core.task_kind import CORE_TASKS
from transactional.engine.core.window_keeper import check_windows
from transactional.engine.events import SpoutFigures
from transactional.engine.gc import paused_gc
from transactional.engine.reports import ProcessingResult
from transactional.engine.runner import TopologyRunner
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.exceptions import ConfigError
from transactional.topology import Topology
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.context import RunContext

#: the status page hears the spouts' figures at most this often between commits
SHOW_EVERY_SECS = 0.5


class CoreRunner(TopologyRunner):
    """A core topology's run (docs/design.md §7): ``CoreSpoutPlanner`` plays the planner."""

    planner: CoreSpoutPlanner
    task_kind = CORE_TASKS

    @staticmethod
    def run_conf(topology: Topology) -> dict[str, Any]:
        """Seeds the tasks' tuple ids (``transactional.engine.core.task.task_seed``)."""
        return {"topology.run.salt": int.from_bytes(os.urandom(4), "big")}

    @staticmethod
    def keeps_state(topology: Topology) -> bool:
        """Stateful bolts keep their ``KeyValueState`` in the user state."""
        return any(c.core in ("stateful", "swindowed") for c in topology.bolts)

    def __init__(self, ctx: RunContext, state: TransactionalState, store: CoordinatorStore, epoch: int) -> None:
        config = ctx.config
        if self.keeps_state(ctx.topology) and config.checkpoint_interval_ms >= config.message_timeout_secs * 1000:
            msg = (f"checkpoint_interval_ms={config.checkpoint_interval_ms} must be below "
                   f"message_timeout_secs={config.message_timeout_secs} (x1000): a stateful bolt's tuples "
                   "are acked at the checkpoint, and would time out first and be replayed")
            raise ConfigError(msg)
        check_windows(ctx.topology, config)
        options = {} if config.state.startswith("memory:") else {"connect_timeout": config.connect_timeout_secs}
        self.ctx = ctx
        self.state = state
        self.store = store
        self.planner = CoreSpoutPlanner(ctx.topology, config, ctx.conf, ctx.result, state, options, epoch=epoch,
                                        wall_clock=ctx.clock)
        if self.planner.checkpointer is not None:
            ctx.result._states = self.planner.checkpointer
        self.protocol = CommitProtocol(ctx, store, self.planner, state, CoreCommit(ctx, self.planner))
        self.shown = 0.0          # when the status page last heard the spouts' figures

    def settings(self) -> CoordinatorSettings:
        return CoordinatorSettings.of(self.ctx.config, core=True)

    def status_counts(self) -> Callable[[], dict[str, Any]] | None:
        """The spout figures of a core topology's status record."""
        r, core = self.ctx.result, self.planner
        return lambda: {"acked": dict(r.acked), "failed": dict(r.failed), "timed_out": dict(r.timed_out),
                        "pending": core.pending()}

    def show(self, figures: SpoutFigures, now: float) -> None:
        if now >= self.shown + SHOW_EVERY_SECS:
            self.shown = now               # what acks and timeouts changed between commits
            r = self.ctx.result
            figures.spout_counts(r.acked, r.failed, self.planner.pending())


class CoreCommit(CommitHooks):
    """The commit hooks of core topologies (``CommitProtocol``): steps 4-5 are those of
    ``CoreSpoutPlanner.commit`` -- the stateful bolts (and everything downstream of them),
    the acks and fails of the micro-batch's tasks, a checkpoint when due. When it fails,
    the micro-batch's pending trees fail, and its spout tuples are replayed by their spouts."""

    keeps_meta = False

    def __init__(self, ctx: RunContext, planner: CoreSpoutPlanner) -> None:
        self.ctx = ctx
        self.planner = planner

    def begin(self, a: Commit, conf: dict[str, Any]) -> dict[str, Any]:
        """Nothing to note (the micro-batch's record is its tuple counts, written before it
        ran); the conf names the bolts that get a tick in this micro-batch."""
        return self.planner.conf_for(a.txid, conf)

    def spout_emitted(self, a: Commit) -> dict[str, int]:
        """The spout tasks ran on the driver: their tuple counts are the metadata."""
        return {sid: m["tuples"] for sid, m in (a.meta or {}).items()}

    def write(self, a: Commit, r: ProcessingResult, run_stages: RunStages) -> None:
        core = self.planner
        try:
            with paused_gc():
                core.commit(a, r.acks, run_stages if self.ctx.plan.commit else None)
        except AttemptFailed:
            core.discard(a.txid)
            raise
        except Exception as exc:
            core.discard(a.txid)
            raise AttemptFailed(TaskFailure.of(exc, "(checkpoint)", -1, TransactionAttempt(a.txid, a.attempt))) from exc

    def recorded(self, txid: int) -> None:
        """Nothing more: the acks were settled in step 4."""

    def info(self) -> dict[str, Any]:
        res, core = self.ctx.result, self.planner
        if core.checkpointer is not None:
            res.checkpoints = core.checkpointer.checkpoints
        return {"acked": dict(res.acked), "failed": dict(res.failed), "pending": core.pending()}
