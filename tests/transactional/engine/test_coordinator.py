"""The transaction coordinator (transactional/engine/coordinator.py) as a pure state machine.

``CoordinatorMachine`` plays the engine's part (``transactional.engine.attempts.Attempts`` and
``Engine._loop``) against a ``Coordinator`` with random settings and each replay policy:
actions are carried out in the order the engine does (one queue; a Plan is answered at once
by a fake spout, a Commit at once with ``committed`` or ``failed``, a Launch starts a job
whose outcome a later step reports, a Cancel voids a job, a Stop ends the run; the
operator may act between any two actions, and after a kill only the queued Cancels are
carried out), while time moves on through ``tick``. A model of the run checks after every action and every
step the rules of the module docstring:

1. commits strictly in txid order, one at a time, each txid once;
2. at most ``max_spout_pending`` txids in flight;
3. a failure of t (a job, a commit, a timeout) fails t and every later txid in flight;
   each comes back only as a new attempt;
4. a failed txid waits out its backoff;
5. the ``max_attempts``-th failure, or a fatal one, stops the run with an error naming
   the txid; nothing is planned, launched or committed after a Stop;
6. transactional replays re-emit the first metadata; opaque replays are planned again
   from the previous batch's partition state; an opaque batch that emitted less keeps
   what it emitted (Record before its Commit) and the later txids are planned again
   without counting that as their failure;
7. events of attempts that are no longer current are ignored: no actions, no change.

Example-based tests below spell out the rules that read best as examples.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from transactional.engine.coordinator import (
    Cancel,
    Commit,
    Coordinator,
    CoordinatorSettings,
    CoreReplay,
    Launch,
    OpaqueReplay,
    Plan,
    Record,
    Recovered,
    SpoutsReplay,
    Stop,
    TransactionalReplay,
    advance,
)
from transactional.exceptions import TopologyFailedError

# -- helpers ---------------------------------------------------------------------------------------


@dataclass
class Fail:
    """A failure as the coordinator sees one (the ``Failure`` protocol of ``TaskFailure``)."""

    kind: str
    txid: int = 0
    attempt: int = 0
    component: str = "count"
    task: int = 3
    message: str = "boom"
    traceback: str = ""

    def describe(self) -> str:
        return (f"txid {self.txid} (attempt {self.attempt}), component {self.component!r}, "
                f"task {self.task}: RuntimeError: {self.message}")


def delay(s: CoordinatorSettings, n: int) -> float:
    """The backoff after the n-th failure of a txid."""
    return min(s.retry_backoff_max_secs, s.retry_backoff_secs * 2 ** (n - 1))


def state_of(c: Coordinator) -> dict:
    """Everything a coordinator holds, to compare before and after an ignored event."""
    return {k: copy.deepcopy(v) for k, v in vars(c).items()
            if k not in ("listeners", "stopped", "settings", "policy")}


KINDS = ("transactional", "plain", "opaque", "core")   # partitioned/plain transactional, opaque, core micro-batches
REPLANNED = ("opaque", "core")                           # a failed txid is planned again, not replayed
PARTS = ("0", "1", "2")
OUTCOMES = ["ok"] * 40 + ["failed", "error"] * 5 + ["fatal"]   # of a processing job, of a commit


@dataclass
class Flight:
    """The model's view of a txid in flight."""

    attempt: int
    meta: Any
    parts: dict | None
    status: str                 # "processing", "processed", "committing"
    launched_at: float


@dataclass
class Expect:
    """What the answer to one event must hold."""

    source: tuple
    cancels: set = field(default_factory=set)        # (txid, attempt) that must be cancelled
    may_cancel: set = field(default_factory=set)     # ... that may be
    seen_cancels: set = field(default_factory=set)
    record: tuple | None = None                      # the Record this answer must hold
    record_seen: bool = False
    stop: tuple | None = None                        # (txid, failure or None: a timeout): an error Stop is due
    launched: bool = False


# -- the state machine -------------------------------------------------------------------------------


