"""The driver: coordinator, pipelined processing jobs, strictly ordered commits (DESIGN §4).

Per txid: plan its metadata and write it durably; run its processing phase as a Spark
job from a driver thread (up to ``max_spout_pending`` at once); when it is the oldest
in flight and processed, run its commit phase here, in the main thread, while later
txids keep processing.

Commit of txid t (``Engine._commit``):
  1. txid t-1 is committed (commits are taken strictly in order by the main loop);
  2. check that this driver still holds the topology's lock;
  3. run the committers and the bolts downstream of them, maps in ``begin_commit(t)``;
  4. ``commit(t)`` the maps;
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
from dataclasses import dataclass
from typing import Any, Callable

from state.base import TransactionalState, open_transactional_state
from state.map import MapState, OpaqueMap, TransactionalMap, open_map_backing
from transactional._faults import crash_point
from transactional._gc import paused_gc
from transactional._spark import JobPlanner, ProcessingResult, get_or_create_context
from transactional._spout import SpoutPlanner
from transactional._store import CoordinatorStore
from transactional._task import KEY_STRIDE, TaskFailure, run_task
from transactional.config import TopologyConfig
from transactional.exceptions import ConfigError, TopologyFailedError
from transactional.result import RunResult
from transactional.topology import Topology, TransactionalTopologyBuilder
from transactional.tuples import TransactionAttempt

log = logging.getLogger("trident")


class StateRegistry:
    """The maps of a run, on the driver: one per state name, over the configured backing."""

    def __init__(self, config: TopologyConfig, topology_id: str) -> None:
        self.config = config
        self.topology_id = topology_id
        self.maps: dict[str, MapState] = {}
        self.txid: int | None = None
        self.attempt: int | None = None
        self.superseded: dict[int, set[int]] = {}

    def map_state(self, name: str, opaque: bool = False) -> MapState:
        m = self.maps.get(name)
        kind = OpaqueMap if opaque else TransactionalMap
        if m is None:
            backing = open_map_backing(self.config.state, f"{self.topology_id}:{name}", **self.options())
            m = self.maps[name] = kind(backing)
            m.superseded = self.superseded
        elif type(m) is not kind:
            raise ConfigError(f"map state {name!r} is used both as {type(m).__name__} and as "
                              f"{kind.__name__}; one name, one kind")
        if self.txid is not None and m._txid != self.txid:
            m.begin_commit(self.txid, self.attempt, self.superseded)
        return m

    def options(self) -> dict:
        opts = dict(self.config.state_options)
        if not self.config.state.startswith("memory:"):
            opts.setdefault("connect_timeout", self.config.connect_timeout_secs)
        return opts

    def check(self) -> None:
        """Reach the configured state once before any batch (clear error when it cannot)."""
        if not self.config.state.startswith("memory:"):
            open_map_backing(self.config.state, f"{self.topology_id}:~check", **self.options())

    def existing(self, name: str, opaque: bool | None = None) -> MapState:
        if name not in self.maps:
            self.map_state(name, bool(opaque))
        return self.maps[name]

    def begin(self, txid: int, attempt: int) -> None:
        self.txid, self.attempt = txid, attempt
        for m in self.maps.values():
            m.begin_commit(txid, attempt, self.superseded)

    def commit(self, txid: int) -> None:
        for m in self.maps.values():
            m.commit(txid)
        self.txid = None

    def abort(self) -> None:
        for m in self.maps.values():
            m._txid = None
        self.txid = None


@dataclass
class InFlight:
    txid: int
    attempt: TransactionAttempt
    meta: Any
    partitions: dict | None
    group: str
    first_emitted: float
    started: float = 0.0
    future: cf.Future | None = None
    cancelled: bool = False


class _Failure(Exception):
    def __init__(self, failure: TaskFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


def run_topology(topology: Topology | TransactionalTopologyBuilder, config: TopologyConfig | None = None,
                 max_batches: int | None = None, *, spark_context: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None) -> RunResult:
    """Run ``topology`` until its spout has nothing more (see ``idle_timeout_secs``) or
    ``max_batches`` batches were committed, and return a ``RunResult``.

    Resumes from the coordinator state: a topology id that committed txids before goes
    on at the next one, replaying stored metadata of uncommitted txids first. Raises
    ``TopologyFailedError`` naming txid, component, task and cause when a txid fails
    ``max_attempts`` times or a task breaks the tuple contract.
    """
    if isinstance(topology, TransactionalTopologyBuilder):
        topology = topology.build()
    if config is None:
        config = TopologyConfig()
    if max_batches is not None and (not isinstance(max_batches, int) or max_batches < 0):
        raise ConfigError(f"max_batches must be an int >= 0 or None; got {max_batches!r}")
    return Engine(topology, config, spark_context, on_commit).run(max_batches)


class Engine:
    def __init__(self, topology: Topology, config: TopologyConfig, sc: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None) -> None:
        self.topology = topology
        self.config = config
        self.sc = sc
        self.on_commit = on_commit
        self.conf = {"topology.id": topology.topology_id, **config.conf}
        self.result = RunResult(topology.topology_id, _spout_id=topology.spout_id)
        self.states = StateRegistry(config, topology.topology_id)
        self.result._states = self.states
        self.progress = config.progress if config.progress is not None else sys.stderr.isatty()

    # -- the run --------------------------------------------------------------------------
    def run(self, max_batches: int | None) -> RunResult:
        t0 = self.started = time.monotonic()
        owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        state = open_transactional_state(self.config.coordination, self.topology.topology_id,
                                         **self._coordination_options())
        try:
            wait = self.config.lock_wait_secs
            state.acquire_lock(owner, wait=wait != 0, timeout=wait)
            self.states.check()
            planner = SpoutPlanner(self.topology.spout.new_instance(), self.conf, self.topology.topology_id,
                                   self.topology.spout_id, self.topology.spout.parallelism)
            try:
                self.sc = self.sc or get_or_create_context(self.config, f"trident-{self.topology.topology_id}")
                jobs = JobPlanner(self.sc, self.topology, self.conf, owner)
                try:
                    self._loop(state, planner, jobs, max_batches)
                finally:
                    jobs.close()
            finally:
                planner.close()
        finally:
            state.close()
            self.result.wall_secs = time.monotonic() - t0
        return self.result

    def _coordination_options(self) -> dict:
        if self.config.coordination.startswith("zk:"):
            return {"auth": self.config.coordination_auth, "connect_timeout": self.config.connect_timeout_secs}
        return {}

    def _loop(self, state: TransactionalState, planner: SpoutPlanner, jobs: JobPlanner,
              max_batches: int | None) -> None:
        cfg, res = self.config, self.result
        store = CoordinatorStore(state)
        rec = store.recover()
        committed, committed_meta, committed_parts = rec.last_committed, rec.committed_meta, rec.partitions
        # transactional spouts replay stored metadata unchanged; opaque ones plan again
        replay = {} if planner.kind == "opaque" else {t: r["meta"] for t, r in rec.pending.items()}
        attempts = {t: r.get("attempts", 0) for t, r in rec.pending.items()}
        commit_started = {t: list(r.get("commit_started") or []) for t, r in rec.pending.items()}
        self.states.superseded.update(rec.superseded)
        failures_of: dict[int, int] = {}
        not_before: dict[int, float] = {}   # txid -> earliest re-emit (backoff after failures)
        limit = None if max_batches is None else committed + max_batches
        if rec.pending:
            log.info("%s: resuming after txid %d; %d uncommitted txid(s) to %s", self.topology.topology_id,
                     committed, len(rec.pending), "plan again" if planner.kind == "opaque" else "replay")
        inflight: list[InFlight] = []
        next_txid = committed + 1
        idle_since: float | None = None
        last_progress = time.monotonic()
        pool = cf.ThreadPoolExecutor(max_workers=cfg.max_spout_pending, thread_name_prefix="trident-batch")

        def prev_of(txid: int) -> tuple[Any, dict | None]:
            for f in inflight:
                if f.txid == txid - 1:
                    return f.meta, f.partitions
            return committed_meta, committed_parts

        def launch(f: InFlight) -> None:
            f.started = time.monotonic()
            f.future = pool.submit(self._process, jobs, f, committed)
            res.attempts += 1

        def fail_from(txid: int, failure: TaskFailure | None) -> None:
            """Fail ``txid`` and every later txid in flight; queue them for re-emission.
            ``failure`` None: not a failure of ``txid`` itself (an earlier batch ended
            short), so it does not count towards ``max_attempts``."""
            nonlocal next_txid
            doomed = [f for f in inflight if f.txid >= txid]
            for f in doomed:
                f.cancelled = True
                jobs.cancel(f.group)
            if failure is not None:
                res.failures.append(failure.describe())
                log.warning("batch failed: %s", failure.describe())
                count_failure(txid, failure)
            for f in doomed:
                try:
                    f.future.result()
                except Exception:  # noqa: BLE001 - a cancelled job raises; it is being replayed
                    pass
                inflight.remove(f)
                if planner.kind != "opaque":
                    replay[f.txid] = f.meta
            next_txid = txid

        def count_failure(txid: int, failure: TaskFailure) -> None:
            """Stop the run on a fatal failure or the ``max_attempts``-th failure of txid."""
            if failure.kind == "fatal":
                raise TopologyFailedError(f"stopped: {failure.describe()}", txid=failure.txid,
                                          component=failure.component, task=failure.task,
                                          cause=failure.message)
            failures_of[txid] = failures_of.get(txid, 0) + 1
            not_before[txid] = time.monotonic() + min(
                cfg.retry_backoff_max_secs, cfg.retry_backoff_secs * 2 ** (failures_of[txid] - 1))
            if failures_of[txid] >= cfg.max_attempts:
                raise TopologyFailedError(
                    f"txid {txid} failed {failures_of[txid]} times (max_attempts={cfg.max_attempts}); "
                    f"last failure: {failure.describe()}\n{failure.traceback}",
                    txid=txid, component=failure.component, task=failure.task, cause=failure.message)

        try:
            while True:
                # -- emit: plan new txids while fewer than max_spout_pending are in flight
                backing_off = False
                while len(inflight) < cfg.max_spout_pending and (limit is None or next_txid <= limit):
                    txid = next_txid
                    if time.monotonic() < not_before.get(txid, 0.0):
                        backing_off = True   # a failed txid waits before its replay
                        break
                    if txid in replay:
                        meta = replay.pop(txid)
                        _, prev_parts = prev_of(txid)
                        parts = _advance(prev_parts, meta) if planner.partitioned else None
                    else:
                        prev_meta, prev_parts = prev_of(txid)
                        planned = planner.plan(txid, prev_meta, prev_parts)
                        if planned is None:
                            break
                        meta, parts = planned
                    attempts[txid] = attempts.get(txid, 0) + 1
                    store.write_pending(txid, meta, attempts[txid], commit_started.get(txid, ()))  # durable before any task runs
                    crash_point("process.after_meta", txid=txid)
                    f = InFlight(txid, TransactionAttempt(txid, attempts[txid]), meta, parts,
                                 f"trident-{self.topology.topology_id}-{txid}-{attempts[txid]}-{uuid.uuid4().hex[:6]}",
                                 first_emitted=time.monotonic())
                    inflight.append(f)
                    launch(f)
                    next_txid += 1

                if not inflight and backing_off:
                    time.sleep(max(0.0, min(cfg.poll_interval_secs, not_before[next_txid] - time.monotonic())))
                    continue
                if not inflight:
                    if limit is not None and next_txid > limit:
                        res.stopped_because = "max_batches"
                        return
                    now = time.monotonic()
                    idle_since = idle_since or now
                    if cfg.idle_timeout_secs is not None and now - idle_since >= cfg.idle_timeout_secs:
                        res.stopped_because = "spout has nothing more"
                        return
                    time.sleep(cfg.poll_interval_secs)
                    continue
                idle_since = None

                # -- wait for the oldest batch, any failure, or a timeout
                if not inflight[0].future.done():
                    running = [f.future for f in inflight if not f.future.done()]
                    deadline = min(f.started + cfg.message_timeout_secs for f in inflight)
                    timeout = max(0.0, deadline - time.monotonic())
                    if len(inflight) < cfg.max_spout_pending:
                        timeout = min(timeout, cfg.poll_interval_secs)   # keep planning new data
                    cf.wait(running, timeout=timeout, return_when=cf.FIRST_COMPLETED)

                failed = None
                for f in inflight:
                    if f.future.done():
                        r: ProcessingResult = f.future.result()
                        if r.failures:
                            failed = (f.txid, _first(r.failures))
                            break
                        if planner.kind == "opaque" and r.actual and r.actual != f.meta:
                            # the emitter delivered less: record what it did, re-plan later txids
                            f.meta = {p: r.actual.get(p, m) for p, m in f.meta.items()}
                            f.partitions = _advance(prev_of(f.txid)[1], f.meta)
                            store.write_pending(f.txid, f.meta, attempts[f.txid], commit_started.get(f.txid, ()))
                            later = [g for g in inflight if g.txid > f.txid]
                            if later:
                                log.info("txid %d emitted less than planned; txids %d.. are planned "
                                         "again from where it ended", f.txid, later[0].txid)
                                fail_from(later[0].txid, None)
                            break
                    elif time.monotonic() - f.started >= cfg.message_timeout_secs:
                        failed = (f.txid, TaskFailure("(spark job)", -1, f.txid, f.attempt.attempt_id, "error",
                                                      "Timeout", f"not processed within message_timeout_secs="
                                                      f"{cfg.message_timeout_secs}; its job was cancelled", ""))
                        break
                if failed:
                    fail_from(*failed)
                    continue

                # -- commit, strictly in txid order
                while inflight and inflight[0].future.done():
                    f = inflight[0]
                    r = f.future.result()
                    if r.failures:
                        break
                    if planner.kind == "opaque" and r.actual and {p: r.actual.get(p, m) for p, m in f.meta.items()} != f.meta:
                        break  # handled above on the next pass
                    try:
                        self._commit(f, r, store, planner, state, commit_started.setdefault(f.txid, []))
                    except _Failure as e:
                        fail_from(f.txid, e.failure)
                        break
                    inflight.pop(0)
                    committed, committed_meta, committed_parts = f.txid, f.meta, f.partitions
                    commit_started.pop(f.txid, None)
                    failures_of.pop(f.txid, None)
                    not_before.pop(f.txid, None)
                    if self.progress and time.monotonic() - last_progress > 2:
                        last_progress = time.monotonic()
                        self._log_progress()
        finally:
            for f in inflight:
                f.cancelled = True
                jobs.cancel(f.group)
            pool.shutdown(wait=True, cancel_futures=True)
            if self.progress:
                self._log_progress()

    # -- processing (driver threads) -------------------------------------------------------
    def _process(self, jobs: JobPlanner, f: InFlight, cleanup_before: int) -> ProcessingResult:
        try:
            return jobs.run(f.attempt, f.meta, cleanup_before, f.group)
        except Exception as e:  # noqa: BLE001 - a failed or cancelled Spark job
            return ProcessingResult(f.attempt, failures=[TaskFailure(
                "(spark job)", -1, f.txid, f.attempt.attempt_id, "error", type(e).__name__,
                "cancelled" if f.cancelled else _spark_error(e), "")])

    # -- commit (main thread) ----------------------------------------------------------------
    def _commit(self, f: InFlight, r: ProcessingResult, store: CoordinatorStore,
                planner: SpoutPlanner, state: TransactionalState, commit_started: list[int]) -> None:
        txid, t0 = f.txid, time.monotonic()
        # Step 1. txid-1 is committed: the main loop commits strictly in order.
        # Step 2. this driver still holds the lock (LeadershipLostError stops the run).
        state.check_lock()
        # Step 3. committers and the bolts downstream of them, maps in begin_commit(txid);
        # first note durably that this attempt's commit began (it may write user state).
        commit_started.append(f.attempt.attempt_id)
        store.write_pending(txid, f.meta, f.attempt.attempt_id, commit_started)
        crash_point("commit.before", txid=txid)
        self.states.begin(txid, f.attempt.attempt_id)
        executed, emitted = dict(r.executed), dict(r.emitted)
        try:
            with paused_gc():
                self._run_commit_components(f.attempt, r.records, executed, emitted)
            # Step 4. the maps' commit.
            self.states.commit(txid)
        except _Failure:
            self.states.abort()
            raise
        crash_point("commit.before_record", txid=txid)
        # Step 5. record txid as committed, with its metadata and the partition state
        # (first, attempts of txid whose commit began and failed, if any).
        failed_commits = set(commit_started) - {f.attempt.attempt_id}
        if failed_commits:
            self.states.superseded[txid] = failed_commits
            store.record_superseded(self.states.superseded)
        store.record_commit(txid, f.meta, f.partitions)
        crash_point("commit.after_record", txid=txid)
        # Step 6. drop its metadata.
        store.drop_pending(txid)
        # Step 7. tell the coordinator (emitters get cleanup_before with the next batch).
        try:
            planner.committed(txid, f.meta)
        except Exception as e:  # noqa: BLE001 - informational hook
            log.warning("spout coordinator's committed(%d) failed: %r", txid, e)
        res = self.result
        res.first_txid = res.first_txid or txid
        res.last_txid = txid
        res.batches_committed += 1
        now = time.monotonic()
        res.commit_latencies.append(now - f.first_emitted)
        res.commit_phase_secs.append(now - t0)
        res.processing_secs.append(r.seconds)
        for k, v in executed.items():
            res.executed[k] = res.executed.get(k, 0) + v
        for k, v in emitted.items():
            res.emitted[k] = res.emitted.get(k, 0) + v
        if self.on_commit is not None:
            self.on_commit(txid, res)

    def _run_commit_components(self, attempt: TransactionAttempt, records: list,
                               executed: dict, emitted: dict) -> None:
        topo = self.topology
        inbox: dict[int, list] = {}
        for key, payload in records:
            inbox.setdefault(key, []).append(payload)
        for ci, comp in enumerate(topo.components):
            if comp.id not in topo.commit_components:
                continue
            for task in range(comp.parallelism):
                try:
                    out, n, e = run_task(topo, comp, task, attempt, inbox.pop(ci * KEY_STRIDE + task, ()),
                                         self.conf, "commit", self.states)
                except Exception as exc:  # noqa: BLE001 - becomes a batch failure (fatal kinds stop the run)
                    raise _Failure(TaskFailure.of(exc, comp.id, task, attempt)) from exc
                crash_point("commit.after_task", txid=attempt.txid, component=comp.id, task=task)
                executed[comp.id] = executed.get(comp.id, 0) + n
                emitted[comp.id] = emitted.get(comp.id, 0) + e
                for key, payload in out:
                    inbox.setdefault(key, []).append(payload)

    def _log_progress(self) -> None:
        r = self.result
        secs = time.monotonic() - self.started
        log.info("%s: committed txid %d: %d batches, %d attempts (%d failed), %d tuples, %.0f tuples/s",
                 r.topology_id, r.last_txid, r.batches_committed, r.attempts, len(r.failures), r.tuples,
                 r.tuples / secs if secs > 0 else 0.0)


def _advance(parts: dict | None, meta: Any) -> dict:
    out = dict(parts or {})
    out.update(meta or {})
    return out


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
