"""The driver: coordinator, pipelined processing jobs, strictly ordered commits (docs/design.md §4).

Per txid: plan its metadata and write it durably; run its processing phase as a Spark
job from a driver thread (up to ``max_spout_pending`` at once); when it is the oldest
in flight and processed, run its commit phase here, in the main thread, while later
txids keep processing.

What depends on the topology's kind -- planning a txid, what the driver feeds its job,
the hooks of its commit (``transactional.engine.commit.CommitProtocol``), the spouts'
timers -- is the kind's runner (``transactional.engine.runner.TransactionalRunner``,
``transactional.engine.core.runner.CoreRunner``), picked once, from ``RUNNERS``; the loop
here and the commit protocol are the same for both.

Failure of attempt (t, a) -- a task failure, a failed or timed-out job, a failed commit
-- fails t and every later txid in flight: their jobs are cancelled and each is
re-emitted with a new attempt id (transactional spouts: the stored metadata unchanged;
opaque spouts: planned again from where the previous batch ended).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from state.base import TransactionalState, open_transactional_state
from transactional.config import TopologyConfig
from transactional.engine import layout
from transactional.engine.attempts import Attempts, Jobs
from transactional.engine.context import RunContext
from transactional.engine.coordinator import (
    Action,
    Cancel,
    Commit,
    Coordinator,
    Recovered,
    Stop,
)
from transactional.engine.core.runner import CoreRunner
from transactional.engine.drpc import drpc_spouts
from transactional.engine.drpc.remote import drpc_token
from transactional.engine.events import Tally, Transition
from transactional.engine.executors import InProcessExecutor
from transactional.engine.faults import crash_point
from transactional.engine.maps import StateRegistry
from transactional.engine.plan import compile_plan
from transactional.engine.runner import TopologyRunner, TransactionalRunner
from transactional.engine.store import CoordinatorStore
from transactional.engine.user_states import MIGRATIONS, check_factories, forget_states
from transactional.engine.wakeup import Wakeup
from transactional.exceptions import ConfigError, LockHeldError
from transactional.result import RunResult
from transactional.topology import Topology, TransactionalTopologyBuilder, as_topology

log = logging.getLogger("trident")
#: the longest the driver waits before it looks at the operator's requests again
CONTROL_CHECK_SECS = 0.25


def run_topology(topology: Topology | TransactionalTopologyBuilder | Any, config: TopologyConfig | None = None,
                 max_batches: int | None = None, *, spark_context: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None,
                 on_start: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time, watch: RunWatch | None = None) -> RunResult:
    """Run ``topology`` until its spout has nothing more (see ``idle_timeout_secs``) or
    ``max_batches`` batches were committed, and return a ``RunResult``.

    The engine's run, with what ``watch`` adds (``RunWatch``, below):
    ``transactional.run_topology`` is this with the operator's tools
    (``transactional.ops.run``: progress lines, status record, status page, ``trident kill``).

    Resumes from the coordinator state: a topology id that committed txids before goes
    on at the next one, replaying stored metadata of uncommitted txids first. Raises
    ``TopologyFailedError`` naming txid, component, task and cause when a txid fails
    ``max_attempts`` times or a task breaks the tuple contract. ``clock``: the driver's
    wall clock (seconds), which gives each txid its time (processing-time windows).
    """
    topology = as_topology(topology, "run_topology")
    if config is None:
        config = TopologyConfig()
    if max_batches is not None and (not isinstance(max_batches, int) or max_batches < 0):
        msg = f"max_batches must be an int >= 0 or None; got {max_batches!r}"
        raise ConfigError(msg)
    return Engine(topology, config, spark_context, on_commit, on_start, clock, watch).run(max_batches)


class Engine:
    def __init__(self, topology: Topology, config: TopologyConfig, sc: Any = None,
                 on_commit: Callable[[int, RunResult], None] | None = None,
                 on_start: Callable[[], None] | None = None, clock: Callable[[], float] = time.time,
                 watch: RunWatch | None = None) -> None:
        #: the driver's wall clock (seconds): each txid's time, taken when its first commit
        #: begins (``CoordinatorStore.commit_time``; processing-time windows). Tests pass their own.
        self.clock = clock
        #: called once the run holds the lock and hears the operator (``LocalCluster``)
        self.on_start: Callable[[], None] = on_start if on_start is not None else _nothing
        self._on_commit = on_commit
        #: the topology as its file built it (``trident rebalance`` records counts over it)
        self.built = topology
        #: the rebalance that stopped this engine's run (``transactional.ops.control``), and the last one applied
        self.rebalance_asked: dict[str, Any] | None = None
        self.applied_rebalance = ""
        # commit components are pickled for executors only when the run places them there
        topology = topology.placed(config.commit_placement)
        self.topology = topology
        self.config = config
        self.sc = sc
        #: the runner of the topology's kind (the one place the driver asks what kind it runs)
        self.runner_class = RUNNERS[topology.kind]
        self.conf = {"topology.id": topology.topology_id, **config.conf, **self.runner_class.run_conf(topology)}
        if config.drpc_servers or drpc_spouts(topology):
            # Distributed RPC (transactional.engine.drpc): the spout's and the return bolt's settings
            self.conf.update({"drpc.servers": list(config.drpc_servers), "drpc.batch.size": config.drpc_batch_size,
                              "topology.max.attempts": config.max_attempts,
                              "drpc.request.timeout.secs": config.drpc_request_timeout_secs,
                              "drpc.on.driver.max.calls": config.drpc_on_driver_max_calls,
                              "drpc.token": drpc_token(config.drpc_token)})
        self.result = RunResult(topology.topology_id, _spout_ids=tuple(c.id for c in topology.spouts))
        self.plan = compile_plan(topology, config.commit_placement, self.runner_class.task_kind)
        self.driver_executor = InProcessExecutor()         # commit stages run in this process
        self.driver_shared = self.driver_executor.shared(topology)
        self.states = StateRegistry(config, topology.topology_id)
        self.result._states = self.states
        #: what the idle driver sleeps on (``transactional.engine.wakeup``): a job's end, a
        #: spout's input, the operator's request (``RunWatch`` may set it) wake it
        self.wakeup = Wakeup()
        #: what the caller adds to the run (``transactional.ops.run``: the operator's tools)
        self.watch = watch if watch is not None else RunWatch()
        #: who hears the coordinator's transitions: the result, the log, on_commit, then the watch's
        self.listeners: list[Callable[[Transition], None]] = [Tally(self.result)]
        self.listeners.append(_log_failure(topology.topology_id))
        self.listeners.append(_log_idle(topology, config.idle_timeout_secs, config.poll_interval_secs))
        if log.isEnabledFor(logging.DEBUG):
            self.listeners.append(_log_transition)
        # on_commit hears a commit before the progress line says it: whoever reads the line
        # (a person pressing Ctrl-C after "committed txid N") finds txid N recorded
        if on_commit is not None:
            self.listeners.append(lambda t: on_commit(t.txid, self.result) if t.kind == "committed" else None)

    # -- the run --------------------------------------------------------------------------
    def run(self, max_batches: int | None) -> RunResult:
        t0 = self.started = time.monotonic()
        try:
            self.watch.started(self)
            return self._run(t0, max_batches)
        finally:
            self.watch.ended()

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
            # the task counts rebalances gave, and one asked that no driver finished
            engine = self._rebalanced(state)
            # refuse, before anything is written, a version its stored state cannot follow
            layout.check(state, engine.topology, allow_dropped_state=self.config.allow_dropped_state)
            # refuse, before anything is written, state that would silently lose what was committed
            keeps = bool(store.recover_maps()) or self.runner_class.keeps_state(engine.topology)
            store.check_user_state(self.config.state, self.config.coordination, keeps_state=keeps,
                                   accept_loss=self.config.accept_state_loss)
            check_factories(engine.topology.user_states, engine.conf, engine.topology.topology_id)
            # a new lock holder takes a higher epoch, durably, and fences user state with it
            epoch = store.take_epoch()
            # a txid a crashed driver began to commit with other task counts: finished with them first
            engine._replay_with_recorded_tasks(state, store, owner, epoch)
            # the switch to a new version: its value versions and layout, recorded before its first txid
            switch = int((state.get("committed") or {}).get("txid") or 0) + 1
            crash_point("upgrade.before_record", txid=switch)
            layout.record_versions(state, engine.topology)     # a declared migration: from the next txid
            layout.record(state, engine.topology)
            crash_point("upgrade.recorded", txid=switch)
            engine._run_locked(state, store, owner, epoch, max_batches)
            while engine.rebalance_asked is not None:      # `trident rebalance`: on with the new task counts
                engine = engine._rebalance(state, store, owner, epoch, max_batches)
        finally:
            state.close()
            forget_states(self.topology.topology_id)   # the user states this process kept (trident.state)
            self.result.wall_secs = time.monotonic() - t0
        return self.result

    def _sibling(self, topology: Topology) -> Engine:
        """An engine for ``topology`` (other task counts) that goes on with this run: the
        same result, maps, hooks, clock, Spark context and status page."""
        e = Engine(topology, self.config, self.sc, self._on_commit, None, self.clock, self.watch)
        e.result = self.result
        # this run's listeners (the watch's among them), the result's tally counting into the same result
        e.listeners = [Tally(self.result), *self.listeners[1:]]
        e.built, e.states = self.built, self.states   # one map registry for the run
        return e

    def _rebalanced(self, state: TransactionalState) -> Engine:
        """This engine, or one with the task counts ``trident rebalance`` gave (recorded,
        ``layout.rebalanced_tasks``), after finishing a rebalance asked that no driver
        finished (``transactional.ops.control``)."""
        req = layout.pending_rebalance(state)
        if req is not None and float(req.get("not_before") or 0) <= time.time():   # a wait: the run does it
            tasks = {str(c): int(n) for c, n in req["tasks"].items()}
            try:
                layout.check_rebalance(layout.layout_of(self.topology), tasks, self.topology.topology_id)
                log.info("%s: finishing the rebalance to %s asked by %s", self.topology.topology_id, tasks,
                         req.get("by"))
            except layout.RebalanceRefusedError as e:
                log.warning("%s", e)
                tasks = {}
            crash_point("rebalance.before_record")
            layout.record_rebalanced(state, self.built, str(req["id"]), tasks)
            crash_point("rebalance.recorded")
        tasks = layout.rebalanced_tasks(state, self.built)
        engine = self if all(self.topology.component(c).parallelism == n for c, n in tasks.items()) \
            else self._sibling(self.topology.with_tasks(tasks))
        engine.applied_rebalance = str(layout.rebalanced(state).get("id") or "")
        return engine

    def _rebalance(self, state: TransactionalState, store: CoordinatorStore, owner: str, epoch: int,
                   max_batches: int | None) -> Engine:
        """The run stopped for ``trident rebalance`` after its last commit (nothing in flight
        has begun to commit): record the new task counts in one write -- a driver killed
        before it runs the old counts, after it the new ones -- and go on with them."""
        req = self.rebalance_asked or {}
        tid = self.topology.topology_id
        tasks = {str(c): int(n) for c, n in (req.get("tasks") or {}).items()}
        try:
            layout.check_rebalance(layout.layout_of(self.topology), tasks, tid)
        except layout.RebalanceRefusedError as e:
            log.warning("%s", e)
            tasks = {}
        crash_point("rebalance.before_record")
        layout.record_rebalanced(state, self.built, str(req.get("id")), tasks)
        crash_point("rebalance.recorded")
        forget_states(tid)
        engine = self._sibling(self.topology.with_tasks(tasks))
        engine.applied_rebalance = str(req.get("id"))
        layout.record(state, engine.topology)
        log.info("%s: rebalanced to %s after txid %d; going on", tid,
                 ", ".join(f"{c}={n}" for c, n in sorted(tasks.items())) or "the same task counts",
                 self.result.last_txid or 0)
        left = None if max_batches is None else max(0, max_batches - self.result.batches_committed)
        engine._run_locked(state, store, owner, epoch, left)
        return engine

    def _replay_with_recorded_tasks(self, state: TransactionalState, store: CoordinatorStore, owner: str,
                                    epoch: int) -> None:
        """Replay the pending txids whose commit began with the task counts the layout
        recorded (``transactional.engine.layout``), when the topology's differ, so that
        every task undoes or skips exactly what it wrote of them; then the new counts."""
        if self.topology.kind != "transactional":
            return       # core topologies: stateful bolts move their state at a checkpoint (engine/core)
        rec = store.recover()
        old = layout.replay_tasks(layout.recorded(state), self.topology, rec.pending)
        if old is None:
            return
        last = layout.started_txids(rec.pending)[-1]
        log.info("%s: txid(s) %d..%d began to commit with task counts %s; replaying them with those counts "
                 "before the new ones take over", self.topology.topology_id, rec.last_committed + 1, last,
                 ", ".join(f"{c}={n}" for c, n in sorted(old.items())))
        sub = self._sibling(self.topology.with_tasks(old))
        sub._run_locked(state, store, owner, epoch, last - rec.last_committed, status=False)
        self.sc = sub.sc
        forget_states(self.topology.topology_id)

    def _run_locked(self, state: TransactionalState, store: CoordinatorStore, owner: str, epoch: int,
                    max_batches: int | None, status: bool = True) -> None:
        """The run, holding the lock with ``epoch``; ``status``: keep the record ``trident status`` shows."""
        self.states.record_map = store.record_map
        self.conf[MIGRATIONS] = layout.versions(state)       # read by the stages that open maps
        ctx = self.context()
        runner = self.runner_class(ctx, state, store, epoch)
        # ``status`` False: a replay of txids begun with other task counts, before the run proper:
        # the watch (status record, operator's requests) is not told of it
        watch = self.watch if status else RunWatch()
        error: BaseException | None = None
        try:
            watch.locked(self, state, owner, runner)
            jobs = Jobs(ctx, owner, self.sc)
            self.sc = jobs.sc                   # the run's Spark context, for the runs that go on from this one
            try:
                self._loop(ctx, store, runner, jobs, max_batches, watch)
            finally:
                jobs.close()
        except BaseException as e:
            error = e
            raise
        finally:
            try:
                runner.planner.close(error is None)
            finally:
                watch.unlocking(error)

    def context(self) -> RunContext:
        """What this run's collaborators need of it (``RunContext``)."""
        return RunContext(self.topology, self.plan, self.config, self.conf, self.states, self.result, self.clock,
                          self.driver_executor, self.driver_shared)

    def _coordination_options(self) -> dict[str, Any]:
        if self.config.coordination.startswith("zk:"):
            return {"auth": self.config.coordination_auth, "connect_timeout": self.config.connect_timeout_secs}
        return {}

    def _loop(self, ctx: RunContext, store: CoordinatorStore, runner: TopologyRunner, jobs: Jobs,
              max_batches: int | None, watch: RunWatch) -> None:
        """Carry out the coordinator's actions until it says stop (see ``_coordinator``)."""
        rec = store.recover()
        self.states.known.update(rec.maps)
        self.states.last_committed = rec.last_committed
        coord = Coordinator(runner.settings(), runner.planner.policy,
                            Recovered(rec.last_committed, rec.committed_meta, rec.partitions, rec.pending),
                            max_batches)
        coord.listeners += [_heard_safely(listener) for listener in self.listeners]
        if rec.pending:
            log.info("%s: resuming after txid %d; %d uncommitted txid(s) to %s", self.topology.topology_id,
                     rec.last_committed, len(rec.pending), "replay" if runner.planner.policy.replays else "plan again")
        attempts = Attempts(ctx, jobs, store, runner, self.wakeup)
        clock = time.monotonic
        # `watch`: what an operator asks (`trident deactivate|activate|kill|rebalance`)
        pending: deque[Action] = deque(watch.requests(coord, clock()) + coord.start(clock()))
        self.on_start()
        try:
            while True:
                while pending:
                    a = pending.popleft()
                    if isinstance(a, Stop):
                        if a.error is not None:
                            raise a.error
                        return
                    pending += attempts.carry_out(a, coord)
                    # the operator is heard between any two actions, and right after a commit from
                    # the record read afresh: a kill that came during the commit stops the run before
                    # anything else -- the next Commit already asked for included
                    heard = watch.requests(coord, clock(), fresh=isinstance(a, Commit))
                    if any(isinstance(h, Stop) for h in heard):
                        pending = deque([p for p in pending if isinstance(p, Cancel)] + heard)
                    else:
                        pending += heard
                pending += watch.requests(coord, clock())
                if pending:
                    continue
                wakes = [w for w in (coord.next_wakeup(clock()), runner.planner.next_wakeup()) if w is not None]
                timeout = self.config.poll_interval_secs if not wakes else max(0.0, min(wakes) - clock())
                pending += attempts.wait(coord, min(timeout, CONTROL_CHECK_SECS))
                runner.planner.tick(clock())              # the spouts' timers (core topologies) before the coordinator's
                pending += coord.tick(clock())
                watch.between(runner, clock())
        finally:
            self.rebalance_asked = watch.rebalance_asked()
            attempts.close()
            watch.stopped()