class CoordinatorMachine(RuleBasedStateMachine):
    """The engine's part, with a model of what must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.coord: Coordinator | None = None

    # -- set-up ----------------------------------------------------------------------------------
    @initialize(kind=st.sampled_from(KINDS), msp=st.integers(1, 4), max_attempts=st.integers(1, 5),
                backoff=st.sampled_from([0.0, 0.05, 0.1, 0.25]), backoff_max=st.sampled_from([0.1, 0.3, 1.0]),
                timeout=st.sampled_from([1.0, 3.0, 10.0]), poll=st.sampled_from([0.05, 0.2]),
                max_batches=st.none() | st.integers(1, 8), nparts=st.integers(1, 3), data=st.data())
    def setup(self, kind, msp, max_attempts, backoff, backoff_max, timeout, poll, max_batches, nparts, data):
        self.busy = True
        self.kind, self.parts_names = kind, PARTS[:nparts]
        self.s = CoordinatorSettings(max_spout_pending=msp, message_timeout_secs=timeout,
                                     max_attempts=max_attempts, retry_backoff_secs=backoff,
                                     retry_backoff_max_secs=backoff_max, idle_timeout_secs=None,
                                     poll_interval_secs=poll)
        policy = {"transactional": TransactionalReplay(True), "plain": TransactionalReplay(False),
                  "opaque": OpaqueReplay(), "core": CoreReplay()}[kind]
        rec = self._recovered(data) if data.draw(st.booleans(), label="resume") else Recovered()
        self.coord = Coordinator(self.s, policy, rec, max_batches)
        self.now = data.draw(st.sampled_from([0.0, 1000.0]), label="clock")
        # the model
        self.last_committed = rec.last_committed
        self.committed_meta, self.committed_parts = copy.deepcopy((rec.committed_meta, rec.partitions))
        self.committed: set[int] = set()
        self.limit = None if max_batches is None else rec.last_committed + max_batches
        self.flight: dict[int, Flight] = {}
        self.attempt_hi = {t: r["attempts"] for t, r in rec.pending.items()}
        self.commit_started = {t: list(r["commit_started"]) for t, r in rec.pending.items()}
        self.first_meta = {t: copy.deepcopy(r["meta"]) for t, r in rec.pending.items()} if kind not in REPLANNED else {}
        self.nfail: dict[int, int] = {}
        self.fail_at: dict[int, float] = {}
        self.planning: int | None = None
        self.next_poll = 0.0                            # the spout had nothing: asked again from then
        self.commit_out: int | None = None
        self.stopped: Stop | None = None
        self.voided: set[tuple[int, int]] = set()
        # the engine
        self.queue: deque = deque()
        self.jobs: set[tuple[int, int]] = set()         # running processing jobs
        self.groups: set[tuple[int, int]] = set()       # Attempts.groups
        self.results: set[tuple[int, int]] = set()      # Attempts.results
        self.cancelled: set[tuple[int, int]] = set()
        self.done = False
        self.happy = False
        self.paused = False                             # deactivated by the operator
        self._answer(self.coord.start(self.now), Expect(("start",)))
        self._run(data)

    def _recovered(self, data) -> Recovered:
        """A restart: committed txids, and uncommitted ones found with their metadata."""
        last = data.draw(st.integers(0, 3), label="last_committed")
        n = data.draw(st.integers(0, 5), label="pending")
        if self.kind in ("plain", "core"):
            meta = [last - 1, last] if last else None
            rec = Recovered(last, meta, None)
            metas = [[last + i, last + i + 1] for i in range(n)]
        else:
            parts = {p: {"start": last - 1, "end": last} for p in self.parts_names} if last else None
            rec = Recovered(last, copy.deepcopy(parts), copy.deepcopy(parts))
            metas = [{p: {"start": last + i, "end": last + i + 1} for p in self.parts_names} for i in range(n)]
        for i, meta in enumerate(metas):
            attempts = data.draw(st.integers(1, 3), label="attempts")
            began = [attempts] if i == 0 and data.draw(st.booleans(), label="commit began") else []
            rec.pending[last + 1 + i] = {"meta": meta, "attempts": attempts, "commit_started": began}
        return rec

    # -- the fake spout and the engine ---------------------------------------------------------------
    def _plan(self, a: Plan, draw) -> tuple[Any, dict | None]:
        """The spout's answer to ``a``: (meta, partition state after it), meta None: nothing now."""
        if self.kind in ("plain", "core"):
            if not self.happy and draw(st.integers(0, 4), label="nothing now") == 0:
                return None, None
            start = a.prev_meta[1] if a.prev_meta else 0
            return [start, start + (1 if self.happy else draw(st.integers(1, 3), label="size"))], None
        meta = {}
        for p in self.parts_names:
            k = 1 if self.happy else draw(st.integers(0, 3), label="size")
            if k:
                last = (a.partitions or {}).get(p)
                s = last["end"] if last else 0
                meta[p] = {"start": s, "end": s + k}
        if not meta:
            return None, None
        return meta, advance(a.partitions, meta)

    def _run(self, data) -> None:
        """Carry out queued actions as ``Engine._loop`` does, until the queue is empty or a
        Stop; the operator may act between any two actions (the engine hears it there, e.g.
        a kill that came during a Commit while the next Commit is queued already)."""
        draw = None if data is None else data.draw
        while self.queue:
            if draw is not None and not self.done and draw(st.integers(0, 7), label="operator now") == 0:
                self._operator(data)
            a = self.queue.popleft()
            if isinstance(a, Stop):
                self.queue.clear()
                self.done = True
                return
            key = (a.txid, getattr(a, "attempt", None))
            if isinstance(a, Plan):
                meta, parts = self._plan(a, draw)
                self._planned(a.txid, meta, parts)
            elif isinstance(a, Launch):
                self.jobs.add(key)
                self.groups.add(key)
            elif isinstance(a, Cancel):
                self.jobs.discard(key)
                self.groups.discard(key)
                self.results.discard(key)
                self.cancelled.add(key)
            elif isinstance(a, Commit):
                assert key in self.results, f"{a} for an attempt whose result the engine does not hold"
                self.results.discard(key)
                self.groups.discard(key)
                outcome = "ok" if self.happy else draw(st.sampled_from(OUTCOMES), label="commit outcome")
                if outcome == "ok":
                    self._committed(a.txid)
                else:
                    self._failed(a.txid, a.attempt, Fail(outcome, a.txid, a.attempt, component="(map 'm')"))
            else:
                assert isinstance(a, Record)

    # -- events: what the engine tells the coordinator -----------------------------------------------
    def _ignored(self, call) -> None:
        """``call`` is an event the coordinator must ignore: no actions, nothing changed."""
        before, stopped = state_of(self.coord), self.coord.stopped
        assert call() == []
        assert state_of(self.coord) == before and self.coord.stopped is stopped

    def _planned(self, txid: int, meta: Any, parts: dict | None) -> None:
        if self.stopped is not None or self.planning != txid:
            self._ignored(lambda: self.coord.planned(txid, meta, parts, self.now))
            return
        self.planning = None
        if self.paused and meta is not None:           # deactivated since the Plan: no new txid
            assert self.coord.planned(txid, meta, parts, self.now) == [] and self.coord.planning is None
            return
        if meta is None:
            self.next_poll = self.now + self.s.poll_interval_secs
        self._answer(self.coord.planned(txid, meta, parts, self.now), Expect(("planned", txid, meta, parts)))

    def _processed(self, txid: int, attempt: int, actual: dict | None) -> None:
        f = self.flight.get(txid)
        if (self.stopped is not None or f is None or f.attempt != attempt or f.status != "processing"
                or (txid, attempt) in self.voided):
            self._ignored(lambda: self.coord.processed(txid, attempt, actual, self.now))
            return
        exp = Expect(("processed", txid, attempt))
        if self.kind == "opaque" and actual:
            kept = {p: actual.get(p, m) for p, m in f.meta.items()}
            if kept != f.meta:                        # emitted less: keep what it emitted
                f.meta, f.parts = kept, advance(self._prev(txid)[1], kept)
                exp.record = (txid, attempt, kept, tuple(self.commit_started.get(txid, ())))
                later = [t for t in self.flight if t > txid]
                if later:
                    self._void_from(later[0], exp)    # not a failure of theirs: nothing counted
        f.status = "processed"
        self._answer(self.coord.processed(txid, attempt, actual, self.now), exp)

    def _failed(self, txid: int, attempt: int, failure: Fail) -> None:
        f = self.flight.get(txid)
        if self.stopped is not None or f is None or f.attempt != attempt or (txid, attempt) in self.voided:
            self._ignored(lambda: self.coord.failed(txid, attempt, failure, self.now))
            return
        exp = Expect(("failed", txid, attempt))
        self._expect_failure(txid, failure, exp)
        self._answer(self.coord.failed(txid, attempt, failure, self.now), exp)

    def _committed(self, txid: int) -> None:
        assert self.commit_out == txid
        f = self.flight.pop(txid)
        self.commit_out = None
        self.last_committed, self.committed_meta, self.committed_parts = txid, f.meta, f.parts
        self.committed.add(txid)
        self.next_poll = min(self.next_poll, self.now)  # a slot is free: the spout is asked at once
        self._answer(self.coord.committed(txid, self.now), Expect(("committed", txid)))

    def _tick(self) -> list:
        exp = Expect(("tick",))
        if self.stopped is None:
            for t, f in self.flight.items():           # the first attempt past its message timeout
                if f.status == "processing" and self.now - f.launched_at >= self.s.message_timeout_secs:
                    self._expect_failure(t, None, exp)
                    break
        actions = self.coord.tick(self.now)
        self._answer(actions, exp)
        return actions

    # -- what an event must do ------------------------------------------------------------------------
    def _prev(self, txid: int) -> tuple[Any, dict | None]:
        f = self.flight.get(txid - 1)
        return (f.meta, f.parts) if f is not None else (self.committed_meta, self.committed_parts)

    def _void_from(self, txid: int, exp: Expect) -> None:
        """txid and every later txid in flight are failed: their jobs (and results) must be cancelled."""
        for t in [t for t in self.flight if t >= txid]:
            f = self.flight.pop(t)
            if f.status != "committing":
                exp.cancels.add((t, f.attempt))
            self.voided.add((t, f.attempt))
        if self.planning is not None and self.planning >= txid:
            self.planning = None
        if self.commit_out is not None and self.commit_out >= txid:
            self.commit_out = None

    def _expect_failure(self, txid: int, failure: Fail | None, exp: Expect) -> None:
        """txid fails (``failure`` None: it timed out): counted, and the run stops or t and later txids are voided."""
        if failure is not None and failure.kind == "fatal":
            stop = True
        else:
            n = self.nfail[txid] = self.nfail.get(txid, 0) + 1
            self.fail_at[txid] = self.now
            stop = n >= self.s.max_attempts
        if not stop:
            self._void_from(txid, exp)
            return
        exp.stop = (txid, failure)
        for t, f in self.flight.items():
            (exp.cancels if f.status == "processing" else exp.may_cancel).add((t, f.attempt))
            self.voided.add((t, f.attempt))
        if self.commit_out == txid:
            self.commit_out = None

    # -- checking the actions of one answer -------------------------------------------------------------
    def _answer(self, actions: list, exp: Expect) -> None:
        for a in actions:
            self._check(a, exp)
        missing = exp.cancels - exp.seen_cancels
        assert not missing, f"{exp.source}: no Cancel for {sorted(missing)} in {actions}"
        if exp.record is not None:
            assert exp.record_seen, f"{exp.source}: no Record {exp.record} in {actions}"
        if exp.stop is not None:
            assert actions and isinstance(actions[-1], Stop), f"{exp.source}: no Stop in {actions}"
            assert all(isinstance(a, Cancel) for a in actions[:-1]), actions
        if self.stopped is None and self.limit is not None and self.last_committed >= self.limit:
            assert not self.flight and self.planning is None
            assert exp.source[0] != "committed", f"max_batches reached, no Stop in {actions}"
        if self.stopped is None and self.planning is None and not self.paused:
            # nothing held back that could go: a free slot is filled as soon as backoff and polling allow
            t = self.last_committed + len(self.flight) + 1
            n = self.nfail.get(t, 0)
            replay = self.kind not in REPLANNED and t in self.first_meta
            assert not (len(self.flight) < self.s.max_spout_pending and (self.limit is None or t <= self.limit)
                        and (not n or self.now >= self.fail_at[t] + delay(self.s, n))
                        and (replay or self.now >= self.next_poll)), (
                f"{exp.source} at {self.now}: txid {t} could be emitted, but {actions}")
        self.queue.extend(actions)

    def _check(self, a: Any, exp: Expect) -> None:
        if isinstance(a, Cancel):
            key = (a.txid, a.attempt)
            assert key in exp.cancels | exp.may_cancel, f"{exp.source}: unexpected {a}"
            assert key not in exp.seen_cancels, f"{exp.source}: {a} twice"
            exp.seen_cancels.add(key)
            return
        if isinstance(a, Stop):
            assert self.stopped is None, f"{a} after {self.stopped}"
            if a.error is None:
                assert exp.stop is None, f"{exp.source}: {a} instead of an error"
                assert a.reason == "max_batches", a
                assert self.limit is not None and self.last_committed == self.limit and not self.flight
            else:
                assert exp.stop is not None, f"{exp.source}: unexpected {a!r}"
                txid, failure = exp.stop
                err = a.error
                assert isinstance(err, TopologyFailedError) and err.txid == txid, a
                if failure is None:                        # a timeout
                    assert (err.component, err.task) == ("(spark job)", -1), err
                    assert "message_timeout_secs" in err.cause and "message_timeout_secs" in str(err), err
                else:
                    assert (err.component, err.task, err.cause) == (failure.component, failure.task, failure.message)
                    assert failure.describe() in str(err), err
                if failure is None or failure.kind != "fatal":
                    assert f"max_attempts={self.s.max_attempts}" in str(err), err
            self.stopped = a
            return
        assert self.stopped is None, f"{exp.source}: {a} after {self.stopped}"
        assert exp.stop is None, f"{exp.source}: {a} where the run must stop"
        if isinstance(a, Record):
            assert self.kind == "opaque" and exp.record is not None and not exp.record_seen, f"{exp.source}: {a}"
            assert (a.txid, a.attempt, a.meta, a.commit_started) == exp.record, (a, exp.record)
            exp.record_seen = True
            return
        if isinstance(a, Commit):
            t = a.txid
            assert self.commit_out is None, f"{a} while the Commit of {self.commit_out} is unanswered"
            assert t == self.last_committed + 1, f"{a} after txid {self.last_committed}"
            assert t not in self.committed, f"{a}: committed already"
            f = self.flight.get(t)
            assert f is not None and f.attempt == a.attempt and f.status == "processed", (a, f)
            assert a.meta == f.meta and a.partitions == f.parts, (a, f)
            if exp.record is not None and exp.record[0] == t:
                assert exp.record_seen, f"{a} before its Record"
            started = self.commit_started.setdefault(t, [])
            started.append(a.attempt)
            assert a.commit_started == tuple(started), (a, started)
            f.status, self.commit_out = "committing", t
            return
        # Plan or Launch: the next txid, with a free slot, its backoff waited out, not deactivated
        t = a.txid
        assert not self.paused, f"{exp.source}: {a} while deactivated"
        assert t == self.last_committed + len(self.flight) + 1, f"{a}: in flight {list(self.flight)}"
        assert len(self.flight) < self.s.max_spout_pending, f"{a}: {len(self.flight)} in flight"
        assert self.limit is None or t <= self.limit, f"{a}: beyond max_batches"
        n = self.nfail.get(t, 0)
        if n:
            assert self.now >= self.fail_at[t] + delay(self.s, n), (
                f"{a} at {self.now}: failure {n} at {self.fail_at[t]}, backoff {delay(self.s, n)}")
        prev_meta, prev_parts = self._prev(t)
        if isinstance(a, Plan):
            assert self.planning is None, f"{a} while txid {self.planning} is planned"
            assert t not in self.first_meta, f"{a}: a transactional txid is never planned again"
            assert a.prev_meta == prev_meta and a.partitions == prev_parts, (a, prev_meta, prev_parts)
            self.planning = t
            return
        assert isinstance(a, Launch), a
        assert a.attempt > self.attempt_hi.get(t, 0), f"{a}: attempt {self.attempt_hi.get(t)} before"
        assert a.commit_started == tuple(self.commit_started.get(t, ())), a
        src = exp.source
        planned_now = src[0] == "planned" and src[1] == t and not exp.launched
        if self.kind not in REPLANNED and t in self.first_meta:
            assert a.meta == self.first_meta[t], f"{a}: first launched with {self.first_meta[t]}"
        else:
            assert planned_now and a.meta == src[2], f"{a} without a Plan answered with its metadata ({src})"
            exp.launched = True
            if self.kind not in REPLANNED:
                self.first_meta[t] = copy.deepcopy(a.meta)
        if self.kind in ("plain", "core"):
            assert a.partitions is None, a
        else:
            assert a.partitions == advance(prev_parts, a.meta), (a, prev_parts)
        self.flight[t] = Flight(a.attempt, copy.deepcopy(a.meta), copy.deepcopy(a.partitions), "processing", self.now)
        self.attempt_hi[t] = a.attempt

    # -- steps ------------------------------------------------------------------------------------------
    @rule(data=st.data())
    def step(self, data):
        """One event: a processing job ends, time passes, or a cancelled job's result arrives late.
        (One rule choosing among them: hypothesis's swarm testing of several rules with
        preconditions aborts many runs that end up with no rule enabled.)"""
        self.busy = True
        events = ["time"] * 2 + ["job"] * 3 * bool(self.jobs and not self.done) + ["late"] * bool(self.cancelled)
        events += ["operator"] * (not self.done)
        event = data.draw(st.sampled_from(events), label="event")
        {"job": self.finish_job, "time": self.advance_time, "late": self.late_result,
         "operator": self.operator}[event](data)

    def operator(self, data):
        """The operator acts while nothing is queued (see ``_operator``)."""
        self._operator(data)
        self._run(data)

    def _operator(self, data):
        """`trident deactivate`, `activate` or `kill`: no new txid while deactivated (those in
        flight go on), emitting again at once on activate, and a kill stops the run with
        every txid in flight cancelled -- one whose Commit is queued but not carried out
        included: the engine carries out only the queued Cancels, then the kill's actions."""
        what = data.draw(st.sampled_from(["deactivate"] * 3 + ["activate"] * 3 + ["kill"]), label="operator")
        if self.stopped is not None:                   # a Stop is queued: the operator changes nothing
            self._ignored(lambda: getattr(self.coord, what)(self.now, "ops"))
            return
        if what == "deactivate":
            before = state_of(self.coord)
            assert self.coord.deactivate(self.now, "ops") == []
            after = state_of(self.coord)
            assert after.pop("paused") is True and {**before, "paused": None} == {**after, "paused": None}
            self.paused = True
        elif what == "activate":
            if not self.paused:
                self._ignored(lambda: self.coord.activate(self.now, "ops"))
                return
            self.paused = False
            self._answer(self.coord.activate(self.now, "ops"), Expect(("activate",)))
        else:
            exp = Expect(("kill",))
            exp.cancels = {(t, f.attempt) for t, f in self.flight.items()}
            for t, f in self.flight.items():
                self.voided.add((t, f.attempt))
            self.commit_out = None
            actions = self.coord.kill(self.now, "ops")
            assert actions and isinstance(actions[-1], Stop) and actions[-1].reason == "killed by ops", actions
            assert actions[-1].error is None
            self.queue = deque(a for a in self.queue if isinstance(a, Cancel))
            self._answer(actions[:-1], exp)
            self.stopped = actions[-1]
            self.queue.append(actions[-1])

    def finish_job(self, data):
        """A processing job ends: processed (an opaque one may have emitted less), or failed."""
        t, attempt = data.draw(st.sampled_from(sorted(self.jobs)), label="job")
        self.jobs.discard((t, attempt))
        outcome = data.draw(st.sampled_from(OUTCOMES), label="outcome")
        if outcome != "ok":
            self._failed(t, attempt, Fail(outcome, t, attempt))
        else:
            self.results.add((t, attempt))
            actual = None
            report = "none"
            if self.kind == "opaque":
                report = data.draw(st.sampled_from(["none", "as planned", "less", "less", "less"]), label="report")
            if report != "none":
                actual = copy.deepcopy(self.flight[t].meta)
                if report == "less":                       # some partitions emitted less (or are not told)
                    for p, m in list(actual.items()):
                        how = data.draw(st.sampled_from(["same", "less", "less", "untold"]), label="partition")
                        if how == "less" and m["end"] > m["start"]:
                            m["end"] = data.draw(st.integers(m["start"], m["end"] - 1), label="emitted to")
                        elif how == "untold":
                            del actual[p]
            self._processed(t, attempt, actual)
        self._run(data)

    def advance_time(self, data):
        """Time passes (a little, to the coordinator's next wake-up, or past a message timeout)."""
        if self.done:                                 # the run ended: time passing changes nothing
            self.now += data.draw(st.sampled_from([0.0, 0.5, 10.0]), label="dt")
            self._ignored(lambda: self.coord.tick(self.now))
            return
        how = data.draw(st.sampled_from(["little"] * 6 + ["wakeup"] * 2 + ["timeout", "none"]), label="time")
        if how == "little":
            self.now += data.draw(st.sampled_from([0.01, 0.05, 0.1, 0.3]), label="dt")
        elif how == "wakeup":
            w = self.coord.next_wakeup(self.now)
            if w is not None:
                assert w >= self.now
                self.now = w
        elif how == "timeout":
            self.now += self.s.message_timeout_secs
        actions = self._tick()
        if not actions and not self.done:
            # next_wakeup never names a time at which tick has nothing to do (the engine would spin)
            w = self.coord.next_wakeup(self.now)
            assert w is None or w > self.now or any(
                f.status == "processing" and f.launched_at + self.s.message_timeout_secs <= self.now
                for f in self.flight.values()), f"next_wakeup({self.now}) = {w}, but tick did nothing"
        self._run(data)

    def late_result(self, data):
        """The result of a cancelled job arrives anyway: ignored."""
        t, attempt = data.draw(st.sampled_from(sorted(self.cancelled)), label="cancelled job")
        kind = data.draw(st.sampled_from(["ok", "failed", "error", "fatal"]), label="late outcome")
        if kind == "ok":
            actual = {p: {"start": 0, "end": 0} for p in self.parts_names} if self.kind == "opaque" else None
            self._ignored(lambda: self.coord.processed(t, attempt, actual, self.now))
        else:
            self._ignored(lambda: self.coord.failed(t, attempt, Fail(kind, t, attempt), self.now))

    # -- invariants -------------------------------------------------------------------------------------
    @invariant()
    def agrees_with_the_model(self):
        if self.coord is not None:
            self._agrees()
            self.busy = False           # this step went through: teardown may check liveness

    def _agrees(self):
        c = self.coord
        assert not self.queue
        assert len(self.flight) <= self.s.max_spout_pending
        assert c.last_committed == self.last_committed
        if self.done:
            assert c.stopped is self.stopped is not None
            # nothing left behind: every attempt in flight was committed or cancelled
            assert not self.jobs and not self.results and not self.groups, (self.jobs, self.results, self.groups)
            return
        assert self.commit_out is None and c.committing is None
        assert list(self.flight) == sorted(self.flight)
        assert list(self.flight) == list(range(self.last_committed + 1, self.last_committed + 1 + len(self.flight)))
        assert {t: (b.attempt, b.status.value) for t, b in c.inflight.items()} == {
            t: (f.attempt, f.status) for t, f in self.flight.items()}
        # a processed oldest txid would have been committed (a Commit is answered at once)
        assert not self.flight or next(iter(self.flight.values())).status == "processing"
        # the engine holds jobs, job groups and results only of attempts in flight
        processing = {(t, f.attempt) for t, f in self.flight.items() if f.status == "processing"}
        processed = {(t, f.attempt) for t, f in self.flight.items() if f.status == "processed"}
        assert self.jobs == processing
        assert self.results == processed, f"results held for {sorted(self.results - processed)}"
        assert self.groups == processing | processed, f"job groups left for {sorted(self.groups - processing)}"

    def teardown(self):
        """Liveness: with no more faults (jobs and commits succeed, the spout has data), the
        run commits more batches or stops."""
        if self.coord is None or self.done or self.busy:
            return                      # (a step failed: its error is the one to report)
        self.happy = True
        if self.paused:                 # the operator activates it again
            self.paused = False
            self._answer(self.coord.activate(self.now, "ops"), Expect(("activate",)))
            self._run(None)
        goal = self.last_committed + 3
        for _ in range(300):
            if self.done or self.last_committed >= goal:
                return
            if self.jobs:
                for t, attempt in sorted(self.jobs):
                    if (t, attempt) in self.jobs:
                        self.jobs.discard((t, attempt))
                        self.results.add((t, attempt))
                        self._processed(t, attempt, None)
                        self._run(None)
            else:
                w = self.coord.next_wakeup(self.now)
                assert w is not None, "nothing running and nothing to wait for: the run is stuck"
                self.now = w if w > self.now else self.now + 1e-6
                self._tick()
                self._run(None)
        raise AssertionError(f"no progress: last committed {self.last_committed}, in flight {self.flight}")


