"""The processing phase of attempts (``Jobs``: the plan's processing stages on Spark or in
this process) and the engine's side of the coordinator's actions (``Attempts``: jobs in
flight on driver threads, their results, the commit in the main thread)."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import queue
import re
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from transactional.engine.coordinator import Action, Cancel, Commit, Coordinator, Launch, Plan, Record
from transactional.engine.drpc import driver_rules
from transactional.engine.executors import InProcessExecutor
from transactional.engine.faults import crash_point
from transactional.engine.interpreter import run_processing
from transactional.engine.placement import (
    DRIVER_BUDGET_SECS,
    DriverLoad,
    SmallBatches,
    max_calls,
    max_records,
    sized_rules,
)
from transactional.engine.reports import PhaseReport, ProcessingResult
from transactional.engine.spark import SparkExecutor, get_or_create_context, ship, spark_app_name
from transactional.engine.store import CoordinatorStore
from transactional.engine.task import TaskFailure
from transactional.engine.wakeup import WakesDriver, Wakeup
from transactional.metrics import fold_committed
from transactional.tuples import TransactionAttempt

if TYPE_CHECKING:
    from transactional.engine.context import RunContext
    from transactional.engine.runner import TopologyRunner

log = logging.getLogger("trident")
#: how long a stopped run waits for its cancelled processing jobs to end before it ends without them
STOP_WAIT_SECS = 5.0


class AttemptFailed(Exception):
    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class Jobs:
    """The processing phase of attempts: the plan's processing stages on the configured
    executor (Spark, or this process for ``executor="in-process"``). ``sc``: the run's
    Spark context, if it has one already (``self.sc`` after: the one the jobs use)."""

    def __init__(self, ctx: RunContext, run_id: str, sc: Any = None) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.sc = sc
        if ctx.config.executor == "in-process":
            self.executor: Any = InProcessExecutor()
        else:
            if self.sc is None:
                self.sc = get_or_create_context(ctx.config, spark_app_name(ctx.topology.topology_id))
            else:
                ship(self.sc, ctx.config)      # py_files / archives of this run
            self.executor = SparkExecutor(self.sc)
        self.shared = self.executor.shared(ctx.topology)
        #: which batches run their processing in this process, not as a Spark job (None: none)
        self.small = small_batches(ctx, self.sc.master) if isinstance(self.executor, SparkExecutor) else None
        self.local = InProcessExecutor()
        self.local_shared = self.local.shared(ctx.topology) if self.small is not None else self.shared
        #: batches of a Spark run processed in the driver's process and as Spark jobs
        self.placed = {"driver": 0, "spark": 0}

    def run(self, attempt: TransactionAttempt, meta: Any, cleanup_before: int, group: str,
            fed: Any = None) -> ProcessingResult:
        """Run the processing phase of ``attempt`` as one job in job group ``group`` (call
        from the thread that owns the attempt); ``fed``: a core topology's spout output."""
        ctx = self.ctx
        here = self.small is not None and fed is None and self.small.take(meta)
        if isinstance(self.executor, SparkExecutor):
            self.placed["driver" if here else "spark"] += 1
            log.debug("txid %d: processing %s", attempt.txid, "in the driver's process" if here else "as a Spark job")
        cpu = time.thread_time()
        wall = time.perf_counter()
        try:
            r = run_processing(ctx.plan, self.local if here else self.executor,
                               self.local_shared if here else self.shared,
                               self.run_id, ctx.conf, attempt, meta, cleanup_before, group, fed)
        finally:
            if here and self.small is not None:
                self.small.left(time.perf_counter() - wall)     # the driver's load (placement.DriverLoad)
        if self.small is not None and not r.failures:
            # the work: this thread's CPU time here (not the wall time other threads share),
            # the seconds the tasks ran on Spark's workers
            self.small.ran(meta, time.thread_time() - cpu if here else sum(r.busy.values()))
        return r

    def cancel(self, group: str) -> None:
        self.executor.cancel(group)
        if self.small is not None:
            self.local.cancel(group)

    def close(self) -> None:
        unpersist = getattr(self.shared, "unpersist", None)
        if unpersist is not None:
            try:
                unpersist(blocking=False)
            except Exception:  # noqa: BLE001 - the context may be gone already
                pass


