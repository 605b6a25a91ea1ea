"""The driver: coordinator, pipelined processing jobs, strictly ordered commits (docs/design.md §4).

Per txid: plan its metadata and write it durably; run its processing phase as a Spark
job from a driver thread (up to ``max_spout_pending`` at once); when it is the oldest
in flight and processed, run its commit phase here, in the main thread, while later
txids keep processing.

Commit of txid t (``Engine._commit``):
  1. txid t-1 is committed (commits are taken strictly in order by the main loop);
  2. check that this driver still holds the topology's lock;
  3. note durably that this attempt's commit began; run the committers and the bolts
     downstream of them, maps in ``begin_commit(t)`` buffering their updates;
     (first, if an earlier attempt of t began its commit, opaque maps roll back what it wrote);
  4. ``commit(t)`` the maps: each writes what t changed in one atomic write fenced by
     this driver's epoch;
  5. record t as committed (with its metadata and the partition state);
  6. drop t's metadata;
  7. tell the spout's coordinator; emitters get ``cleanup_before`` with the next batch.

Failure of attempt (t, a) -- a task failure, a failed or timed-out job, a failed commit
-- fails t and every later txid in flight: their jobs are cancelled and each is
re-emitted with a new attempt id (transactional spouts: the stored metadata unchanged;
opaque spouts: planned again from where the previous batch ended).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import re
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from state.base import TransactionalState, open_transactional_state
from transactional.config import TopologyConfig
from transactional.engine.coordinator import (
    Action,
    Cancel,
    Commit,
    Coordinator,
    CoordinatorSettings,
    Launch,
    Plan,
    Record,
    Recovered,
    Stop,
    Transition,
)
from transactional.engine.core.driver import CoreDriver
from transactional.engine.core.windows import check_windows
from transactional.engine.faults import crash_point
from transactional.engine.gc import paused_gc
from transactional.engine.maps import StateRegistry
from transactional.engine.plan import (
    InProcessExecutor,
    ProcessingResult,
    compile_plan,
    run_commit,
    run_processing,
)
from transactional.engine.planning import SpoutsPlanner
from transactional.engine.spark import SparkExecutor, get_or_create_context, ship, spark_app_name
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.exceptions import ConfigError, LockHeldError
from transactional.ops.control import RunControl
from transactional.ops.progress import Progress
from transactional.ops.status import StatusRecorder
from transactional.ops.webui import RunObserver, attach, lag_source, spark_ui_url
from transactional.ops.webui.graph import topology_graph
from transactional.result import RunResult
from transactional.topology import Topology, TransactionalTopologyBuilder
from transactional.tuples import TransactionAttempt

log = logging.getLogger("trident")
#: the longest the driver waits before it looks at the operator's requests again
CONTROL_CHECK_SECS = 0.25


class _Failure(Exception):
    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


def run_topology(topology: Topology | TransactionalTopologyBuilder | Any, config: TopologyConfig | None = None,
                 max_batches: int | None = None, *, spark_context: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None) -> RunResult:
    """Run ``topology`` until its spout has nothing more (see ``idle_timeout_secs``) or
    ``max_batches`` batches were committed, and return a ``RunResult``.

    Resumes from the coordinator state: a topology id that committed txids before goes
    on at the next one, replaying stored metadata of uncommitted txids first. Raises
    ``TopologyFailedError`` naming txid, component, task and cause when a txid fails
    ``max_attempts`` times or a task breaks the tuple contract.
    """
    if not isinstance(topology, Topology) and hasattr(topology, "build"):
        topology = topology.build()      # a TransactionalTopologyBuilder or a trident.TridentTopology
    if not isinstance(topology, Topology):
        msg = (f"run_topology takes a Topology, a TransactionalTopologyBuilder or a trident.TridentTopology; "
               f"got {type(topology).__name__}")
        raise TypeError(msg)
    if config is None:
        config = TopologyConfig()
    if max_batches is not None and (not isinstance(max_batches, int) or max_batches < 0):
        msg = f"max_batches must be an int >= 0 or None; got {max_batches!r}"
        raise ConfigError(msg)
    return Engine(topology, config, spark_context, on_commit).run(max_batches)


class Engine:
    def __init__(self, topology: Topology, config: TopologyConfig, sc: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None) -> None:
        # commit components are pickled for executors only when the run places them there
        topology = topology.placed(config.commit_placement)
        self.topology = topology
        self.config = config
        self.sc = sc
        self.conf = {"topology.id": topology.topology_id, **config.conf}
        if topology.core:   # seeds the tasks' tuple ids (transactional.engine.core.task.task_seed)
            self.conf["topology.run.salt"] = int.from_bytes(os.urandom(4), "big")
        self.result = RunResult(topology.topology_id, _spout_ids=tuple(c.id for c in topology.spouts))
        self.plan = compile_plan(topology, config.commit_placement)
        self._driver = InProcessExecutor()                 # commit stages run in this process
        self._driver_shared = self._driver.shared(topology)
        self.states = StateRegistry(config, topology.topology_id)
        self.result._states = self.states
        self.progress = config.progress if config.progress is not None else sys.stderr.isatty()
        self.progress_lines = Progress.for_topology(topology) if self.progress else None
        self.observer: RunObserver | None = None          # the status page and metrics, when served
        #: who hears the coordinator's transitions: the result, progress lines
        self.listeners: list[Callable[[Transition], None]] = [self.result.on_transition]
        self.listeners.append(_log_failure(topology.topology_id))
        if log.isEnabledFor(logging.DEBUG):
            self.listeners.append(_log_transition)
        if self.progress_lines is not None:
            self.listeners.append(self.progress_lines)
        if on_commit is not None:
            self.listeners.append(lambda t: on_commit(t.txid, self.result) if t.kind == "committed" else None)

    # -- the run --------------------------------------------------------------------------
    def run(self, max_batches: int | None) -> RunResult:
        t0 = self.started = time.monotonic()
        # the status page and metrics (docs/operations.md), when metrics_port is set
        self.observer = attach(self.listeners, self.topology, self.config)
        try:
            return self._run(t0, max_batches)
        finally:
            if self.observer is not None:
                self.listeners.remove(self.observer)
                self.observer.stop()

    def _take_lock(self, state: TransactionalState, owner: str, every: float = 5.0) -> None:
        """Take the topology's lock, waiting up to ``lock_wait_secs`` (None: forever) for
        another driver to let go, and saying so: a line naming the holder, the wait so far and
        its bound at once, then every ``every`` seconds (a driver killed with -9 holds it
        until its ZooKeeper session expires)."""
        wait = self.config.lock_wait_secs
        try:
            state.acquire_lock(owner, wait=False, timeout=None)
            return
        except LockHeldError:
            if wait == 0 or not state.waits_for_lock:
                raise
        start = time.monotonic()
        bound = "no bound (lock_wait_secs=None)" if wait is None else f"at most {wait:g} s (lock_wait_secs)"
        while True:
            waited = time.monotonic() - start
            left = None if wait is None else wait - waited
            log.info("%s: waiting for the topology's lock, held by %s: %.0f s so far, %s; a driver killed with -9 "
                     "lets go when its ZooKeeper session expires", self.topology.topology_id,
                     state.lock_holder() or "another driver", waited, bound)
            try:
                state.acquire_lock(owner, wait=True, timeout=every if left is None else max(0.0, min(every, left)))
                return
            except LockHeldError:
                if left is not None and left <= every:
                    msg = (f"topology {self.topology.topology_id!r} is still locked by "
                           f"{state.lock_holder() or 'another driver'} after waiting {wait:g} s (lock_wait_secs): "
                           "only one driver may run it. Stop that driver, or wait longer (--lock-wait SECS; -1: "
                           "forever); a driver killed with -9 holds the lock until its ZooKeeper session expires")
                    raise LockHeldError(msg) from None

    def _run(self, t0: float, max_batches: int | None) -> RunResult:
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        state = open_transactional_state(self.config.coordination, self.topology.topology_id,
                                         **self._coordination_options())
        try:
            self._take_lock(state, owner)
            store = CoordinatorStore(state)
            # refuse, before anything is written, state that would silently lose what was committed
            keeps = bool(store.recover_maps()) or any(c.core in ("stateful", "swindowed") for c in self.topology.bolts)
            store.check_user_state(self.config.state, self.config.coordination, keeps_state=keeps,
                                   accept_loss=self.config.accept_state_loss)
            self.states.record_map = store.record_map
            # a new lock holder takes a higher epoch, durably, and fences user state with it
            epoch = store.take_epoch()
            planner: Any
            if self.topology.core:
                planner = self._core_driver(state, epoch)
            else:
                self.states.raise_epoch(epoch)
                if self.plan.commits_on_executors:
                    self.states.known.update(store.recover_maps())
                    self.states.declare(self.topology, self.conf)
                planner = SpoutsPlanner(self.topology, self.conf, state=state)
                if self.observer is not None:
                    self.observer.set_lag_source(lag_source({sid: p.coordinator for sid, p in planner.planners.items()}))
            recorder = StatusRecorder(state, self.topology.kind, owner,
                                      counts=self._core_counts(planner) if self.topology.core else None,
                                      graph=topology_graph(self.topology), spouts=self.result._spout_ids,
                                      max_attempts=self.config.max_attempts, heartbeat=True,
                                      spark_ui=spark_ui_url if self.config.executor == "spark" else None)
            self.listeners.append(recorder)       # the record `trident status` shows
            error: BaseException | None = None
            try:
                jobs = _Jobs(self, owner)
                try:
                    self._loop(state, store, planner, jobs, max_batches)
                finally:
                    jobs.close()
            except BaseException as e:
                error = e
                raise
            finally:
                try:
                    if self.topology.core:
                        planner.close(error is None)
                    else:
                        planner.close()
                finally:
                    recorder.close(error)
        finally:
            state.close()
            self.result.wall_secs = time.monotonic() - t0
        return self.result

    def _core_driver(self, state: TransactionalState, epoch: int) -> CoreDriver:
        """The spouts, ackers and checkpoints of a core topology (``transactional.engine.core.driver``)."""
        stateful = any(c.core in ("stateful", "swindowed") for c in self.topology.bolts)
        if stateful and self.config.checkpoint_interval_ms >= self.config.message_timeout_secs * 1000:
            msg = (f"checkpoint_interval_ms={self.config.checkpoint_interval_ms} must be below "
                   f"message_timeout_secs={self.config.message_timeout_secs} (x1000): a stateful bolt's tuples "
                   "are acked at the checkpoint, and would time out first and be replayed")
            raise ConfigError(msg)
        check_windows(self.topology, self.config)
        options = {} if self.config.state.startswith("memory:") else {
            "connect_timeout": self.config.connect_timeout_secs}
        core = CoreDriver(self.topology, self.config, self.conf, self.result, state, options, epoch=epoch)
        if core.checkpointer is not None:
            self.result._states = core.checkpointer
        return core

    def _core_counts(self, core: CoreDriver) -> Callable[[], dict]:
        """The spout figures of a core topology's status record."""
        r = self.result
        return lambda: {"acked": dict(r.acked), "failed": dict(r.failed), "timed_out": dict(r.timed_out),
                        "pending": core.pending()}

    def _coordination_options(self) -> dict:
        if self.config.coordination.startswith("zk:"):
            return {"auth": self.config.coordination_auth, "connect_timeout": self.config.connect_timeout_secs}
        return {}

    def _loop(self, state: TransactionalState, store: CoordinatorStore, planner: SpoutsPlanner,
              jobs: _Jobs, max_batches: int | None) -> None:
        """Carry out the coordinator's actions until it says stop (see ``_coordinator``)."""
        rec = store.recover()
        self.states.known.update(rec.maps)
        self.states.last_committed = rec.last_committed
        coord = Coordinator(CoordinatorSettings.of(self.config, self.topology.core), planner.policy,
                            Recovered(rec.last_committed, rec.committed_meta, rec.partitions, rec.pending),
                            max_batches)
        coord.listeners += [_heard_safely(listener) for listener in self.listeners]
        if rec.pending:
            log.info("%s: resuming after txid %d; %d uncommitted txid(s) to %s", self.topology.topology_id,
                     rec.last_committed, len(rec.pending), "replay" if planner.policy.replays else "plan again")
        runner = _Attempts(self, jobs, store, planner, state)
        clock = time.monotonic
        control = RunControl(state, jobs.run_id)     # `trident deactivate|activate|kill` (transactional.ops.control)
        pending: deque[Action] = deque(control.actions(coord, clock()) + coord.start(clock()))
        pushed = 0.0                                 # when the status page last heard the spouts' figures
        try:
            while True:
                while pending:
                    a = pending.popleft()
                    if isinstance(a, Stop):
                        if a.error is not None:
                            raise a.error
                        return
                    pending += runner.carry_out(a, coord)
                    # the operator is heard between any two actions, and right after a commit from
                    # the record read afresh: a kill that came during the commit stops the run before
                    # anything else -- the next Commit already asked for included
                    heard = control.actions(coord, clock(), fresh=isinstance(a, Commit))
                    if any(isinstance(h, Stop) for h in heard):
                        pending = deque([p for p in pending if isinstance(p, Cancel)] + heard)
                    else:
                        pending += heard
                pending += control.actions(coord, clock())
                if pending:
                    continue
                wakes = [w for w in (coord.next_wakeup(clock()), planner.next_wakeup()) if w is not None]
                timeout = self.config.poll_interval_secs if not wakes else max(0.0, min(wakes) - clock())
                pending += runner.wait(coord, min(timeout, CONTROL_CHECK_SECS))
                planner.tick(clock())             # the spouts' timers (core topologies) before the coordinator's
                pending += coord.tick(clock())
                if self.observer is not None and self.topology.core and clock() >= pushed + 0.5:
                    pushed = clock()               # what acks and timeouts changed between commits
                    r = self.result
                    self.observer.spout_counts(r.acked, r.failed, planner.pending())
        finally:
            runner.close()
            if self.progress_lines is not None:
                self.progress_lines.final()

    # -- commit (main thread) ----------------------------------------------------------------
    def _commit(self, a: Commit, r: ProcessingResult, store: CoordinatorStore, planner: Any,
                state: TransactionalState, jobs: _Jobs) -> dict:
        """The commit of one attempt; returns what the ``committed`` transition reports.
        Raises ``_Failure`` when it fails (nothing recorded; the txid is replayed)."""
        if self.topology.core:
            return self._commit_core(a, r, store, planner, state, jobs)
        txid, t0 = a.txid, time.monotonic()
        attempt = TransactionAttempt(txid, a.attempt)
        # Step 1. txid-1 is committed: the coordinator commits strictly in order.
        # Step 2. this driver still holds the lock (LeadershipLostError stops the run).
        state.check_lock()
        # Step 3. committers and the bolts downstream of them, maps buffering their updates;
        # first note durably that this attempt's commit began (it may write user state).
        store.write_pending(txid, a.meta, a.attempt, list(a.commit_started))
        crash_point("commit.before", txid=txid)
        executed, emitted, busy = dict(r.executed), dict(r.emitted), dict(r.busy)
        try:
            # an earlier attempt whose commit began may have written opaque state: roll it back
            self.states.begin(txid, a.attempt, self.plan.writers() if len(a.commit_started) > 1 else ())
            if self.plan.commits_on_executors:
                rep = run_commit(self.plan, jobs.executor, jobs.shared, self.conf, attempt, r.kept,
                                 self.states.for_executors(txid, a.attempt))
                _add_report(rep, executed, emitted, busy)
            else:
                with paused_gc():
                    self._run_commit_components(attempt, r.records, executed, emitted, busy)
            # Step 4. the maps write what the commit changed: one fenced atomic write each.
            crash_point("commit.before_write", txid=txid)
            with paused_gc():
                self.states.commit(txid)
        except _Failure:
            self.states.abort()
            raise
        except Exception as e:
            self.states.abort()
            raise _Failure(TaskFailure.of(e, f"(map {getattr(e, 'trident_map', '?')!r})", -1, attempt)) from e
        crash_point("commit.before_record", txid=txid)
        # Step 5. record txid as committed, with its metadata and the partition state.
        store.record_commit(txid, a.meta, a.partitions)
        self.states.committed(txid)
        crash_point("commit.after_record", txid=txid)
        # Step 6. drop its metadata.
        store.drop_pending(txid)
        # Step 7. tell the coordinator (emitters get cleanup_before with the next batch).
        try:
            planner.committed(txid, a.meta)
        except Exception as e:  # noqa: BLE001 - informational hook
            log.warning("spout coordinator's committed(%d) failed: %r", txid, e)
        info = {"executed": executed, "emitted": emitted, "commit_secs": time.monotonic() - t0,
                "processing_secs": r.seconds, "busy_secs": busy}
        return info

    def _commit_core(self, a: Commit, r: ProcessingResult, store: CoordinatorStore, core: CoreDriver,
                     state: TransactionalState, jobs: _Jobs) -> dict:
        """The commit of a core topology's micro-batch (``transactional.engine.core.driver``): the
        stateful bolts and what follows them, the acks, a checkpoint when due. Raises
        ``_Failure`` when it fails (the micro-batch's pending trees fail; its spout tuples
        are replayed by their spouts)."""
        txid, t0 = a.txid, time.monotonic()
        attempt = TransactionAttempt(txid, a.attempt)
        # Step 1. micro-batch txid-1 is committed. Step 2. this driver still holds the lock.
        state.check_lock()
        crash_point("commit.before", txid=txid)
        executed, emitted, busy = dict(r.executed), dict(r.emitted), dict(r.busy)
        emitted.update({sid: m["tuples"] for sid, m in (a.meta or {}).items()})
        run_stages = None
        conf = core.conf_for(txid, self.conf)      # with the micro-batch's ticks
        if self.plan.commit:
            def run_stages(states: Any) -> dict:
                if self.plan.commits_on_executors:   # a Spark job over the processing output kept there
                    rep = run_commit(self.plan, jobs.executor, jobs.shared, conf, attempt, r.kept, states)
                else:
                    rep = run_commit(self.plan, self._driver, self._driver_shared, conf, attempt, [r.records],
                                     states)
                _add_report(rep, executed, emitted, busy)
                return rep
        # Steps 3-4. the stateful bolts, the acks, a checkpoint when due
        try:
            with paused_gc():
                core.commit(a, r.acks, run_stages)
        except _Failure:
            core.discard(txid)
            raise
        except Exception as e:
            core.discard(txid)
            raise _Failure(TaskFailure.of(e, "(checkpoint)", -1, attempt)) from e
        # Step 5. record the micro-batch as committed, drop its metadata
        store.record_commit(txid, a.meta, None)
        store.drop_pending(txid)
        res = self.result
        if core.checkpointer is not None:
            res.checkpoints = core.checkpointer.checkpoints
        return {"executed": executed, "emitted": emitted, "commit_secs": time.monotonic() - t0,
                "processing_secs": r.seconds, "busy_secs": busy, "acked": dict(res.acked), "failed": dict(res.failed),
                "pending": core.pending()}

    def _run_commit_components(self, attempt: TransactionAttempt, records: list,
                               executed: dict, emitted: dict, busy: dict) -> None:
        """The commit-phase stages on the driver, the maps in the current commit."""
        rep = run_commit(self.plan, self._driver, self._driver_shared, self.conf, attempt, [records], self.states)
        _add_report(rep, executed, emitted, busy)