# ≈300 runs of up to 50 steps (≈14,000 steps, ≈9 s)
CoordinatorMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestCoordinatorMachine = CoordinatorMachine.TestCase


# -- examples --------------------------------------------------------------------------------------


def coordinator(kind: str = "transactional", recovered: Recovered | None = None, max_batches: int | None = None,
                **kw: Any) -> Coordinator:
    policy = OpaqueReplay() if kind == "opaque" else TransactionalReplay(kind == "transactional")
    kw.setdefault("idle_timeout_secs", None)
    return Coordinator(CoordinatorSettings(**kw), policy, recovered, max_batches)


def meta(*ranges: tuple[int, int]) -> dict:
    return {str(p): {"start": s, "end": e} for p, (s, e) in enumerate(ranges)}


def launch_one(c: Coordinator, txid: int, m: dict, now: float) -> Launch:
    """Answer the Plan of txid with m; return its Launch."""
    assert c.planning == txid
    prev = c._prev(txid)[1]
    out = c.planned(txid, m, advance(prev, m), now)
    assert isinstance(out[0], Launch) and out[0].txid == txid
    return out[0]


def test_backoff_doubles_per_failure_up_to_its_maximum():
    c = coordinator(max_spout_pending=1, max_attempts=7, retry_backoff_secs=0.5, retry_backoff_max_secs=3.0,
                    message_timeout_secs=1000.0)
    m = meta((0, 5))
    c.start(0.0)
    launch_one(c, 1, m, 0.0)
    now, attempt = 10.0, 1
    for n, wait in enumerate([0.5, 1.0, 2.0, 3.0, 3.0], start=1):
        assert c.failed(1, attempt, Fail("error", 1, attempt), now) == [Cancel(1, attempt)]
        assert c.next_wakeup(now) == now + wait
        assert c.tick(now + wait - 0.01) == []
        assert c.next_wakeup(now + wait - 0.01) == now + wait
        out = c.tick(now + wait)
        attempt += 1
        assert out == [Launch(1, attempt, m, m, ())], (n, out)      # replayed as is, a new attempt
        now += wait + 1.0
    assert attempt == 6


