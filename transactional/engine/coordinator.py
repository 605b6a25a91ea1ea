"""The transaction coordinator as a pure state machine (Storm's MasterBatchCoordinator).

No I/O, no threads, no clock of its own: the engine feeds it events with the time
(``now``) and carries out the actions it returns. Per txid in flight it keeps a status::

    PROCESSING -> PROCESSED -> COMMITTING -> (committed: gone)
         \\____________\\_____________\\-> failed: gone, re-emitted as a new attempt

Events in (methods): ``start``, ``planned`` (the spout's metadata for a txid, or nothing
to emit now), ``processed`` (an attempt's processing job finished; an opaque spout may
report it emitted less), ``failed`` (a task or job of an attempt failed, or its commit),
``committed``, ``tick`` (time passed: timeouts, backoff, idle polling), and the
operator's ``deactivate``, ``activate`` and ``kill``.

Actions out: ``Plan`` (ask the spout for txid's metadata), ``Launch`` (write the
attempt's metadata durably, then run its processing job), ``Record`` (write an opaque
batch's adjusted metadata), ``Cancel`` (a job in flight), ``Commit`` (run the commit
phase), ``Stop`` (the run ends: reason, or an error).

Rules (each checked by tests/transactional/engine/test_coordinator.py, a hypothesis state machine):

1. At most ``max_spout_pending`` txids are in flight (launched and not committed).
2. Commits are strictly in txid order, one at a time; each txid commits once.
3. A failure of txid t (or a timeout: ``message_timeout_secs`` after its launch) fails t
   and every later txid in flight: their jobs are cancelled, and each is emitted again
   as a new attempt -- transactional spouts with the same metadata, opaque spouts planned
   again from where the previous batch ended (the replay policy, one object per kind;
   ``SpoutsReplay`` combines the policies of a topology's spouts under one txid).
4. A failed txid is emitted again no earlier than its backoff allows
   (``retry_backoff_secs`` doubling per failure, at most ``retry_backoff_max_secs``).
5. The ``max_attempts``-th failure of a txid, or a fatal failure, stops the run with an
   error naming txid, component, task and cause.
6. An opaque batch that emitted less than planned keeps what it emitted (recorded before
   its commit); later txids in flight are planned again from there, without counting
   that as their failure.
7. A new txid is planned only when the launch policy allows it (``launch_policy``,
   ``transactional.engine.launch``): "eager", whenever a slot is free; "adaptive", when no
   txid in flight is processing or the spouts' last plan was backlogged. Replays launch
   whenever a slot is free.

Events about an attempt that is no longer current (a cancelled job finishing late) are
ignored.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from transactional.engine.events import Transition
from transactional.engine.launch import LaunchPolicy
from transactional.engine.replay import (
    CoreReplay,
    OpaqueReplay,
    ReplayPolicy,
    SpoutsReplay,
    TransactionalReplay,
    advance,
)
from transactional.exceptions import TopologyFailedError

__all__ = ["Coordinator", "CoordinatorSettings", "Status", "Plan", "Launch", "Record", "Cancel",
           "Commit", "Stop", "Action", "TransactionalReplay", "OpaqueReplay", "SpoutsReplay", "CoreReplay", "ReplayPolicy",
           "advance"]


class Status(enum.Enum):
    PROCESSING = "processing"
    PROCESSED = "processed"
    COMMITTING = "committing"


class Failure(Protocol):
    """What the coordinator needs of a failure (``transactional.engine.task.TaskFailure``)."""

    @property
    def kind(self) -> str:
        """"failed" (FailedException), "error" (counts towards max_attempts) or "fatal"."""

    @property
    def component(self) -> str: ...

    @property
    def task(self) -> int: ...

    @property
    def message(self) -> str: ...

    @property
    def traceback(self) -> str: ...

    def describe(self) -> str: ...


# -- actions --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Ask the spout for the metadata of ``txid``, continuing from ``prev_meta`` (txid-1's)
    and ``partitions`` (the partition state after txid-1); answer with ``planned``.
    ``keep``: the part of a failed attempt's metadata the new plan must reuse (the
    transactional spouts of a topology that also has opaque ones), else None."""

    txid: int
    prev_meta: Any
    partitions: dict[Any, Any] | None
    keep: Any = None


