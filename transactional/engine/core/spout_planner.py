"""The driver side of core Storm topologies (docs/design.md §7): on the engine's one
coordinator and plan, a micro-batch is a txid.

* **Plan** of micro-batch t (``CoreSpoutPlanner.plan``): the spout tasks -- one instance each,
  opened once, on the driver -- are asked for tuples (``next_tuple``, round after round,
  while they emit, up to ``micro_batch_size`` tuples, ``poll_interval_secs`` of asking,
  and ``max_spout_pending`` tracked tuples per task). Each tuple emitted with a
  ``msg_id`` becomes a root the ackers track (``transactional.engine.core.acker``): ``ackers`` tables
  chosen by mod hashing of the root id, each entry the XOR of the ids in the tree. The
  metadata written before the batch runs is only its tuple count per spout; the tuples
  themselves stand for the spouts' stages in the processing job (``fed``).
* **Processing**: the bolts as Spark stages (``transactional.engine.core.task``); each task's
  acks come back XOR-combined per root.
* **Commit** of t, in txid order (``transactional.engine.commit.CommitProtocol`` with
  ``transactional.engine.core.runner.CoreCommit``; steps 2-4 in ``CoreSpoutPlanner.commit``):
  1. check the lock;
  2. run the stateful bolts and everything downstream of them on the driver, their
     states in ``transactional.engine.core.checkpoint.Checkpointer``;
  3. give the acks and fails of t's tasks to the ackers -- the stateful tasks' acks are
     held until the next checkpoint -- and tell the spout tasks what was decided;
  4. checkpoint when ``checkpoint_interval_ms`` passed;
  5. record t as committed, drop its metadata.
* **Failure** of micro-batch t (any task error, a failed or timed-out job, a failed
  commit): its roots still pending fail at once (the spouts replay them), and so do the
  roots whose acks a rolled-back checkpoint held. The coordinator plans t again from new
  ``next_tuple`` calls (``CoreReplay``); a txid failing ``max_attempts`` times stops the
  run naming component, task and exception.
* **Time** (``tick``): trees not completed within ``message_timeout_secs`` fail; a
  checkpoint falls due even when no micro-batch comes.

The run ends when the spouts have had nothing for ``idle_timeout_secs`` and no tree is
pending (``busy``), or after ``max_batches``; a final checkpoint releases held acks.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from state.base import TransactionalState
from transactional.config import TopologyConfig
from transactional.engine.coordinator import Commit
from transactional.engine.core.acker import Acker, acker_for
from transactional.engine.core.checkpoint import Checkpointer
from transactional.engine.core.task import TICKS, SpoutCollector, tick_freq
from transactional.engine.core.window_keeper import CoreStates, WindowKeeper
from transactional.engine.replay import CoreReplay
from transactional.engine.reports import PhaseReport
from transactional.engine.spout_planner import Planner, SpoutContext
from transactional.engine.task import Router
from transactional.exceptions import LeadershipLostError, TopologyFailedError, TridentError
from transactional.result import RunResult
from transactional.topology import Topology
from transactional.windowing import WINDOWED_KINDS

log = logging.getLogger("trident")


@dataclass
class _SpoutTask:
    spout_id: str
    index: int              # task index within the spout
    task_id: int            # global task id (what the ackers know)
    spout: Any
    collector: SpoutCollector
    pending: dict[int, Any] = field(default_factory=dict)     # root -> msg_id, undecided


@dataclass
class _Batch:
    roots: list[int]
    fed: dict[str, Any]
    ticks: dict[str, float] = field(default_factory=dict)    # bolt -> interval: they get a tick


def _call(t: _SpoutTask, method: str, *args: Any) -> None:
    """A spout task's method; what it raises stops the run, naming the spout and task (a
    spout runs on the driver: there is no task to retry, and its source keeps what it
    did not ack for the next run)."""
    try:
        getattr(t.spout, method)(*args)
    except TridentError:
        raise
    except Exception as e:
        msg = (f"spout {t.spout_id!r} task {t.index} raised in {method}: {type(e).__name__}: {e}; fix the "
               "spout or its source, then run the topology again (unacked tuples are replayed by a "
               "source that keeps them, e.g. RedisStreamSpout, KafkaSpout)")
        raise TopologyFailedError(msg, component=t.spout_id, task=t.index, cause=str(e)) from e


class CoreSpoutPlanner(Planner):
    """The spouts, ackers and checkpoints of a core topology's run (module docstring):
    a core topology's ``Planner``, with the acks and checkpoints of a micro-batch's
    commit (``commit``)."""

    def __init__(self, topology: Topology, config: TopologyConfig, conf: dict[str, Any], result: RunResult,
                 store: TransactionalState, state_options: dict[str, Any], clock: Callable[[], float] = time.monotonic,
                 epoch: int | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        self.topology = topology
        self.config = config
        self.result = result
        self.clock = clock
        self.policy = CoreReplay()
        self.tracking = config.ackers > 0
        self.ackers = [Acker(config.message_timeout_secs) for _ in range(config.ackers)]
        self.batches: dict[int, _Batch] = {}
        self.tasks: list[_SpoutTask] = []
        self.by_id: dict[int, _SpoutTask] = {}
        self.checkpointer: Checkpointer | None = None
        stateful = any(c.core in ("stateful", "swindowed") for c in topology.bolts)
        if stateful:
            self.checkpointer = Checkpointer(topology, config.state, state_options, store,
                                             config.checkpoint_interval_ms, clock, epoch, wall_clock=wall_clock)
            self.checkpointer.recover()
        seed = random.Random().getrandbits(31)
        try:
            for spec in topology.spouts:
                for i, task_id in enumerate(topology.task_ids(spec.id)):
                    collector = SpoutCollector(Router(topology, spec, i, None, seed=seed), self.tracking)
                    t = _SpoutTask(spec.id, i, task_id, spec.new_instance(), collector)
                    self.tasks.append(t)
                    self.by_id[task_id] = t
                    _call(t, "open", conf, SpoutContext(topology.topology_id, spec.id, i, spec.parallelism), collector)
        except BaseException:
            self.close(ok=False)
            raise
        for name in ("acked", "failed", "timed_out"):
            getattr(result, name).update({s.id: 0 for s in topology.spouts})
        # windows (kept here across micro-batches) and tick tuples (transactional.ticks)
        # processing time of windows: the driver's wall clock (``run_topology(clock=)``, a test driver's)
        self.windows = WindowKeeper(topology, wall_clock, self.origin) if any(c.core in WINDOWED_KINDS for c in topology.bolts) \
            else None
        self.tick_every = {c.id: f for c in topology.bolts
                           if (f := tick_freq(c, config.tick_tuple_freq_secs)) is not None}
        start = clock()
        self.last_tick = dict.fromkeys(self.tick_every, start)
        self.quiet_since: float | None = None      # since when the spouts have emitted nothing

    def _due_ticks(self, now: float) -> dict[str, float]:
        """The bolts whose tick interval passed since their last tick (they get one now)."""
        due = {c: f for c, f in self.tick_every.items() if now - self.last_tick[c] >= f}
        for c in due:
            self.last_tick[c] = now
        return due

    def _wants_batch(self, now: float) -> bool:
        """With nothing from the spouts: a micro-batch of no tuples is still due, because
        a processing-time window holding tuples must fire, or a tick is due while tuples
        are pending (so that what waits for time moves on)."""
        if self.windows is not None:
            due = self.windows.due_in()
            if due is not None and due <= 0:
                return True
            if self._input_ended(now):
                self.windows.final = True            # the pending windows fire in this micro-batch
                return True
        return bool(self.tick_every) and self.busy() and any(
            now - self.last_tick[c] >= f for c, f in self.tick_every.items())

    def _note_quiet(self, emitted: int, now: float) -> None:
        """Since when the spouts have emitted nothing (None: they just did)."""
        if emitted:
            self.quiet_since = None
        elif self.quiet_since is None:
            self.quiet_since = now

    def _input_ended(self, now: float) -> bool:
        """The spouts had nothing for ``idle_timeout_secs`` and every micro-batch before is
        committed, while windows that are not persistent hold tuples: the input is over
        (as a bounded input in Flink), so they fire and ack their tuples."""
        idle = self.config.idle_timeout_secs
        return (idle is not None and self.quiet_since is not None and now - self.quiet_since >= idle
                and not self.batches and self.windows is not None and self.windows.flushable())

    def conf_for(self, txid: int, conf: dict[str, Any]) -> dict[str, Any]:
        """``conf`` for the tasks of micro-batch ``txid``: with the bolts that get a tick."""
        b = self.batches.get(txid)
        return {**conf, TICKS: b.ticks} if b is not None and b.ticks else conf

    # -- planning a micro-batch -------------------------------------------------------------
    def plan(self, txid: int, states: dict[str, Any] | None, keep: Any = None) -> tuple[Any, Any] | None:
        """Fill micro-batch ``txid`` from the spout tasks (module docstring); None when
        they emitted nothing."""
        now = self.clock()
        self.tick(now)
        cap, limit = self.config.max_spout_pending, self.config.micro_batch_size
        deadline = now + self.config.poll_interval_secs
        roots: list[int] = []
        counts = {s.id: 0 for s in self.topology.spouts}
        n = 0
        while n < limit:
            progressed = False
            for t in self.tasks:
                if n >= limit:
                    break
                if cap is not None and len(t.pending) >= cap:
                    continue
                before = t.collector.emitted
                _call(t, "next_tuple")
                got = t.collector.emitted - before
                if got:
                    progressed = True
                    n += got
                    counts[t.spout_id] += got
                    self._register(t, roots)
            if not progressed or self.clock() >= deadline:
                break
        self._note_quiet(n, now)
        if n == 0 and not self._wants_batch(self.clock()):
            return None
        fed: dict[str, Any] = {s.id: [t.collector.outputs.records() for t in self.tasks if t.spout_id == s.id]
                               for s in self.topology.spouts}
        ticks = self._due_ticks(self.clock())
        if ticks:
            fed[TICKS] = ticks
        self.batches[txid] = _Batch(roots, fed, ticks)
        return {sid: {"tuples": c} for sid, c in counts.items()}, None

    def _register(self, t: _SpoutTask, roots: list[int]) -> None:
        """The roots ``t`` just emitted go to their ackers; with tracking off, the spout
        hears ``ack`` at once."""
        new, at_once = t.collector.take()
        now = self.clock()
        decided: list[tuple[str, int, int]] = []
        for root, val, msg_id in new:
            t.pending[root] = msg_id
            roots.append(root)
            decided += self.ackers[acker_for(root, len(self.ackers))].init(root, t.task_id, now, val)
        for msg_id in at_once:
            _call(t, "ack", msg_id)
            self.result.acked[t.spout_id] += 1
        self._deliver(decided)

    def origin(self, message_id: dict[int, int]) -> str | None:
        """The identity a tuple's spout tuples keep when replayed (``message_id``: its
        ``{root: id}``): each root's spout and ``msg_id`` (its ``repr``; not the task: a
        source may hand a replay to another task, e.g. Redis' XAUTOCLAIM), or None when a
        root is no longer pending. A persistent window keeps it with each tuple it holds
        (``transactional.engine.core.window_keeper``)."""
        parts = []
        for root in message_id:
            for t in self.tasks:
                if root in t.pending:
                    parts.append(f"{t.spout_id}/{t.pending[root]!r}")
                    break
            else:
                return None
        return "|".join(sorted(parts)) or None

    def fed(self, txid: int) -> dict[str, list[list[Any]]] | None:
        """What the spout tasks emitted for ``txid``: per spout, the records of each task."""
        return self.batches[txid].fed

    # -- what the ackers decide ------------------------------------------------------------------
    def _deliver(self, decided: list[tuple[str, int, int]], timed_out: bool = False) -> None:
        for what, root, task_id in decided:
            t = self.by_id[task_id]
            msg_id = t.pending.pop(root, None)
            if msg_id is None:
                continue
            if what == "ack":
                self.result.acked[t.spout_id] += 1
                _call(t, "ack", msg_id)
            else:
                self.result.failed[t.spout_id] += 1
                if timed_out:
                    self.result.timed_out[t.spout_id] += 1
                _call(t, "fail", msg_id)

    def settle(self, reports: dict[tuple[str, int], tuple[dict[int, int], list[int]]], hold: frozenset[str]) -> None:
        """Apply the tasks' reports: fails at once, acks (those of ``hold`` components kept
        for the checkpoint)."""
        if not self.tracking:
            return
        k = len(self.ackers)
        decided: list[tuple[str, int, int]] = []
        acks_now: list[dict[int, int]] = []
        for (component, _), (acks, fails) in sorted(reports.items()):
            for root in fails:
                decided += self.ackers[acker_for(root, k)].fail(root)
            if component in hold and self.checkpointer is not None:
                self.checkpointer.hold(acks)
            else:
                acks_now.append(acks)
        self._deliver(decided + self._ack(acks_now))

    def _ack(self, reports: list[dict[int, int]]) -> list[tuple[str, int, int]]:
        """Give tasks' acks to the ackers, XORed per root first (one report per root: XOR
        is associative and commutative); returns what the ackers decided."""
        combined: dict[int, int] = dict(reports[0]) if reports else {}
        for acks in reports[1:]:
            get = combined.get
            for root, v in acks.items():
                combined[root] = get(root, 0) ^ v
        now, k, ackers = self.clock(), len(self.ackers), self.ackers
        decided: list[tuple[str, int, int]] = []
        for root, v in combined.items():
            if v:
                decided += ackers[root % k].ack(root, v, now)
        return decided

    def fail_roots(self, roots: Any) -> None:
        """Fail each of ``roots`` still pending: its spout replays it."""
        k = len(self.ackers)
        decided: list[tuple[str, int, int]] = []
        for root in roots:
            decided += self.ackers[acker_for(root, k)].fail(root)
        self._deliver(decided)

    # -- the engine's hooks ------------------------------------------------------------------------
    def commit(self, a: Commit, reports: dict[tuple[str, int], tuple[dict[int, int], list[int]]], run_stages: Callable[[Any], PhaseReport] | None) -> None:
        """Steps 2-4 of a micro-batch's commit (module docstring). ``run_stages(states)``
        runs the commit-phase stages and returns their report; it raises on a failure,
        after which the states are rolled back and the held roots failed."""
        cp = self.checkpointer
        on_executors = cp is not None and self.config.commit_placement == "executors"
        hold = cp.stateful if cp is not None and not on_executors else frozenset()
        reports = dict(reports)
        if run_stages is not None:
            states: Any = cp.on_executors() if cp is not None and on_executors else cp
            if self.windows is not None:
                states = CoreStates(cp, self.windows)
            try:
                rep = run_stages(states)
            except BaseException:
                if cp is not None and on_executors:
                    cp.rollback_prepared(states)
                else:
                    self.rollback()
                if self.windows is not None:
                    self.windows.rollback(reload=cp is not None)
                raise
            if self.windows is not None:
                self.windows.commit()
            if cp is not None and on_executors:
                cp.commit_prepared(states)  # then the acks count
            elif cp is not None:
                cp.touched = True                    # a checkpoint is due, acks held or not (ackers=0)
            reports.update(rep.acks)
        self.settle(reports, hold)
        self.batches.pop(a.txid, None)
        self._checkpoint_if_due(self.clock())

    def rollback(self) -> None:
        """Every state back to its last checkpoint; the roots whose acks it held fail."""
        if self.checkpointer is not None:
            self.fail_roots(self.checkpointer.rollback())
            if self.windows is not None:
                self.windows.rollback(reload=True)       # persistent windows: as the rolled-back states

    def _checkpoint_if_due(self, now: float, force: bool = False) -> None:
        cp = self.checkpointer
        if cp is None or not (cp.due(now) or (force and cp.dirty())):
            return
        try:
            released = cp.checkpoint()
        except Exception as e:
            if isinstance(e, (TopologyFailedError, LeadershipLostError)):
                raise
            log.warning("checkpoint failed before it was prepared (%r): rolled back to the last one; the "
                        "tuples it held are replayed", e)
            self.rollback()
            return
        self._deliver(self._ack(released))

    def discard(self, txid: int) -> None:
        """Micro-batch ``txid`` failed or was cancelled: its pending roots fail."""
        b = self.batches.pop(txid, None)
        if b is not None:
            self.fail_roots(b.roots)

    def tick(self, now: float) -> None:
        """Fail the trees whose time ran out; checkpoint when due."""
        decided: list[tuple[str, int, int]] = []
        for acker in self.ackers:
            decided += acker.expire(now)
        self._deliver(decided, timed_out=True)
        self._checkpoint_if_due(now)

    def next_wakeup(self) -> float | None:
        """When ``tick`` next has something to do."""
        times = [d for d in (a.next_deadline() for a in self.ackers) if d is not None]
        cp = self.checkpointer
        if cp is not None and cp.dirty():
            times.append(cp.last + cp.interval)
        if self.windows is not None and (due := self.windows.due_in()) is not None:
            times.append(self.clock() + due)
        idle = self.config.idle_timeout_secs
        if idle is not None and self.quiet_since is not None and self.windows is not None and self.windows.flushable():
            times.append(self.quiet_since + idle)
        if self.tick_every and self.busy():
            times += [self.last_tick[c] + f for c, f in self.tick_every.items()]
        return min(times) if times else None

    def busy(self) -> bool:
        """Trees are pending: the run is not idle even when the spouts have nothing new."""
        return any(t.pending for t in self.tasks) or (self.windows is not None and self.windows.flushable()
                                                      and self.config.idle_timeout_secs is not None)

    def pending(self) -> dict[str, int]:
        """Tracked spout tuples not yet acked or failed, per spout."""
        out = {s.id: 0 for s in self.topology.spouts}
        for t in self.tasks:
            out[t.spout_id] += len(t.pending)
        return out

    def committed(self, txid: int, meta: Any) -> None:
        """Nothing to tell core spouts: they hear ``ack`` and ``fail``."""

    def close(self, ok: bool = True) -> None:
        """A final checkpoint (when the run ends well), then close every spout task."""
        try:
            if ok:
                self._checkpoint_if_due(self.clock(), force=True)
        finally:
            for t in self.tasks:
                try:
                    t.spout.close()
                except Exception as e:  # noqa: BLE001 - one spout's close must not keep the others open
                    log.warning("closing spout %r task %d: %r", t.spout_id, t.index, e)
            self.result.pending = self.pending()
            if self.checkpointer is not None:
                self.result.checkpoints = self.checkpointer.checkpoints