class RunWatch:
    """What the caller of a run adds to it, hook by hook in the order the run calls them;
    each does nothing here. ``transactional.ops.run.OperatorWatch`` is the one the CLI,
    ``transactional.run_topology`` and ``LocalCluster`` use."""

    def started(self, engine: Engine) -> None:
        """The run begins, before it takes the topology's lock: add listeners to
        ``engine.listeners`` (they hear every transition, in that list's order)."""

    def locked(self, engine: Engine, state: TransactionalState, owner: str, runner: TopologyRunner) -> None:
        """The run holds the lock as ``owner`` on ``state``, and its ``runner`` is open."""

    def requests(self, coord: Coordinator, now: float, fresh: bool = False) -> list[Action]:
        """The coordinator's answer to what an operator asked since the last call
        (``fresh``: look again now, a commit just ended); called between any two actions."""
        return []

    def between(self, runner: TopologyRunner, now: float) -> None:
        """Between commits, at least every ``CONTROL_CHECK_SECS``."""

    def rebalance_asked(self) -> dict[str, Any] | None:
        """The rebalance (``trident rebalance``: ``{"id", "tasks": {component: n}, ...}``) that
        stopped the run's loop, if one did: the engine goes on with its task counts."""
        return None

    def stopped(self) -> None:
        """The run's loop ended (its jobs are cancelled)."""

    def unlocking(self, error: BaseException | None) -> None:
        """The run is about to let go of the lock; ``error``: what ended it, if anything."""

    def ended(self) -> None:
        """The run ended (the lock was let go, or never taken)."""


RUNNERS: dict[str, type[TopologyRunner]] = {"transactional": TransactionalRunner, "core": CoreRunner}


def _nothing() -> None:
    """No ``on_start`` hook."""


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


def _log_idle(topology: Topology, idle_timeout: float | None, poll: float) -> Callable[[Transition], None]:
    """One INFO line each time the run starts waiting for input: which spouts it asks, how
    often, and until when (nothing when ``idle_timeout_secs`` is 0: the run ends instead)."""
    spouts = ", ".join(f"{c.id!r} ({c.class_name})" for c in topology.spouts)
    until = "until stopped (idle_timeout_secs=None)" if idle_timeout is None else \
        f"for up to {idle_timeout:g} s (idle_timeout_secs), then the run ends"

    def hear(t: Transition) -> None:
        if t.kind == "idle" and idle_timeout != 0:
            log.info("%s: waiting for input: spout %s has nothing new; asking again every %g s %s",
                     topology.topology_id, spouts, poll, until)
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