def test_no_busy_wait_during_a_backoff():
    """next_wakeup names the end of the backoff, not now (the engine would spin until then)."""
    for kind in ("transactional", "opaque"):
        c = coordinator(kind, max_spout_pending=2, retry_backoff_secs=0.5)
        c.start(0.0)
        launch_one(c, 1, meta((0, 1)), 0.0)
        assert c.planned(2, None, None, 0.0) == []
        c.failed(1, 1, Fail("error", 1, 1), 1.0)
        assert c.next_wakeup(1.0) == 1.5
        assert c.tick(1.2) == [] and c.next_wakeup(1.2) == 1.5


def test_timeout_fails_the_attempt_and_later_ones_and_names_message_timeout_secs():
    c = coordinator(max_spout_pending=2, max_attempts=2, message_timeout_secs=30.0, retry_backoff_secs=1.0)
    c.start(0.0)
    launch_one(c, 1, meta((0, 1)), 0.0)
    launch_one(c, 2, meta((1, 2)), 5.0)
    assert c.next_wakeup(6.0) == 30.0
    assert c.tick(29.9) == []
    assert c.tick(30.0) == [Cancel(1, 1), Cancel(2, 1)]
    assert not c.inflight
    assert [type(a) for a in c.tick(31.0)] == [Launch, Launch]          # after the backoff, new attempts
    assert [(b.txid, b.attempt) for b in c.inflight.values()] == [(1, 2), (2, 2)]
    out = c.tick(61.0)
    assert out[:2] == [Cancel(1, 2), Cancel(2, 2)] and isinstance(out[-1], Stop)
    err = out[-1].error
    assert isinstance(err, TopologyFailedError) and err.txid == 1 and err.component == "(spark job)"
    assert "max_attempts=2" in str(err) and "message_timeout_secs=30.0" in str(err)
    assert "message_timeout_secs=30.0" in err.cause