@dataclass(frozen=True)
class Launch:
    """Write the attempt's metadata durably (with ``attempts`` and ``commit_started``),
    then run its processing job; answer with ``processed`` or ``failed``."""

    txid: int
    attempt: int
    meta: Any
    partitions: dict[Any, Any] | None
    commit_started: tuple[int, ...]


@dataclass(frozen=True)
class Record:
    """Write the (adjusted) metadata of an attempt in flight durably."""

    txid: int
    attempt: int
    meta: Any
    commit_started: tuple[int, ...]


@dataclass(frozen=True)
class Cancel:
    """Cancel the processing job of attempt ``attempt`` of ``txid`` (its result is ignored)."""

    txid: int
    attempt: int


@dataclass(frozen=True)
class Commit:
    """Run the commit phase of the attempt; answer with ``committed`` or ``failed``.
    ``commit_started`` lists the attempts of the txid whose commit began, this one last."""

    txid: int
    attempt: int
    meta: Any
    partitions: dict[Any, Any] | None
    commit_started: tuple[int, ...]


@dataclass(frozen=True)
class Stop:
    """The run ends: ``reason`` ("max_batches", "spout has nothing more"), or ``error``."""

    reason: str
    error: TopologyFailedError | None = None


Action = Plan | Launch | Record | Cancel | Commit | Stop


# -- the state machine --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CoordinatorSettings:
    """The knobs of ``TopologyConfig`` the coordinator uses."""

    max_spout_pending: int = 3
    message_timeout_secs: float = 30.0
    max_attempts: int = 5
    retry_backoff_secs: float = 0.5
    retry_backoff_max_secs: float = 10.0
    idle_timeout_secs: float | None = 0.0
    poll_interval_secs: float = 0.2
    #: when a new txid is planned (``transactional.engine.launch``)
    launch_policy: str = "eager"

    @classmethod
    def of(cls, config: Any, core: bool = False) -> CoordinatorSettings:
        """The settings of ``config`` (a ``TopologyConfig``) for a transactional topology,
        or for a core one (``core``: its micro-batches in flight)."""
        kw = {f: getattr(config, f) for f in cls.__dataclass_fields__ if f != "max_spout_pending"}
        return cls(max_spout_pending=config.pending_batches(core), **kw)


@dataclass
class _Batch:
    txid: int
    attempt: int
    meta: Any
    partitions: dict[Any, Any] | None
    status: Status
    launched_at: float


@dataclass
class Recovered:
    """Where a (re)starting coordinator begins: the last committed txid with its metadata
    and partition state, and the uncommitted txids found (txid -> {"meta", "attempts",
    "commit_started"})."""

    last_committed: int = 0
    committed_meta: Any = None
    partitions: dict[Any, Any] | None = None
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)