def small_batches(ctx: RunContext, master: str) -> SmallBatches | None:
    """The test of which batches of this Spark run process in the driver's process
    (``transactional.engine.placement``): batches of DRPC calls, at most
    ``drpc_on_driver_max_calls`` (None, "auto": ``drpc_batch_size`` on a local master,
    within a work budget), and of sized spouts' records (Kafka), at most
    ``driver_batch_max_records`` (the same "auto", and then one batch at a time within
    ``placement.DRIVER_SHARE`` of the driver's time); None when no batch does (both 0, a
    cluster master under "auto", or commits on the executors: their processing output
    stays on the executors)."""
    if ctx.plan.commits_on_executors:
        return None
    calls, calls_auto = max_calls(ctx.config, master)
    records, records_auto = max_records(ctx.config, master)
    sized = sized_rules(ctx.topology, records)
    rules = {**driver_rules(ctx.topology, calls), **sized}
    auto = (calls_auto and calls > 0) or (records_auto and records > 0)
    # "auto" with sized spouts: also the driver's utilization bound (one batch at a time there)
    load = DriverLoad() if records_auto and sized else None
    return SmallBatches(rules, DRIVER_BUDGET_SECS if auto else None, load) if rules else None


class Attempts:
    """The engine's side of the coordinator's actions: the processing jobs in flight
    (driver threads), their results, and the commit in the main thread."""

    def __init__(self, ctx: RunContext, jobs: Jobs, store: CoordinatorStore, runner: TopologyRunner,
                 wakeup: Wakeup | None = None) -> None:
        self.ctx = ctx
        #: what ``wait`` sleeps on: set when a job ends (and by whoever else wakes the driver)
        self.wakeup = wakeup if wakeup is not None else Wakeup()
        # spouts whose input arrives as events (DRPC requests) wake the driver: no idle polling for them
        self.woken_by = [c for c in runner.spout_coordinators().values() if isinstance(c, WakesDriver)]
        #: a coordinator held back a part batch while a job ran: plan again when one ends
        self.gathering = False
        for c in self.woken_by:
            c.wake_on_input(self.wakeup.input)
            c.gather_while(self._busy)
        self.jobs = jobs
        self.store = store
        self.runner = runner
        self.pool = JobThreads(runner.in_flight(), "trident-batch")
        self.running: dict[cf.Future[Any], tuple[int, int]] = {}
        self.group_of: dict[cf.Future[Any], str] = {}     # every job in flight, cancelled ones too
        self.groups: dict[tuple[int, int], str] = {}      # attempts whose job counts
        self.results: dict[tuple[int, int], ProcessingResult] = {}

    def carry_out(self, a: Action, coord: Coordinator) -> list[Action]:
        """Do what ``a`` asks; return the coordinator's answer to its outcome."""
        now = time.monotonic
        if isinstance(a, Plan):
            planned = self.runner.planner.plan(a.txid, a.partitions, a.keep)
            meta, parts = planned if planned is not None else (None, None)
            return coord.planned(a.txid, meta, parts, now(), busy=self.runner.planner.busy(),
                                 backlogged=self.runner.planner.backlogged())
        if isinstance(a, Launch):
            # durable before any task of the attempt runs
            self.store.write_pending(a.txid, a.meta, a.attempt, list(a.commit_started))
            crash_point("process.after_meta", txid=a.txid)
            tid = self.ctx.topology.topology_id
            group = f"trident-{tid}-{a.txid}-{a.attempt}-{uuid.uuid4().hex[:6]}"
            self.groups[(a.txid, a.attempt)] = group
            fut = self.pool.submit(self._process, TransactionAttempt(a.txid, a.attempt), a.meta,
                                   coord.last_committed, group, self.runner.planner.fed(a.txid))
            self.running[fut] = (a.txid, a.attempt)
            self.group_of[fut] = group
            fut.add_done_callback(self._ended)
            return []
        if isinstance(a, Record):
            self.store.write_pending(a.txid, a.meta, a.attempt, list(a.commit_started))
            return []
        if isinstance(a, Cancel):
            self.runner.planner.discard(a.txid)
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
                info = self.runner.commit(a, r, self.jobs)
            except AttemptFailed as e:
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
                type(e).__name__, "cancelled" if cancelled else fatal or spark_error(e), "")])

    def _busy(self) -> bool:
        """True while a processing job runs (asked by the spouts' coordinators on this, the
        main, thread, in ``is_ready``): what arrives meanwhile gathers for the next batch,
        which the driver plans when a job ends (``wait``)."""
        if any(not f.done() for f in self.running):
            self.gathering = True
            return True
        return False

    def _ended(self, fut: cf.Future[Any]) -> None:
        """A job's future is done (on the job's thread): wake the driver."""
        self.wakeup.set()

    def wait(self, coord: Coordinator, timeout: float) -> list[Action]:
        """Wait up to ``timeout`` for the wakeup (a processing job ended, input arrived, the
        operator asked); report the ended jobs."""
        if not any(f.done() for f in self.running):
            self.wakeup.wait(timeout)
        done = [f for f in self.running if f.done()]
        actions: list[Action] = []
        if self.wakeup.take_input():
            actions += coord.ready(time.monotonic())      # a spout has input: plan now, not at the next poll
        for fut in sorted(done, key=lambda f: self.running[f]):
            txid, attempt = self.running.pop(fut)
            self.group_of.pop(fut, None)
            if (txid, attempt) not in self.groups:
                log.debug("txid %d attempt %d: the job of a cancelled attempt ended", txid, attempt)
                continue                          # cancelled: its result is void
            r: ProcessingResult = fut.result()
            log.debug("txid %d attempt %d: processing job ended in %.3f s (%d failure(s))", txid, attempt,
                      r.seconds, len(r.failures))
            if r.failures:
                actions += coord.failed(txid, attempt, first_failure(r.failures), time.monotonic())
            else:
                self.results[(txid, attempt)] = r
                actions += coord.processed(txid, attempt, r.actual or None, time.monotonic())
        if done and self.gathering:
            self.gathering = False
            actions += coord.ready(time.monotonic())     # what gathered while the job ran: plan it now
        return actions

    def close(self, wait_secs: float = STOP_WAIT_SECS) -> None:
        """The run stops: cancel every processing job in flight, those of attempts cancelled
        before, and wait at most ``wait_secs`` for them (a job's cancel is asked again while
        it runs). The job threads are daemons: what still runs then does not hold the process."""
        for c in self.woken_by:
            c.wake_on_input(None)
            c.gather_while(None)
        self.groups.clear()
        self.pool.shutdown()                      # attempts not started yet never start
        running = {f: g for f, g in self.group_of.items() if not f.done()}
        deadline = time.monotonic() + wait_secs
        while running and time.monotonic() < deadline:
            for group in running.values():
                self.jobs.cancel(group)
            done, _ = cf.wait(list(running), timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            for f in done:
                del running[f]
        if running:
            log.warning("%d processing job(s) still running %g s after the run stopped; it ends without them: %s",
                        len(running), wait_secs, ", ".join(sorted(running.values())))


class JobThreads:
    """At most ``workers`` jobs at once, each on a daemon thread: a job that does not end
    when cancelled (a user function that never returns, in this process) cannot keep the
    process from exiting, as a ``ThreadPoolExecutor``'s threads would."""

    def __init__(self, workers: int, name: str) -> None:
        self.queue: queue.SimpleQueue[tuple[cf.Future[Any], Any, tuple[Any, ...]] | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                        for i in range(max(1, workers))]
        for t in self.threads:
            t.start()

    def submit(self, fn: Any, *args: Any) -> cf.Future[Any]:
        """Run ``fn(*args)`` on the next free thread; its future."""
        fut: cf.Future[Any] = cf.Future()
        self.queue.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while (item := self.queue.get()) is not None:
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(e)

    def shutdown(self) -> None:
        """Cancel the jobs not started; each thread ends after its job."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in self.threads:
            self.queue.put(None)


def add_report(rep: PhaseReport, executed: dict[str, Any], emitted: dict[str, Any], busy: dict[str, Any] | None = None,
               metrics: dict[str, Any] | None = None) -> None:
    """Raise the report's first failure as ``AttemptFailed``, else add its counters (the
    seconds its tasks ran to ``busy``, the user's metrics to ``metrics``)."""
    if rep.failures:
        raise AttemptFailed(first_failure(rep.failures))
    if metrics is not None:
        fold_committed(metrics, rep.metrics)
    for total, counts in ((executed, rep.executed), (emitted, rep.emitted),
                          (busy if busy is not None else {}, rep.busy)):
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v


def first_failure(failures: list[TaskFailure]) -> TaskFailure:
    """The most telling failure of an attempt: fatal before others, user code before Spark."""
    return sorted(failures, key=lambda f: (f.kind != "fatal", f.component == "(spark job)"))[0]


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt))(: .*)?$")


def spark_error(e: BaseException) -> str:
    """The Python exception inside a Py4JJavaError's text, else its first line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    py = [ln for ln in lines if _EXC_LINE.match(ln) and not ln.startswith(("org.", "java.", "py4j."))]
    if py:
        return py[-1][:500]
    return (lines[0] if lines else repr(e))[:500]