def test_fatal_failure_stops_at_once_naming_where():
    c = coordinator(max_spout_pending=3, max_attempts=5)
    c.start(0.0)
    launch_one(c, 1, meta((0, 1)), 0.0)
    launch_one(c, 2, meta((1, 2)), 0.0)
    out = c.failed(2, 1, Fail("fatal", 2, 1, component="split", task=1, message="bad tuple"), 1.0)
    assert out[:-1] == [Cancel(1, 1), Cancel(2, 1)]
    err = out[-1].error
    assert (err.txid, err.component, err.task, err.cause) == (2, "split", 1, "bad tuple")
    assert "max_attempts" not in str(err)
    # nothing after a Stop: the Plan of txid 3 asked before it, a late result, time passing
    assert c.planned(3, meta((2, 3)), meta((2, 3)), 1.0) == []
    assert c.processed(1, 1, None, 1.1) == [] and c.tick(100.0) == []


def test_failure_cancels_processed_later_attempts_too():
    """A later txid already processed is failed as well: its held result must be released (Cancel)."""
    c = coordinator(max_spout_pending=3, retry_backoff_secs=0.1)
    c.start(0.0)
    launch_one(c, 1, meta((0, 1)), 0.0)
    launch_one(c, 2, meta((1, 2)), 0.0)
    assert c.processed(2, 1, None, 0.5) == []              # waits for txid 1
    out = c.failed(1, 1, Fail("failed", 1, 1), 1.0)
    assert Cancel(1, 1) in out and Cancel(2, 1) in out and not c.inflight