class _Jobs:
    """The processing phase of attempts: the plan's processing stages on the configured
    executor (Spark, or this process for ``executor="in-process"``)."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self.engine = engine
        self.run_id = run_id
        if engine.config.executor == "in-process":
            self.executor: Any = InProcessExecutor()
        else:
            if engine.sc is None:
                engine.sc = get_or_create_context(engine.config, spark_app_name(engine.topology.topology_id))
            else:
                ship(engine.sc, engine.config)      # py_files / archives of this run
            self.executor = SparkExecutor(engine.sc)
        self.shared = self.executor.shared(engine.topology)

    def run(self, attempt: TransactionAttempt, meta: Any, cleanup_before: int, group: str,
            fed: Any = None) -> ProcessingResult:
        """Run the processing phase of ``attempt`` as one job in job group ``group`` (call
        from the thread that owns the attempt); ``fed``: a core topology's spout output."""
        e = self.engine
        return run_processing(e.plan, self.executor, self.shared, self.run_id, e.conf, attempt, meta,
                              cleanup_before, group, fed)

    def cancel(self, group: str) -> None:
        self.executor.cancel(group)

    def close(self) -> None:
        unpersist = getattr(self.shared, "unpersist", None)
        if unpersist is not None:
            try:
                unpersist(blocking=False)
            except Exception:  # noqa: BLE001 - the context may be gone already
                pass


