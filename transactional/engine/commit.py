"""The commit protocol of every topology kind, written once (``CommitProtocol``), and the
hooks of transactional topologies (``MapCommit``: their maps); a core topology's hooks
(acks and checkpoints) are ``transactional.engine.core.runner.CoreCommit``.

docs/design.md §4 points here; the steps below are the comments of ``CommitProtocol.commit``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from state.base import TransactionalState
from transactional.engine.attempts import AttemptFailed, Jobs, add_report
from transactional.engine.coordinator import Commit
from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.interpreter import run_commit
from transactional.engine.reports import PhaseReport, ProcessingResult
from transactional.engine.spout_planner import Planner
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.engine.user_states import (
    TXID_TIME_MS as TXID_TIME_MS,  # the conf key of a txid's time (windows read it here)
)
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.context import RunContext

log = logging.getLogger("trident")

#: runs the commit-phase stages over the processing output with ``states`` (what tasks
#: reach user state through), adds their counters, and returns their report (``AttemptFailed``
#: when a task failed)
RunStages = Callable[[Any], PhaseReport]


class CommitHooks(Protocol):
    """What one kind of topology does at the steps of ``CommitProtocol`` that differ."""

    #: True: the last ``keep_batch_meta`` txids' metadata is kept for ``trident replay`` (step 7)
    keeps_meta: bool

    def begin(self, a: Commit, conf: dict[str, Any]) -> dict[str, Any]:
        """Step 3: what the commit needs noted durably before it may write; the conf its
        commit-phase tasks see."""

    def spout_emitted(self, a: Commit) -> dict[str, int]:
        """The tuples each spout emitted outside the processing job (on the driver)."""

    def write(self, a: Commit, r: ProcessingResult, run_stages: RunStages) -> None:
        """Steps 4-5: run the commit-phase stages (``run_stages(states)``) and make what
        they changed durable; ``AttemptFailed`` (after undoing what was begun) when it fails."""

    def recorded(self, txid: int) -> None:
        """Step 6: ``txid`` is recorded as committed."""

    def info(self) -> dict[str, Any]:
        """What the ``committed`` transition reports besides the counters."""


class CommitProtocol:
    """The commit of txid t (attempt a), in the order ``commit`` takes the steps:

    1. txid t-1 is committed: the coordinator asks for commits strictly in txid order, one
       at a time, in the driver's main thread (later txids keep processing meanwhile).
    2. This driver still holds the topology's lock (``LeadershipLostError`` stops the run).
    3. Note durably that this attempt's commit began (it may write user state), with the
       txid's time (the driver's clock at its first commit, the same for every attempt)
       (``hooks.begin``).
    4. Run the committers and the bolts downstream of them (on the driver, or as Spark
       jobs when ``commit_placement="executors"``), their state buffering its updates
       (``hooks.write``: transactional topologies' maps in ``begin_commit(t)`` -- first, if
       an earlier attempt of t began its commit, opaque maps roll back what it wrote; a
       core topology's stateful bolts, then the acks of t's tasks, ``CoreCommit``).
    5. What t changed becomes durable (``hooks.write``: the maps write it, every value
       checked storable first, then the maps of one store in one atomic write fenced by
       this driver's epoch; a core topology checkpoints when due).
    6. Record t as committed, with its metadata and the partition state.
    7. Drop t's metadata (the last ``keep_batch_meta`` txids' go to ``kept/<t>`` first,
       for ``trident replay``, where ``hooks.keeps_meta``).
    8. Tell the spouts' planner; emitters get ``cleanup_before`` with the next batch.

    A failure in steps 2-5 raises ``AttemptFailed``: what was buffered is dropped, nothing
    is recorded, and the coordinator fails t and every later txid in flight (each
    re-emitted as a new attempt: transactional spouts with the stored metadata, opaque
    spouts planned again from where the previous batch ended; a core topology's
    micro-batch from new ``next_tuple`` calls). A driver killed between any two steps
    resumes from what steps 3 and 6 recorded (``TRIDENT_CRASH_AT`` names the crash
    points, ``transactional.engine.faults``).
    """

    def __init__(self, ctx: RunContext, store: CoordinatorStore, planner: Planner, state: TransactionalState,
                 hooks: CommitHooks) -> None:
        self.ctx = ctx
        self.store = store
        self.planner = planner
        self.state = state
        self.hooks = hooks

    def commit(self, a: Commit, r: ProcessingResult, jobs: Jobs) -> dict[str, Any]:
        """Commit attempt ``a`` whose processing gave ``r``; returns what the ``committed``
        transition reports."""
        ctx, store, hooks = self.ctx, self.store, self.hooks
        txid, t0 = a.txid, time.monotonic()
        # Step 1. txid-1 is committed: the coordinator commits strictly in order.
        # Step 2. this driver still holds the lock (LeadershipLostError stops the run).
        self.state.check_lock()
        # Step 3. note durably that this attempt's commit began (it may write user state).
        conf = hooks.begin(a, ctx.conf)
        crash_point("commit.before", txid=txid)
        executed, emitted, busy, metrics = dict(r.executed), dict(r.emitted), dict(r.busy), dict(r.metrics)
        emitted.update(hooks.spout_emitted(a))
        attempt = TransactionAttempt(txid, a.attempt)

        def run_stages(states: Any) -> PhaseReport:
            if ctx.plan.commits_on_executors:   # a Spark job over the processing output kept there
                rep = run_commit(ctx.plan, jobs.executor, jobs.shared, conf, attempt, r.kept, states)
            else:
                with paused_gc():
                    rep = run_commit(ctx.plan, ctx.driver_executor, ctx.driver_shared, conf, attempt, [r.records],
                                     states)
            add_report(rep, executed, emitted, busy, metrics)
            return rep
        # Steps 4-5. the commit-phase stages, their state buffering; then what they changed made durable.
        hooks.write(a, r, run_stages)
        crash_point("commit.before_record", txid=txid)
        # Step 6. record txid as committed, with its metadata and the partition state.
        store.record_commit(txid, a.meta, a.partitions)
        hooks.recorded(txid)
        crash_point("commit.after_record", txid=txid)
        # Step 7. drop its metadata (kept for `trident replay` with keep_batch_meta).
        if hooks.keeps_meta:
            store.keep_meta(txid, a.meta, a.partitions, ctx.config.keep_batch_meta)
        store.drop_pending(txid)
        # Step 8. tell the spouts' planner (emitters get cleanup_before with the next batch).
        try:
            self.planner.committed(txid, a.meta)
        except Exception as exc:  # noqa: BLE001 - informational hook
            log.warning("spout coordinator's committed(%d) failed: %r", txid, exc)
        return {"executed": executed, "emitted": emitted, "commit_secs": time.monotonic() - t0,
                "processing_secs": r.seconds, "busy_secs": busy, "metrics": metrics, **hooks.info()}


class MapCommit(CommitHooks):
    """The commit hooks of transactional topologies (and Trident's): the txid's time and
    its pending record first, then the maps (``transactional.engine.maps.StateRegistry``)
    buffer what the committers change and write it in one fenced atomic step per store."""

    keeps_meta = True

    def __init__(self, ctx: RunContext, store: CoordinatorStore) -> None:
        self.ctx = ctx
        self.store = store

    def begin(self, a: Commit, conf: dict[str, Any]) -> dict[str, Any]:
        """The txid's time: the driver's clock when its first commit began, reused by every
        later attempt (processing-time windows fire the same windows on a replay), noted
        with the attempt's pending record."""
        conf = {**conf, TXID_TIME_MS: self.store.commit_time(a.txid, self.ctx.clock)}
        self.store.write_pending(a.txid, a.meta, a.attempt, list(a.commit_started))
        return conf

    def write(self, a: Commit, r: ProcessingResult, run_stages: RunStages) -> None:
        """Step 4: the maps in ``begin_commit`` (an earlier attempt whose commit began may
        have written opaque state: rolled back first), the stages; step 5: the maps write."""
        ctx, txid = self.ctx, a.txid
        states = ctx.states
        try:
            states.begin(txid, a.attempt, ctx.plan.writers() if len(a.commit_started) > 1 else (),
                         time_ms=self.store.commit_time(txid, ctx.clock))
            run_stages(states.for_executors(txid, a.attempt) if ctx.plan.commits_on_executors else states)
            crash_point("commit.before_write", txid=txid)
            with paused_gc():
                states.commit(txid)
        except AttemptFailed:
            states.abort()
            raise
        except Exception as exc:
            states.abort()
            raise AttemptFailed(TaskFailure.of(exc, f"(map {getattr(exc, 'trident_map', '?')!r})", -1,
                                               TransactionAttempt(txid, a.attempt))) from exc

    def spout_emitted(self, a: Commit) -> dict[str, int]:
        """Spouts emit in their own tasks: counted in the processing job's report."""
        return {}

    def recorded(self, txid: int) -> None:
        self.ctx.states.committed(txid)

    def info(self) -> dict[str, Any]:
        return {}