def test_resume_transactional_replays_stored_meta_without_a_plan():
    m3, m4 = meta((4, 6), (4, 5)), meta((6, 9), (5, 5))
    parts = meta((3, 4), (3, 4))
    rec = Recovered(2, meta((3, 4), (3, 4)), parts,
                    {3: {"meta": m3, "attempts": 2, "commit_started": [2]},
                     4: {"meta": m4, "attempts": 1, "commit_started": []}})
    c = coordinator("transactional", rec, max_spout_pending=3)
    out = c.start(0.0)
    assert out == [Launch(3, 3, m3, advance(parts, m3), (2,)),
                   Launch(4, 2, m4, advance(advance(parts, m3), m4), ()),
                   Plan(5, m4, advance(advance(parts, m3), m4))]


def test_resume_opaque_plans_again_from_the_committed_partition_state():
    parts = meta((3, 4))
    rec = Recovered(2, meta((3, 4)), parts, {3: {"meta": meta((4, 9)), "attempts": 2, "commit_started": [2]}})
    c = coordinator("opaque", rec, max_spout_pending=2)
    assert c.start(0.0) == [Plan(3, meta((3, 4)), parts)]
    m3 = meta((4, 7))                                      # the spout plans anew
    out = c.planned(3, m3, advance(parts, m3), 0.0)
    assert out == [Launch(3, 3, m3, m3, (2,)), Plan(4, m3, m3)]