class Coordinator:
    """Storm's MasterBatchCoordinator: events in, actions out (see the module docstring).

    >>> c = Coordinator(CoordinatorSettings(max_spout_pending=2), TransactionalReplay(False))
    >>> c.start(0.0)
    [Plan(txid=1, prev_meta=None, partitions=None, keep=None)]
    >>> c.planned(1, [0, 3], None, 0.0)
    [Launch(txid=1, attempt=1, meta=[0, 3], partitions=None, commit_started=()), Plan(txid=2, prev_meta=[0, 3], partitions=None, keep=None)]
    >>> c.planned(2, None, None, 0.0)           # nothing to emit now: ask again after a poll interval
    []
    >>> c.processed(1, 1, None, 0.1)
    [Commit(txid=1, attempt=1, meta=[0, 3], partitions=None, commit_started=(1,))]
    >>> c.committed(1, 0.15), c.last_committed   # a slot is free: ask the spout at once
    ([Plan(txid=2, prev_meta=[0, 3], partitions=None, keep=None)], 1)
    >>> c.planned(2, None, None, 0.15)          # still nothing, nothing in flight: idle
    [Stop(reason='spout has nothing more', error=None)]
    """

    def __init__(self, settings: CoordinatorSettings, policy: ReplayPolicy,
                 recovered: Recovered | None = None, max_batches: int | None = None) -> None:
        rec = recovered or Recovered()
        self.settings = settings
        self.policy = policy
        self.last_committed = rec.last_committed
        self.committed_meta = rec.committed_meta
        self.committed_partitions = rec.partitions
        self.inflight: dict[int, _Batch] = {}        # txid -> batch, in txid order
        self.next_txid = rec.last_committed + 1
        self.limit = None if max_batches is None else rec.last_committed + max_batches
        self.attempts: dict[int, int] = {t: int(r.get("attempts") or 0) for t, r in rec.pending.items()}
        self.commit_started: dict[int, list[int]] = {
            t: list(r.get("commit_started") or []) for t, r in rec.pending.items()}
        self.replay: dict[int, Any] = {}        # txid -> metadata it is re-emitted with
        self.keep: dict[int, Any] = {}          # txid -> the part of its metadata a new plan reuses
        for t, r in rec.pending.items():
            self._queue_again(t, r.get("meta"))
        self.failures_of: dict[int, int] = {}
        self.not_before: dict[int, float] = {}
        self.planning: int | None = None       # txid a Plan was asked for, unanswered
        self.committing: int | None = None
        self.idle_since: float | None = None
        self.next_poll: float = 0.0
        self.stopped: Stop | None = None
        self.paused = False                    # deactivated: no new txid until activate
        self.launch = LaunchPolicy(settings.launch_policy)
        self.backlogged = False                # the spouts' last plan left input behind (hit a cap)
        self.listeners: list[Callable[[Transition], None]] = []

    # -- events ---------------------------------------------------------------------------------
    def start(self, now: float) -> list[Action]:
        """The first actions of a run."""
        return self._fill(now)

    def planned(self, txid: int, meta: Any, partitions: dict[Any, Any] | None, now: float, busy: bool = False,
                backlogged: bool = False) -> list[Action]:
        """The spout's metadata for ``txid`` (None: nothing to emit now). ``busy``: work is
        pending outside the coordinator (a core topology's tuple trees), so the run is not
        idle even with nothing to emit. ``backlogged``: the plan hit a per-batch cap, more
        input waits (the launch policy fills every slot then). Deactivated since the Plan:
        nothing is launched (the txid is planned again on ``activate``)."""
        if self.stopped is not None or self.planning != txid:
            return []
        self.planning = None
        self.backlogged = backlogged and meta is not None
        if self.paused and meta is not None:
            return []                                  # deactivated meanwhile: planned again on activate
        if meta is None:
            self.next_poll = now + self.settings.poll_interval_secs
            if busy:
                self.idle_since = None
            elif not self.inflight and self.idle_since is None:
                self.idle_since = now
                self._publish("idle", txid, 0, now)     # the run waits for input (logged once per wait)
            return self._stop_if_done(now)
        self.idle_since = None
        return self._launch(txid, meta, partitions, now) + self._fill(now)

    def processed(self, txid: int, attempt: int, actual: dict[Any, Any] | None, now: float) -> list[Action]:
        """The processing job of (``txid``, ``attempt``) succeeded; ``actual``: what an
        opaque emitter really emitted, per partition."""
        b = self.inflight.get(txid)
        if self.stopped is not None or b is None or b.attempt != attempt or b.status is not Status.PROCESSING:
            return []
        actions: list[Action] = []
        kept = self.policy.adopt(b.meta, actual)
        if kept is not None:
            b.meta = kept
            b.partitions = self.policy.advance(self._prev(txid)[1], kept)
            actions.append(Record(txid, attempt, kept, tuple(self.commit_started.get(txid, ()))))
            later = [t for t in self.inflight if t > txid]
            if later:
                actions += self._fail_from(later[0], None, now)
        b.status = Status.PROCESSED
        self._publish("processed", txid, attempt, now)
        return actions + self._maybe_commit(now) + self._fill(now)

    def failed(self, txid: int, attempt: int, failure: Failure, now: float) -> list[Action]:
        """A task or the job of (``txid``, ``attempt``) failed, or its commit did."""
        b = self.inflight.get(txid)
        if self.stopped is not None or b is None or b.attempt != attempt:
            return []
        self._publish("failed", txid, attempt, now, failure=failure, then=self._then(txid, failure))
        if self.committing == txid:
            self.committing = None
        return self._fail_from(txid, failure, now) + self._fill(now)

    def committed(self, txid: int, now: float, **info: Any) -> list[Action]:
        """The commit of ``txid`` is recorded (``info``: figures for listeners)."""
        b = self.inflight.get(txid)
        if b is None or self.committing != txid:
            msg = f"committed({txid}) without its Commit"
            raise RuntimeError(msg)
        del self.inflight[txid]
        self.committing = None
        self.last_committed, self.committed_meta, self.committed_partitions = txid, b.meta, b.partitions
        for d in (self.commit_started, self.failures_of, self.not_before, self.attempts, self.keep):
            d.pop(txid, None)
        self.next_poll = min(self.next_poll, now)    # a slot is free: ask the spout again now
        self._publish("committed", txid, b.attempt, now, launched_at=b.launched_at, **info)
        return self._maybe_commit(now) + self._fill(now) + self._stop_if_done(now)

    def ready(self, now: float) -> list[Action]:
        """A spout said it has input now (``transactional.engine.wakeup.WakesDriver``): ask
        the spouts at once rather than after the poll interval."""
        if self.stopped is not None:
            return []
        self.next_poll = min(self.next_poll, now)
        return self._fill(now)

    def tick(self, now: float) -> list[Action]:
        """Time passed: fail timed-out attempts, emit what backoff or polling held back,
        end an idle run."""
        if self.stopped is not None:
            return []
        actions: list[Action] = []
        for b in list(self.inflight.values()):
            if b.status is Status.PROCESSING and now - b.launched_at >= self.settings.message_timeout_secs:
                actions += self.failed(b.txid, b.attempt, _Timeout(b.txid, b.attempt, self.settings), now)
                break
        return actions + self._fill(now) + self._stop_if_done(now)

    def deactivate(self, now: float, by: str = "") -> list[Action]:
        """Stop emitting new txids (Storm's ``deactivate``): those in flight go on to their
        commit; the run waits, whatever ``idle_timeout_secs`` says, until ``activate``."""
        if self.stopped is None and not self.paused:
            self.paused = True
            self._publish("deactivated", self.last_committed, 0, now, by=by)
        return []

    def activate(self, now: float, by: str = "") -> list[Action]:
        """Emit again after ``deactivate``."""
        if self.stopped is not None or not self.paused:
            return []
        self.paused = False
        self.idle_since = None
        self.next_poll = now
        self._publish("activated", self.last_committed, 0, now, by=by)
        return self._fill(now)

    def kill(self, now: float, by: str = "", reason: str | None = None) -> list[Action]:
        """End the run now (Storm's ``kill``): a commit under way has finished (a Commit is
        answered before the next event); every txid in flight is cancelled, one whose
        Commit was asked for but not yet carried out included -- the engine carries out
        nothing but Cancels after this Stop -- and will be emitted again by the next run.
        ``reason``: the stop's, when not a kill (``"rebalance"``: the run goes on with new task counts)."""
        if self.stopped is not None:
            return []
        cancels: list[Action] = [Cancel(b.txid, b.attempt) for b in self.inflight.values()]
        return [*cancels, self._stop(Stop(reason or f"killed{' by ' + by if by else ''}"), now)]

    def next_wakeup(self, now: float) -> float | None:
        """When ``tick`` next has something to do (None: only events matter)."""
        if self.stopped is not None:
            return None
        times = [b.launched_at + self.settings.message_timeout_secs
                 for b in self.inflight.values() if b.status is Status.PROCESSING]
        t = self.next_txid
        if self.planning is None and self._may_emit():
            backoff = self.not_before.get(t, 0.0)
            if backoff > now:
                times.append(backoff)                  # a failed txid waits out its backoff
            elif t in self.replay:
                times.append(now)                      # replayed without asking the spout
            elif self._may_plan():                     # else a job's end (an event) lets it plan
                times.append(max(self.next_poll, backoff))
        idle = self.settings.idle_timeout_secs
        if not self.inflight and self.idle_since is not None and idle is not None and not self.paused \
                and self.idle_since + idle > now:
            times.append(self.idle_since + idle)
        return max(now, min(times)) if times else None

    # -- internals ----------------------------------------------------------------------------------
    def _may_emit(self) -> bool:
        return (self.stopped is None and not self.paused and len(self.inflight) < self.settings.max_spout_pending
                and (self.limit is None or self.next_txid <= self.limit))

    def _may_plan(self) -> bool:
        """The launch policy lets a new txid be planned now (rule 7)."""
        processing = sum(1 for b in self.inflight.values() if b.status is Status.PROCESSING)
        return self.launch.may_plan(processing, self.backlogged)

    def _prev(self, txid: int) -> tuple[Any, dict[str, Any] | None]:
        b = self.inflight.get(txid - 1)
        if b is not None:
            return b.meta, b.partitions
        return self.committed_meta, self.committed_partitions

    def _fill(self, now: float) -> list[Action]:
        """Emit txids while fewer than ``max_spout_pending`` are in flight (new ones as the
        launch policy allows: rule 7)."""
        actions: list[Action] = []
        while self.planning is None and self._may_emit():
            t = self.next_txid
            if now < self.not_before.get(t, 0.0):
                break                                  # a failed txid waits out its backoff
            if t in self.replay:
                meta = self.replay.pop(t)
                actions += self._launch(t, meta, self.policy.advance(self._prev(t)[1], meta), now)
                continue
            if now < self.next_poll:
                break                                  # the spout had nothing a moment ago
            if not self._may_plan():
                break                                  # a batch is processing: plan when it ends
            prev_meta, prev_parts = self._prev(t)
            self.planning = t
            actions.append(Plan(t, prev_meta, prev_parts, self.keep.get(t)))
        return actions

    def _launch(self, txid: int, meta: Any, partitions: dict[Any, Any] | None, now: float) -> list[Action]:
        attempt = self.attempts[txid] = self.attempts.get(txid, 0) + 1
        self.keep.pop(txid, None)
        self.inflight[txid] = _Batch(txid, attempt, meta, partitions, Status.PROCESSING, now)
        self.next_txid = txid + 1
        self._publish("launched", txid, attempt, now)
        return [Launch(txid, attempt, meta, partitions, tuple(self.commit_started.get(txid, ())))]

    def _maybe_commit(self, now: float) -> list[Action]:
        if self.committing is not None or not self.inflight:
            return []
        b = next(iter(self.inflight.values()))
        if b.status is not Status.PROCESSED:
            return []
        b.status = Status.COMMITTING
        self.committing = b.txid
        started = self.commit_started.setdefault(b.txid, [])
        started.append(b.attempt)
        self._publish("committing", b.txid, b.attempt, now)
        return [Commit(b.txid, b.attempt, b.meta, b.partitions, tuple(started))]

    def _fail_from(self, txid: int, failure: Failure | None, now: float) -> list[Action]:
        """Fail ``txid`` and every later txid in flight; queue them to be emitted again.
        ``failure`` None: not a failure of ``txid`` itself (an earlier batch emitted less),
        so it counts towards nothing."""
        actions: list[Action] = []
        if failure is not None:
            stop = self._count_failure(txid, failure, now)
            if stop is not None:
                return [*self._cancel_all(), stop]
        for t in [t for t in self.inflight if t >= txid]:
            b = self.inflight.pop(t)
            if b.status is not Status.COMMITTING:     # running, or processed: its result is void
                actions.append(Cancel(t, b.attempt))
            self._queue_again(t, b.meta)
        if self.planning is not None and self.planning >= txid:
            self.planning = None                       # its answer will be ignored
        self.next_txid = txid
        return actions

    def _queue_again(self, txid: int, meta: Any) -> None:
        """txid is to be emitted again: with ``meta`` as it is, or planned again (keeping
        what the policy says)."""
        again = self.policy.replay_meta(meta)
        if again is not None:
            self.replay[txid] = again
            return
        kept = self.policy.keep(meta)
        if kept is not None:
            self.keep[txid] = kept

    def _then(self, txid: int, failure: Failure) -> str:
        """What follows this failure of ``txid`` (as ``_count_failure`` will decide it)."""
        n = self.failures_of.get(txid, 0) + 1
        limit = self.settings.max_attempts
        if failure.kind == "fatal":
            return "stopping the run (this error fails the same way on every attempt)"
        if n >= limit:
            return f"stopping the run (max_attempts={limit} reached)"
        backoff = min(self.settings.retry_backoff_max_secs, self.settings.retry_backoff_secs * 2 ** (n - 1))
        return f"replaying txid {txid} (attempt {n + 1} of max_attempts={limit}) in {backoff:g} s"

    def _count_failure(self, txid: int, failure: Failure, now: float) -> Stop | None:
        if failure.kind == "fatal":
            return self._stop(Stop("error", TopologyFailedError(
                f"stopped: {failure.describe()}", txid=txid, component=failure.component,
                task=failure.task, cause=failure.message)), now)
        n = self.failures_of[txid] = self.failures_of.get(txid, 0) + 1
        s = self.settings
        self.not_before[txid] = now + min(s.retry_backoff_max_secs, s.retry_backoff_secs * 2 ** (n - 1))
        if n >= s.max_attempts:
            return self._stop(Stop("error", TopologyFailedError(
                f"txid {txid} failed {n} times (max_attempts={s.max_attempts}); last failure: "
                f"{failure.describe()}" + (f"\n{failure.traceback}" if failure.traceback else ""),
                txid=txid, component=failure.component, task=failure.task, cause=failure.message)), now)
        return None

    def _cancel_all(self) -> list[Action]:
        return [Cancel(b.txid, b.attempt) for b in self.inflight.values() if b.status is not Status.COMMITTING]

    def _stop_if_done(self, now: float) -> list[Action]:
        if self.stopped is not None or self.inflight or self.planning is not None:
            return []
        if self.limit is not None and self.next_txid > self.limit:
            return [self._stop(Stop("max_batches"), now)]
        if self.paused:
            return []                                  # deactivated: waits for activate, not idle
        idle = self.settings.idle_timeout_secs
        if self.idle_since is not None and idle is not None and now - self.idle_since >= idle \
                and self.next_txid not in self.replay and now >= self.not_before.get(self.next_txid, 0.0):
            return [self._stop(Stop("spout has nothing more"), now)]
        return []

    def _stop(self, stop: Stop, now: float) -> Stop:
        self.stopped = stop
        self._publish("stopped", self.last_committed, 0, now, reason=stop.reason)
        return stop

    def _publish(self, kind: str, txid: int, attempt: int, now: float, **info: Any) -> None:
        if self.listeners:
            t = Transition(kind, txid, attempt, now, info)
            for listener in self.listeners:
                listener(t)


@dataclass
class _Timeout:
    """The failure of an attempt that was not processed within ``message_timeout_secs``."""

    txid: int
    attempt: int
    settings: CoordinatorSettings
    kind: str = "error"
    component: str = "(spark job)"
    task: int = -1
    traceback: str = ""

    @property
    def message(self) -> str:
        return (f"not processed within message_timeout_secs={self.settings.message_timeout_secs}; "
                "its job was cancelled")

    def describe(self) -> str:
        return (f"txid {self.txid} (attempt {self.attempt}), component {self.component!r}, "
                f"task {self.task}: Timeout: {self.message}")
