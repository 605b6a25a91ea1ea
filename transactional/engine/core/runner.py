"""The runner of core Storm topologies (``transactional.engine.runner.TopologyRunner``):
the spouts, ackers and checkpoints on the driver (``CoreSpoutPlanner``) plan each micro-batch and
feed its processing job; a micro-batch's commit settles its acks and checkpoints."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from state.base import TransactionalState
from transactional.engine.attempts import AttemptFailed, Jobs, add_report
from transactional.engine.coordinator import Commit, CoordinatorSettings
from transactional.engine.core.spout_planner import CoreSpoutPlanner
from transactional.engine.core.task_kind import CORE_TASKS
from transactional.engine.core.window_keeper import check_windows
from transactional.engine.events import SpoutFigures
from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.interpreter import run_commit
from transactional.engine.reports import PhaseReport, ProcessingResult
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
        self.shown = 0.0          # when the status page last heard the spouts' figures

    def settings(self) -> CoordinatorSettings:
        return CoordinatorSettings.of(self.ctx.config, core=True)

    def commit(self, a: Commit, r: ProcessingResult, jobs: Jobs) -> dict[str, Any]:
        """The commit of micro-batch ``a.txid``, in the steps the module docstring of
        ``transactional.engine.core.spout_planner`` numbers ("Commit of t"): 1 and 5 here, 2-4 in
        ``CoreSpoutPlanner.commit``. ``AttemptFailed`` when it fails: its pending trees fail, and
        its spout tuples are replayed by their spouts."""
        ctx, core = self.ctx, self.planner
        txid, t0 = a.txid, time.monotonic()
        attempt = TransactionAttempt(txid, a.attempt)
        # Step 1. check the lock (micro-batch txid-1 is committed: commits are strictly in order).
        self.state.check_lock()
        crash_point("commit.before", txid=txid)
        executed, emitted, busy, metrics = dict(r.executed), dict(r.emitted), dict(r.busy), dict(r.metrics)
        emitted.update({sid: m["tuples"] for sid, m in (a.meta or {}).items()})
        run_stages = None
        conf = core.conf_for(txid, ctx.conf)        # with the bolts that get a tick in this micro-batch
        if ctx.plan.commit:
            def run_stages(states: Any) -> PhaseReport:
                if ctx.plan.commits_on_executors:   # a Spark job over the processing output kept there
                    rep = run_commit(ctx.plan, jobs.executor, jobs.shared, conf, attempt, r.kept, states)
                else:
                    rep = run_commit(ctx.plan, ctx.driver_executor, ctx.driver_shared, conf, attempt, [r.records],
                                     states)
                add_report(rep, executed, emitted, busy, metrics)
                return rep
        # Steps 2-4. the stateful bolts, the acks, a checkpoint when due (CoreSpoutPlanner.commit)
        try:
            with paused_gc():
                core.commit(a, r.acks, run_stages)
        except AttemptFailed:
            core.discard(txid)
            raise
        except Exception as exc:
            core.discard(txid)
            raise AttemptFailed(TaskFailure.of(exc, "(checkpoint)", -1, attempt)) from exc
        # Step 5. record the micro-batch as committed, drop its metadata
        self.store.record_commit(txid, a.meta, None)
        self.store.drop_pending(txid)
        res = ctx.result
        if core.checkpointer is not None:
            res.checkpoints = core.checkpointer.checkpoints
        return {"executed": executed, "emitted": emitted, "commit_secs": time.monotonic() - t0,
                "processing_secs": r.seconds, "busy_secs": busy, "metrics": metrics,
                "acked": dict(res.acked), "failed": dict(res.failed),
                "pending": core.pending()}

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