def test_opaque_batch_that_emitted_less_keeps_it_and_later_ones_are_planned_again_uncounted():
    c = coordinator("opaque", max_spout_pending=3, max_attempts=1)
    c.start(0.0)
    launch_one(c, 1, meta((0, 10)), 0.0)
    launch_one(c, 2, meta((10, 20)), 0.0)
    out = c.processed(1, 1, {"0": {"start": 0, "end": 7}}, 1.0)
    assert out == [Record(1, 1, meta((0, 7)), ()), Cancel(2, 1), Commit(1, 1, meta((0, 7)), meta((0, 7)), (1,)),
                   Plan(2, meta((0, 7)), meta((0, 7)))]
    assert c.failures_of == {}                             # max_attempts=1, yet no Stop
    out = c.planned(2, meta((7, 20)), meta((7, 20)), 1.0)
    assert out[0] == Launch(2, 2, meta((7, 20)), meta((7, 20)), ())
    assert c.committed(1, 1.1) == [] and c.last_committed == 1


def test_opaque_failed_txid_with_nothing_to_replan_still_stops_when_idle():
    """An opaque txid failed, and when planned again the spout has nothing: the run is idle."""
    c = coordinator("opaque", max_spout_pending=1, retry_backoff_secs=0.5, idle_timeout_secs=1.0)
    c.start(0.0)
    launch_one(c, 1, meta((0, 1)), 0.0)
    c.failed(1, 1, Fail("error", 1, 1), 1.0)
    assert c.tick(1.5) == [Plan(1, None, None)]
    assert c.planned(1, None, None, 1.5) == []
    assert c.next_wakeup(1.6) == 1.7                       # the next poll, not now
    assert c.tick(2.6) == [Plan(1, None, None)]
    assert c.planned(1, None, None, 2.6) == [Stop("spout has nothing more")]