class _Attempts:
    """The engine's side of the coordinator's actions: the processing jobs in flight
    (driver threads), their results, and the commit in the main thread."""

    def __init__(self, engine: Engine, jobs: _Jobs, store: CoordinatorStore, planner: SpoutsPlanner,
                 state: TransactionalState) -> None:
        self.engine = engine
        self.jobs = jobs
        self.store = store
        self.planner = planner
        self.state = state
        self.pool = cf.ThreadPoolExecutor(max_workers=engine.config.pending_batches(engine.topology.core),
                                          thread_name_prefix="trident-batch")
        self.running: dict[cf.Future, tuple[int, int]] = {}
        self.groups: dict[tuple[int, int], str] = {}      # attempts whose job counts
        self.results: dict[tuple[int, int], ProcessingResult] = {}

    def carry_out(self, a: Action, coord: Coordinator) -> list[Action]:
        """Do what ``a`` asks; return the coordinator's answer to its outcome."""
        now = time.monotonic
        if isinstance(a, Plan):
            planned = self.planner.plan(a.txid, a.partitions, a.keep)
            meta, parts = planned if planned is not None else (None, None)
            return coord.planned(a.txid, meta, parts, now(), busy=self.planner.busy())
        if isinstance(a, Launch):
            # durable before any task of the attempt runs
            self.store.write_pending(a.txid, a.meta, a.attempt, list(a.commit_started))
            crash_point("process.after_meta", txid=a.txid)
            tid = self.engine.topology.topology_id
            group = f"trident-{tid}-{a.txid}-{a.attempt}-{uuid.uuid4().hex[:6]}"
            self.groups[(a.txid, a.attempt)] = group
            fut = self.pool.submit(self._process, TransactionAttempt(a.txid, a.attempt), a.meta,
                                   coord.last_committed, group, self.planner.fed(a.txid))
            self.running[fut] = (a.txid, a.attempt)
            return []
        if isinstance(a, Record):
            self.store.write_pending(a.txid, a.meta, a.attempt, list(a.commit_started))
            return []
        if isinstance(a, Cancel):
            self.planner.discard(a.txid)
            job_group = self.groups.pop((a.txid, a.attempt), None)
            if job_group is not None:
                self.jobs.cancel(job_group)
            r = self.results.pop((a.txid, a.attempt), None)
            if r is not None and r.kept is not None:
                self.jobs.executor.release(r.kept)
            return []
        if isinstance(a, Commit):
            r = self.results.pop((a.txid, a.attempt))
            self.groups.pop((a.txid, a.attempt), None)
            try:
                info = self.engine._commit(a, r, self.store, self.planner, self.state, self.jobs)
            except _Failure as e:
                return coord.failed(a.txid, a.attempt, e.failure, now())
            finally:
                if r.kept is not None:
                    self.jobs.executor.release(r.kept)
            return coord.committed(a.txid, now(), **info)
        msg = f"unknown action {a!r}"
        raise TypeError(msg)

    def _process(self, attempt: TransactionAttempt, meta: Any, cleanup_before: int, group: str,
                 fed: Any = None) -> ProcessingResult:
        try:
            return self.jobs.run(attempt, meta, cleanup_before, group, fed)
        except Exception as e:  # noqa: BLE001 - a failed or cancelled Spark job
            cancelled = (attempt.txid, attempt.attempt_id) not in self.groups
            fatal = None if cancelled else self.jobs.executor.explain(str(e))
            return ProcessingResult(attempt, failures=[TaskFailure(
                "(spark job)", -1, attempt.txid, attempt.attempt_id, "fatal" if fatal else "error",
                type(e).__name__, "cancelled" if cancelled else fatal or _spark_error(e), "")])

    def wait(self, coord: Coordinator, timeout: float) -> list[Action]:
        """Wait up to ``timeout`` for a processing job to end; report the ended ones."""
        if not self.running:
            time.sleep(timeout)
            return []
        done, _ = cf.wait(list(self.running), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        actions: list[Action] = []
        for fut in sorted(done, key=lambda f: self.running[f]):
            txid, attempt = self.running.pop(fut)
            if (txid, attempt) not in self.groups:
                log.debug("txid %d attempt %d: the job of a cancelled attempt ended", txid, attempt)
                continue                          # cancelled: its result is void
            r: ProcessingResult = fut.result()
            log.debug("txid %d attempt %d: processing job ended in %.3f s (%d failure(s))", txid, attempt,
                      r.seconds, len(r.failures))
            if r.failures:
                actions += coord.failed(txid, attempt, _first(r.failures), time.monotonic())
            else:
                self.results[(txid, attempt)] = r
                actions += coord.processed(txid, attempt, r.actual or None, time.monotonic())
        return actions

    def close(self) -> None:
        for group in self.groups.values():
            self.jobs.cancel(group)
        self.groups.clear()
        self.pool.shutdown(wait=True, cancel_futures=True)


def _log_failure(topology_id: str) -> Callable[[Transition], None]:
    """Every failed attempt at INFO, in one line: txid, attempt, where (the component and
    task, by the user's names), the exception, and what follows (a replay, or the stop)."""
    def hear(t: Transition) -> None:
        if t.kind != "failed":
            return
        f = t.info["failure"]
        where = "the Spark job" if f.task < 0 else f"{f.component} task {f.task}"
        error = getattr(f, "error_type", "Timeout")
        log.info("%s: txid %d attempt %d failed: %s: %s: %s; %s", topology_id, t.txid, t.attempt, where, error,
                 f.message.splitlines()[0] if f.message else "", t.info.get("then", ""))
    return hear


def _log_transition(t: Transition) -> None:
    """Every transition of the coordinator, at DEBUG (``--log-level DEBUG``)."""
    failure = t.info.get("failure")
    log.debug("%s txid %d attempt %d%s", t.kind, t.txid, t.attempt, f": {failure.describe()}" if failure else "")


def _heard_safely(listener: Callable[[Transition], None]) -> Callable[[Transition], None]:
    """``listener`` as the coordinator calls it: what it raises is logged (once per kind
    of error), never raised into the run -- an observer must not stop a topology."""
    seen: set[str] = set()

    def hear(t: Transition) -> None:
        try:
            listener(t)
        except Exception as e:  # noqa: BLE001 - see the docstring
            what = f"{type(e).__name__}: {e}"
            if what not in seen:
                seen.add(what)
                log.warning("a listener of the run (%r) failed on a %r transition: %s", listener, t.kind, what)
    return hear


def _add_report(rep: dict, executed: dict, emitted: dict, busy: dict | None = None) -> None:
    """Raise the report's first failure as ``_Failure``, else add its counters (and the
    seconds its tasks ran to ``busy``)."""
    if rep["failures"]:
        raise _Failure(_first(rep["failures"]))
    for total, counts in ((executed, rep["executed"]), (emitted, rep["emitted"]),
                          (busy if busy is not None else {}, rep.get("busy", {}))):
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v


def _first(failures: list[TaskFailure]) -> TaskFailure:
    """The most telling failure of an attempt: fatal before others, user code before Spark."""
    return sorted(failures, key=lambda f: (f.kind != "fatal", f.component == "(spark job)"))[0]


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt))(: .*)?$")


def _spark_error(e: BaseException) -> str:
    """The Python exception inside a Py4JJavaError's text, else its first line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    py = [ln for ln in lines if _EXC_LINE.match(ln) and not ln.startswith(("org.", "java.", "py4j."))]
    if py:
        return py[-1][:500]
    return (lines[0] if lines else repr(e))[:500]
