"""The commit protocol of a transactional topology, written once (``CommitProtocol``).

docs/design.md §4 points here; the steps below are the comments of ``CommitProtocol.commit``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from state.base import TransactionalState
from transactional.engine.attempts import AttemptFailed, Jobs, add_report
from transactional.engine.coordinator import Commit
from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.interpreter import run_commit
from transactional.engine.reports import ProcessingResult
from transactional.engine.spout_planner import SpoutsPlanner
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.engine.user_states import (
    TXID_TIME_MS as TXID_TIME_MS,  # the conf key of a txid's time (windows read it here)
)
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.context import RunContext

log = logging.getLogger("trident")


class CommitProtocol:
    """The commit of txid t (attempt a), in the order ``commit`` takes the steps:

    1. txid t-1 is committed: the coordinator asks for commits strictly in txid order, one
       at a time, in the driver's main thread (later txids keep processing meanwhile).
    2. This driver still holds the topology's lock (``LeadershipLostError`` stops the run).
    3. Note durably that this attempt's commit began (it may write user state), with the
       txid's time (the driver's clock at its first commit, the same for every attempt).
    4. Run the committers and the bolts downstream of them (on the driver, or as Spark
       jobs when ``commit_placement="executors"``), the maps in ``begin_commit(t)``
       buffering their updates; first, if an earlier attempt of t began its commit, opaque
       maps roll back what it wrote.
    5. The maps write what t changed: every value checked storable first, then the maps of
       one store in one atomic write fenced by this driver's epoch.
    6. Record t as committed, with its metadata and the partition state.
    7. Drop t's metadata (the last ``keep_batch_meta`` txids' go to ``kept/<t>`` first,
       for ``trident replay``).
    8. Tell the spouts' coordinators; emitters get ``cleanup_before`` with the next batch.

    A failure in steps 2-5 raises ``AttemptFailed``: the maps drop what they buffered,
    nothing is recorded, and the coordinator fails t and every later txid in flight (each
    re-emitted as a new attempt: transactional spouts with the stored metadata, opaque
    spouts planned again from where the previous batch ended). A driver killed between
    any two steps resumes from what steps 3 and 6 recorded (``TRIDENT_CRASH_AT`` names the
    crash points, ``transactional.engine.faults``).
    """

    def __init__(self, ctx: RunContext, store: CoordinatorStore, planner: SpoutsPlanner,
                 state: TransactionalState) -> None:
        self.ctx = ctx
        self.store = store
        self.planner = planner
        self.state = state

    def commit(self, a: Commit, r: ProcessingResult, jobs: Jobs) -> dict[str, Any]:
        """Commit attempt ``a`` whose processing gave ``r``; returns what the ``committed``
        transition reports."""
        ctx, store = self.ctx, self.store
        txid, t0 = a.txid, time.monotonic()
        attempt = TransactionAttempt(txid, a.attempt)
        # Step 1. txid-1 is committed: the coordinator commits strictly in order.
        # Step 2. this driver still holds the lock (LeadershipLostError stops the run).
        self.state.check_lock()
        # Step 3. note durably that this attempt's commit began (it may write user state),
        # with the txid's time: the driver's clock when its first commit began, reused by
        # every later attempt (processing-time windows fire the same windows on a replay).
        conf = {**ctx.conf, TXID_TIME_MS: store.commit_time(txid, ctx.clock)}
        store.write_pending(txid, a.meta, a.attempt, list(a.commit_started))
        crash_point("commit.before", txid=txid)
        executed, emitted, busy, metrics = dict(r.executed), dict(r.emitted), dict(r.busy), dict(r.metrics)
        try:
            # Step 4. committers and the bolts downstream of them, maps buffering their updates;
            # an earlier attempt whose commit began may have written opaque state: roll it back first.
            ctx.states.begin(txid, a.attempt, ctx.plan.writers() if len(a.commit_started) > 1 else (),
                           time_ms=conf[TXID_TIME_MS])
            if ctx.plan.commits_on_executors:
                rep = run_commit(ctx.plan, jobs.executor, jobs.shared, conf, attempt, r.kept,
                                 ctx.states.for_executors(txid, a.attempt))
            else:
                with paused_gc():
                    rep = run_commit(ctx.plan, ctx.driver_executor, ctx.driver_shared, conf, attempt, [r.records],
                                     ctx.states)
            add_report(rep, executed, emitted, busy, metrics)
            # Step 5. the maps write what the commit changed: one fenced atomic write each store.
            crash_point("commit.before_write", txid=txid)
            with paused_gc():
                ctx.states.commit(txid)
        except AttemptFailed:
            ctx.states.abort()
            raise
        except Exception as exc:
            ctx.states.abort()
            raise AttemptFailed(TaskFailure.of(exc, f"(map {getattr(exc, 'trident_map', '?')!r})", -1,
                                               attempt)) from exc
        crash_point("commit.before_record", txid=txid)
        # Step 6. record txid as committed, with its metadata and the partition state.
        store.record_commit(txid, a.meta, a.partitions)
        ctx.states.committed(txid)
        crash_point("commit.after_record", txid=txid)
        # Step 7. drop its metadata (kept for `trident replay` with keep_batch_meta).
        store.keep_meta(txid, a.meta, a.partitions, ctx.config.keep_batch_meta)
        store.drop_pending(txid)
        # Step 8. tell the spouts' coordinators (emitters get cleanup_before with the next batch).
        try:
            self.planner.committed(txid, a.meta)
        except Exception as exc:  # noqa: BLE001 - informational hook
            log.warning("spout coordinator's committed(%d) failed: %r", txid, exc)
        return {"executed": executed, "emitted": emitted, "commit_secs": time.monotonic() - t0,
                "processing_secs": r.seconds, "busy_secs": busy, "metrics": metrics}