def test_late_results_of_cancelled_attempts_are_ignored():
    c = coordinator(max_spout_pending=2, retry_backoff_secs=0.0)
    c.start(0.0)
    launch_one(c, 1, meta((0, 1)), 0.0)
    launch_one(c, 2, meta((1, 2)), 0.0)
    out = c.failed(1, 1, Fail("error", 1, 1), 1.0)
    assert out[:2] == [Cancel(1, 1), Cancel(2, 1)] and out[2] == Launch(1, 2, meta((0, 1)), meta((0, 1)), ())
    before = state_of(c)
    assert c.processed(2, 1, None, 1.1) == [] and c.failed(2, 1, Fail("error", 2, 1), 1.1) == []
    assert c.processed(1, 1, None, 1.1) == []
    assert state_of(c) == before


@pytest.mark.parametrize("kind", KINDS)
def test_max_batches_stops_after_the_last_commit(kind):
    c = coordinator(kind, max_batches=2, max_spout_pending=4)
    out = c.start(0.0)
    for t in (1, 2):
        m = [t - 1, t] if kind == "plain" else meta((t - 1, t))
        parts = None if kind == "plain" else advance(c._prev(t)[1], m)
        out = c.planned(t, m, parts, 0.0)
    assert [type(a) for a in out] == [Launch]              # no Plan beyond max_batches
    assert c.processed(1, 1, None, 0.1)[0].txid == 1
    assert c.committed(1, 0.2) == []
    assert c.processed(2, 1, None, 0.3)[0].txid == 2
    assert c.committed(2, 0.4) == [Stop("max_batches")]


# -- several spouts under one txid ------------------------------------------------------------------

def test_spouts_mixed_a_failed_txid_is_planned_again_keeping_the_transactional_part():
    """Spout t (transactional, partitioned) and o (opaque) share each txid. A failure of txid
    1 plans it again with t's part kept as it was (None included: t sat txid 2 out), o's
    part planned anew; o's emitted-less report adjusts only o's part."""
    pol = SpoutsReplay({"t": TransactionalReplay(True), "o": OpaqueReplay()})
    c = Coordinator(CoordinatorSettings(max_spout_pending=2, idle_timeout_secs=None, retry_backoff_secs=0.0),
                    pol, None, None)
    assert c.start(0.0) == [Plan(1, None, None, None)]
    m1 = {"t": meta((0, 5)), "o": meta((0, 4))}
    s1 = pol.advance(None, m1)
    out = c.planned(1, m1, s1, 0.0)
    assert out == [Launch(1, 1, m1, s1, ()), Plan(2, m1, s1, None)]
    m2 = {"t": None, "o": meta((4, 8))}
    s2 = pol.advance(s1, m2)
    assert s2 == {"t": meta((0, 5)), "o": meta((4, 8))}      # t keeps its state through txid 2
    assert c.planned(2, m2, s2, 0.0)[0] == Launch(2, 1, m2, s2, ())
    assert c.failed(1, 1, Fail("failed", 1, 1), 1.0) == [Cancel(1, 1), Cancel(2, 1), Plan(1, None, None, {"t": meta((0, 5))})]
    m1b = {"t": meta((0, 5)), "o": meta((0, 6))}
    out = c.planned(1, m1b, pol.advance(None, m1b), 1.0)
    assert out[0].meta == m1b and out[1] == Plan(2, m1b, pol.advance(None, m1b), {"t": None})
    assert c.keep == {2: {"t": None}}
    # o emitted less in txid 1, attempt 2: its part adjusted, t's untouched; txid 2 planned again
    out = c.processed(1, 2, {"o": {"0": {"start": 0, "end": 3}}}, 1.1)
    kept = {"t": meta((0, 5)), "o": meta((0, 3))}
    assert out[0] == Record(1, 2, kept, ()) and out[1] == Commit(1, 2, kept, pol.advance(None, kept), (2,))


def test_spouts_all_transactional_replay_as_stored_and_resume_keeps_the_transactional_part():
    both = SpoutsReplay({"a": TransactionalReplay(False), "b": TransactionalReplay(True)})
    m3 = {"a": [3, 4], "b": None}
    assert both.replay_meta(m3) == m3 and both.replays
    mixed = SpoutsReplay({"a": TransactionalReplay(False), "o": OpaqueReplay()})
    rec = Recovered(2, {"a": [2, 3], "o": meta((0, 2))}, {"a": [2, 3], "o": meta((0, 2))},
                    {3: {"meta": {"a": [3, 4], "o": meta((2, 5))}, "attempts": 1, "commit_started": []}})
    c = Coordinator(CoordinatorSettings(max_spout_pending=2, idle_timeout_secs=None), mixed, rec, None)
    assert c.start(0.0) == [Plan(3, rec.committed_meta, rec.partitions, {"a": [3, 4]})]
