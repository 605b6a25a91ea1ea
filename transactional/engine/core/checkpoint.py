"""Checkpoints of stateful bolts (Storm's state management, docs/design.md §7).

Stateful bolts run in the commit phase, in micro-batch order, on the driver; each task's
``KeyValueState`` (namespace ``<topology_id>:<component>:<task>``) lives here between
checkpoints, gathering the tasks' changes as *pending*. The acks the stateful tasks
send are *held*: a spout tuple whose tree went through a stateful bolt is acked only
once the state it changed is committed.

Checkpoint ``c`` (``Checkpointer.checkpoint``, every ``checkpoint_interval_ms`` while acks
are held, and at the end of a run), a three-phase commit across all stateful bolts:

  1. ``pre_prepare(c)`` on each stateful task's bolt;
  2. record ``checkpoint = {txid: c, phase: "preparing", states: [...]}`` durably;
  3. ``prepare_commit(c)`` on every state (its changes written beside the committed ones);
  4. record ``phase: "prepared"``: from here the checkpoint will be committed, also by a
     driver that restarts after a crash;
  5. ``pre_commit(c)`` and ``commit(c)`` on every state;
  6. record ``phase: "committed"``;
  7. release the held acks (the caller gives them to the ackers).

With ``commit_placement="executors"`` the stateful bolts run in the commit job on the
executors instead, each task opening its state there, and every micro-batch is a
checkpoint: the tasks prepare it when they end (``on_executors``), then the driver records
"prepared" and commits every state (``commit_prepared``) before it gives their acks to the
ackers.

**Time to live** (a stateful bolt's ``add_configuration("topology.state.ttl.secs", secs)``,
with ``"topology.state.ttl.from"`` and ``"topology.state.ttl.grace.secs"``; ``state.keyvalue``):
each checkpoint has a time, the driver's wall clock when it opened (at the start, and
after the previous checkpoint committed or rolled back); every state of the checkpoint
reads and stamps expiries by it, and its prepare stores it, so the recovery's commit of a
prepared checkpoint decides as the first attempt did.

A failure before step 4 (or of a stateful bolt in any micro-batch) rolls every state back
to the last checkpoint (``pre_rollback``, then ``rollback``) and returns the held roots,
which the caller fails so that their spouts replay them. A failure after step 4 stops the
run: the next start finishes the commit.

Recovery at start (``recover``), as Storm's: the driver's epoch first fences every state
of the topology (an older driver's writes are refused from then on), then a checkpoint
recorded "prepared" is committed in every state that still holds it prepared; any other
prepared changes are rolled back. Checkpoint ids continue above both the recorded one and every state's last
committed id, so they grow even when the coordinator state is not durable.

**Rebalance** (``rebalance``, at the end of ``recover``; Storm's ``rebalance``): each
stateful bolt's parallelism is recorded with the coordinator's state (``stateful``:
``{bolt: {"parallelism": p, "tasks": n}}``, ``n`` the task namespaces that may hold its
state). A run that gives a bolt another parallelism first moves every key of its states
to the task its grouping now sends that key to (fields grouping: ``stable_hash(key) % p``,
the key being the grouped value or tuple of values, as the word of a word count; global
grouping: task 0), as one checkpoint ``c`` before any tuple:

  1. record ``tasks = max(n, p_new)`` (and ``to: p_new``): every namespace either layout uses;
  2. record ``checkpoint = {txid: c, phase: "preparing"}``, read every committed key of
     those namespaces, and prepare in each the puts and deletes that give the new layout;
  3. steps 4-6 of a checkpoint: record "prepared", commit every state, record "committed";
  4. record ``{"parallelism": p_new, "tasks": p_new}``.

A crash anywhere leaves either the old layout (rolled back by the restart) or the new one
(committed by it) within the recorded namespaces, and the restart moves the keys again,
which from the new layout changes nothing: no key is lost or counted twice. A bolt whose
state cannot be moved -- its inputs are not fields (or global) groupings, a key lies in a
task its grouping does not send it to, or in two tasks -- is refused with
``StateLossError`` naming the bolt and both parallelisms, before anything is written;
one that only grows (no state in the tasks it drops) is recorded as it is. A stateful
windowed bolt's window records move in step 2 too, each held tuple with its key
(``transactional.engine.core.window_moves``); they are exempt from the bolt's TTL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from state.base import TransactionalState
from state.keyvalue import KeyValueState, open_key_value_state
from state.map.ttl import Ttl
from transactional.engine.core.window_moves import META, TaskWindow, grouped_key, move_windows, take_windows
from transactional.engine.faults import crash_point
from transactional.engine.routing import stable_hash
from transactional.engine.store import CoordinatorStore
from transactional.engine.task_states import DriverTaskStates, ExecutorTaskStates
from transactional.exceptions import ConfigError, StateLossError, TopologyFailedError
from transactional.topology import Topology

log = logging.getLogger("trident")

#: a stateful bolt's settings (``add_configuration``) giving its state a time to live
TTL_SECS, TTL_FROM, TTL_GRACE_SECS = "topology.state.ttl.secs", "topology.state.ttl.from", "topology.state.ttl.grace.secs"


def state_ttl(topology: Topology, component: str) -> Ttl | None:
    """The ``Ttl`` a stateful bolt's settings give its state (None: none); ``ConfigError``
    naming the bolt for bad ones, or for a bolt without a ``KeyValueState``. On a stateful
    windowed bolt it expires the bolt's own keys; its window's records never expire (they
    are deleted as its windows close: docs/core.md, "Time to live of a windowed bolt")."""
    spec = topology.component(component)
    if spec.conf.get(TTL_SECS) is None:
        return None
    if spec.core not in ("stateful", "swindowed"):
        msg = (f"bolt {component!r}: {TTL_SECS!r} is for stateful bolts (BaseStatefulBolt, "
               "BaseStatefulWindowedBolt); this bolt keeps no KeyValueState. Remove the setting")
        raise ConfigError(msg)
    try:
        return Ttl.of(spec.conf.get(TTL_SECS), spec.conf.get(TTL_FROM, "write"), spec.conf.get(TTL_GRACE_SECS))
    except ValueError as e:
        msg = f"bolt {component!r}: {e}"
        raise ConfigError(msg) from e


@dataclass
class _Task:
    """The key-value part of a commit-phase task's door on the driver
    (``engine.task_states.KeyValueTask``): the task's state (opened when a stateful bolt
    asks for it), and the bolt instance of its latest micro-batch (it hears the hooks)."""

    namespace: str
    opener: Callable[[str], KeyValueState]
    state: KeyValueState | None = None
    owner: Any = None

    def key_value_state(self, owner: Any = None) -> KeyValueState:
        """The task's state; ``owner`` hears the checkpoint hooks from now on."""
        if owner is not None:
            self.owner = owner
        if self.state is None:
            self.state = self.opener(self.namespace)
        return self.state

    def hook(self, name: str, *args: Any) -> None:
        if self.owner is not None:
            getattr(self.owner, name)(*args)

    def finish(self) -> None:
        """The task's micro-batch ended: its changes stay pending until a checkpoint."""

    def abort(self) -> None:
        """The task failed: the engine rolls every state back."""


def _router(groupings: set[str], p_new: int) -> Callable[[Any], int] | None:
    """The task of ``p_new`` a stateful bolt's key belongs to, for its input ``groupings``;
    None when they do not say (shuffle and the like)."""
    if groupings <= {"fields"}:
        def route(key: Any) -> int:
            return stable_hash(key) % p_new
        return route
    if groupings == {"global"}:
        def route_global(key: Any) -> int:
            return 0
        return route_global
    return None


class Checkpointer:
    """The stateful tasks' states and the checkpoint protocol (module docstring). The
    engine passes it to the commit phase as the tasks' states (``for_task``)."""

    def __init__(self, topology: Topology, url: str, options: dict[str, Any], store: TransactionalState,
                 interval_ms: int, clock: Callable[[], float], epoch: int | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``epoch``: this driver's, fencing every state write (``state.keyvalue``);
        ``wall_clock``: the checkpoints' times (seconds), for states with a TTL."""
        self.topology = topology
        self.epoch = epoch
        self.url = url
        self.options = options
        self.store = store
        self.interval = interval_ms / 1000
        self.clock = clock
        self.stateful = frozenset(c.id for c in topology.bolts if c.core in ("stateful", "swindowed"))
        self.windowed = frozenset(c.id for c in topology.bolts if c.core == "swindowed")
        self.tasks: dict[tuple[str, int], _Task] = {}
        self.held: list[dict[int, int]] = []        # stateful tasks' acks since the last checkpoint
        self.touched = False                        # stateful tasks ran since the last checkpoint
        self.next_id = 1
        self.last = clock()
        self.checkpoints = 0
        self.ttls = {c: state_ttl(topology, c) for c in sorted(self.stateful)}   # bad settings refused now
        self.wall_clock = wall_clock
        self.time_ms = int(wall_clock() * 1000)     # the open checkpoint's time (module docstring)

    def namespace(self, component: str, task: int) -> str:
        return f"{self.topology.topology_id}:{component}:{task}"

    def _component(self, namespace: str) -> str:
        return namespace[len(self.topology.topology_id) + 1:].rsplit(":", 1)[0]

    def _open(self, namespace: str) -> KeyValueState:
        comp = self._component(namespace)
        kv = open_key_value_state(self.url, namespace, fence_scope=self.topology.topology_id, epoch=self.epoch,
                                  ttl=self.ttls.get(comp), **self.options)
        if comp in self.windowed:
            kv.untimed = (META,)        # a window's records: deleted as its windows close, never expired
        kv.at(self.time_ms)
        return kv

    def _next_time(self) -> None:
        """A checkpoint committed or rolled back: the next one's time, told every open state."""
        self.time_ms = int(self.wall_clock() * 1000)
        for t in self.tasks.values():
            if t.state is not None:
                t.state.at(self.time_ms)

    # -- recovery ---------------------------------------------------------------------------
    def recover(self) -> None:
        """Finish or undo what a crashed driver left (module docstring), number the next
        checkpoint, then move the states of bolts whose parallelism changed (``rebalance``)."""
        rec = self.store.get("checkpoint") or {}
        recorded = CoordinatorStore(self.store).recorded_stateful()
        names = set(rec.get("states") or []) | set(self._names())
        names |= {self.namespace(c, t) for c, r in recorded.items() if c in self.stateful for t in range(r["tasks"])}
        top = int(rec.get("txid") or 0)
        for i, ns in enumerate(sorted(names)):
            kv = self._open(ns)
            if i == 0:
                kv.raise_fence()     # from now on, no older driver writes any state of this topology
            p = kv.prepared_txid()
            if p is not None:
                if rec.get("phase") == "prepared" and rec.get("txid") == p:
                    kv.commit(p)
                    log.info("recovery: committed the prepared checkpoint %d of state %r", p, ns)
                else:
                    kv.rollback()
                    log.info("recovery: rolled back the unfinished checkpoint %d of state %r", p, ns)
            top = max(top, kv.committed_txid() or 0)
        if rec.get("phase") in ("prepared", "preparing"):
            done = "committed" if rec["phase"] == "prepared" else "rolled back"
            self.store.set("checkpoint", {**rec, "phase": done})
        self.next_id = top + 1
        self.rebalance(rec)

    # -- a changed parallelism ----------------------------------------------------------------
    def rebalance(self, last: dict[str, Any] | None = None) -> None:
        """Give every stateful bolt's state the layout of its parallelism now (module
        docstring); ``last``: the checkpoint record found at start (its states name the
        tasks of a topology run before parallelisms were recorded)."""
        coord = CoordinatorStore(self.store)
        recorded = coord.recorded_stateful()
        for comp in sorted(self.stateful):
            p_new = self.topology.component(comp).parallelism
            r = recorded.get(comp)
            if r is None:      # not recorded: the tasks of the last checkpoint, if any, else p_new
                prefix = f"{self.topology.topology_id}:{comp}:"
                seen = [int(n[len(prefix):]) for n in (last or {}).get("states") or [] if n.startswith(prefix)]
                r = {"parallelism": max(seen) + 1 if seen else p_new, "tasks": max(seen) + 1 if seen else p_new}
            if r["parallelism"] == p_new and r["tasks"] == p_new and "to" not in r:
                if comp not in recorded:
                    coord.record_stateful(comp, p_new, p_new)
                continue
            self._move(coord, comp, r, p_new)

    def _move(self, coord: CoordinatorStore, comp: str, r: dict[str, Any], p_new: int) -> None:
        """Move ``comp``'s state from the layout recorded in ``r`` to ``p_new`` tasks, as one
        fenced, recorded checkpoint (module docstring), or refuse."""
        p_old, n = int(r["parallelism"]), max(int(r["tasks"]), p_new)
        groupings = {s.grouping for s in self.topology.component(comp).inputs}
        names = [self.namespace(comp, t) for t in range(n)]
        states = [self._open(ns) for ns in names]
        held = [{k: (v, x) for k, v, x in kv.expiring_items()} for kv in states]   # recovery left nothing prepared
        windows = [take_windows(h) for h in held] if comp in self.windowed else []
        route = _router(groupings, p_new)
        if route is None:
            dropped = sum(len(h) for h in held[p_new:]) + sum(len(w.rows) for w in windows[p_new:])
            if dropped:
                self._refuse(comp, p_old, p_new, f"its inputs are {' and '.join(sorted(groupings))} groupings, "
                             f"which do not say which task a key belongs to, and tasks {p_new}..{n - 1} hold "
                             f"{dropped} key(s)")
            coord.record_stateful(comp, p_new, p_new)
            return
        owner = self._owners(comp, held, groupings, p_old, p_new, {p_old, p_new, int(r.get("to", p_new))})
        # 1. every namespace either layout uses, durably, before any state is written
        coord.record_stateful(comp, p_old, n, to=p_new)
        # 2. the puts and deletes of the new layout, prepared as checkpoint c
        c = self.next_id
        self.next_id += 1
        self.store.set("checkpoint", {"txid": c, "phase": "preparing", "states": names,
                                      "rebalance": {comp: [p_old, p_new]}})
        crash_point("rebalance.preparing", txid=c)
        dest = {key: route(key) for key in owner}
        moved = 0
        for t, (kv, h) in enumerate(zip(states, held, strict=True)):
            for key, (value, exp) in h.items():
                if dest[key] != t:
                    kv.delete(key)
                    states[dest[key]].put_expiring(key, value, exp)    # a moved key keeps its expiry
                    moved += 1
        if windows:
            self._move_windows(comp, states, windows, route, p_new)
        for kv in states:
            kv.prepare_commit(c)
        crash_point("rebalance.before_prepared", txid=c)
        # 3. record "prepared", commit every state, record "committed"
        self._commit_recorded(c, names, ((None, kv) for kv in states))
        # 4. the new parallelism
        crash_point("rebalance.before_record", txid=c)
        coord.record_stateful(comp, p_new, p_new)
        log.info("rebalance: moved %d of the %d key(s) of stateful bolt %r from %d to %d tasks (checkpoint %d)",
                 moved, len(owner), comp, p_old, p_new, c)

    def _move_windows(self, comp: str, states: list[KeyValueState], windows: list[TaskWindow],
                      route: Callable[[Any], int], p_new: int) -> None:
        """A stateful windowed bolt's held tuples to the tasks their keys now reach
        (``transactional.engine.core.window_moves``): every old window record deleted, the
        new ones put, in the move's checkpoint."""
        for kv, w in zip(states, windows, strict=True):
            for key in w.keys:
                kv.delete(key)
        new = move_windows(windows, grouped_key(self.topology, comp), route, p_new)
        for kv, recs in zip(states, new, strict=False):
            for key, value in recs.items():
                kv.put(key, value)
        log.info("rebalance: moved the %d tuple(s) held in the windows of bolt %r to %d task(s)",
                 sum(len(w.rows) for w in windows), comp, p_new)

    def _owners(self, comp: str, held: list[dict[Any, Any]], groupings: set[str], p_old: int, p_new: int,
                layouts: set[int]) -> dict[Any, int]:
        """The task holding each key of ``held`` (one dict per task); refuses a key held by
        two tasks, or (fields grouping) by a task no layout sends it to."""
        owner: dict[Any, int] = {}
        for t, h in enumerate(held):
            for key in h:
                if key in owner:
                    self._refuse(comp, p_old, p_new, f"key {key!r} is in the state of tasks {owner[key]} and {t}")
                owner[key] = t
                if groupings == {"fields"} and not any(stable_hash(key) % p == t for p in layouts):
                    self._refuse(comp, p_old, p_new, f"key {key!r} is in the state of task {t}, but the fields "
                                 f"grouping sends it to task {stable_hash(key) % p_old} (a stateful bolt's keys "
                                 "must be the values it is grouped on for its state to be moved)")
        return owner

    def _refuse(self, comp: str, p_old: int, p_new: int, why: str) -> None:
        msg = (f"stateful bolt {comp!r} of topology {self.topology.topology_id!r} ran with parallelism {p_old} "
               f"and is now given {p_new}, but its state cannot be moved to the new tasks: {why}. Nothing was "
               f"changed; run it with parallelism {p_old} again (set_bolt({comp!r}, ..., {p_old}))")
        raise StateLossError(msg)

    # -- the commit phase's view -----------------------------------------------------------
    def for_task(self, component: str, task: int) -> DriverTaskStates:
        """A commit-phase task's door to state on the driver: its ``KeyValueState``."""
        return DriverTaskStates(component, task, key_value=self.key_value_task(component, task))

    def key_value_task(self, component: str, task: int) -> _Task:
        """The state of a stateful task (opened on first use)."""
        t = self.tasks.get((component, task))
        if t is None:
            t = self.tasks[(component, task)] = _Task(self.namespace(component, task), self._open)
        return t

    def _states(self) -> list[_Task]:
        """The tasks whose state is open, in a fixed order."""
        return [self.tasks[k] for k in sorted(self.tasks) if self.tasks[k].state is not None]

    def hold(self, acks: dict[int, int]) -> None:
        """Keep a stateful task's acks until the next checkpoint."""
        if acks:
            self.held.append(acks)

    def dirty(self) -> bool:
        """Stateful tasks ran, or their acks wait, since the last checkpoint."""
        return self.touched or bool(self.held)

    def due(self, now: float) -> bool:
        """Something waits for a checkpoint and the interval passed since the last one."""
        return self.dirty() and now - self.last >= self.interval

    # -- checkpoint and rollback -------------------------------------------------------------
    def checkpoint(self) -> list[dict[int, int]]:
        """Checkpoint every state (module docstring); returns the acks it releases.
        Raises on a failure before the prepare is recorded (after ``rollback``, the
        caller fails the held roots), ``TopologyFailedError`` after it."""
        c = self.next_id
        tasks = self._states()
        states = [t.key_value_state() for t in tasks]
        names = [t.namespace for t in tasks]
        self.next_id += 1
        # Step 1. the hooks
        for t in tasks:
            t.hook("pre_prepare", c)
        # Step 2. note durably that checkpoint c is being prepared
        self.store.set("checkpoint", {"txid": c, "phase": "preparing", "states": names})
        crash_point("checkpoint.preparing", txid=c)
        # Step 3. every state writes its changes beside its committed values
        for kv in states:
            kv.prepare_commit(c)
        crash_point("checkpoint.before_prepared", txid=c)
        # Steps 4-6. record "prepared", commit every state, record "committed"
        self._commit_recorded(c, names, ((t, kv) for t, kv in zip(tasks, states, strict=True)))
        # Step 7. release the acks held for it
        released, self.held = self.held, []
        return released

    def _commit_recorded(self, c: int, names: list[str], states: Iterable[tuple[Any, KeyValueState]]) -> None:
        """Steps 4-6 of checkpoint ``c``: record that every state in ``names`` is prepared
        (from then on the checkpoint will be committed, also by a restart), commit each of
        ``states`` (``(task, state)``; a task hears ``pre_commit``), record "committed"."""
        self.store.set("checkpoint", {"txid": c, "phase": "prepared", "states": names})
        crash_point("checkpoint.prepared", txid=c)
        try:
            for task, kv in states:
                if task is not None:
                    task.hook("pre_commit", c)
                kv.commit(c)
                crash_point("checkpoint.after_commit", txid=c, state=kv.namespace)
            self.store.set("checkpoint", {"txid": c, "phase": "committed", "states": names})
        except Exception as e:
            msg = (f"checkpoint {c} of {self.topology.topology_id!r} was prepared, but committing it failed: "
                   f"{type(e).__name__}: {e}. Run the topology again: the restart commits the prepared "
                   "checkpoint before anything else")
            raise TopologyFailedError(msg, txid=c, component="(checkpoint)", task=-1, cause=str(e)) from e
        self.last = self.clock()
        self.checkpoints += 1
        self.touched = False
        self._next_time()

    def rollback(self) -> set[int]:
        """Back to the last checkpoint: every state drops its pending and prepared changes
        (after ``pre_rollback``); returns the roots whose held acks are void."""
        for t in self._states():
            t.hook("pre_rollback")
            t.key_value_state().rollback()
        roots = {r for acks in self.held for r in acks}
        self.held, self.touched = [], False
        self._next_time()
        return roots

    # -- stateful bolts on executors (commit_placement="executors") ---------------------------
    def _names(self) -> list[str]:
        return sorted(self.namespace(c, t) for c in self.stateful for t in range(self.topology.component(c).parallelism))

    def on_executors(self) -> ExecutorKeyValueStates:
        """Checkpoint ``c`` for one micro-batch whose stateful tasks run on executors: each
        opens its state there (fenced by this driver's epoch), runs, and prepares ``c`` when
        it ends; ``commit_prepared`` then commits them all, ``rollback_prepared`` undoes
        them. Recorded "preparing" first, as a checkpoint on the driver is."""
        c = self.next_id
        self.next_id += 1
        self.store.set("checkpoint", {"txid": c, "phase": "preparing", "states": self._names()})
        crash_point("checkpoint.preparing", txid=c)
        return ExecutorKeyValueStates(self.url, self.options, self.topology.topology_id, self.epoch, c,
                                      self.time_ms, self.ttls)

    def commit_prepared(self, states: ExecutorKeyValueStates) -> None:
        """Every stateful task prepared ``states.txid`` (the commit job succeeded): steps 4-6
        of a checkpoint, each state opened here finding its prepared changes."""
        names = self._names()
        self._commit_recorded(states.txid, names, ((None, self._open(ns)) for ns in names))

    def rollback_prepared(self, states: ExecutorKeyValueStates) -> None:
        """The commit job failed: what its tasks prepared is dropped."""
        for ns in self._names():
            self._open(ns).rollback()
        self.store.set("checkpoint", {"txid": states.txid, "phase": "rolled back", "states": self._names()})
        self._next_time()

    def items(self, component: str) -> dict[Any, Any]:
        """Every key and value of ``component``'s states as its tasks left them."""
        out: dict[Any, Any] = {}
        for t in range(self.topology.component(component).parallelism):
            out.update(self.key_value_task(component, t).key_value_state().items())
        return out


@dataclass(frozen=True)
class ExecutorKeyValueStates:
    """What stateful tasks on executors need, shipped with the commit job: the state URL
    and options, the topology (fence scope), the driver's epoch, and the checkpoint id this
    micro-batch's tasks prepare. ``for_task`` gives a task its view."""

    url: str
    options: dict[str, Any]
    topology_id: str
    epoch: int | None
    txid: int
    time_ms: int | None = None               # the checkpoint's time (states with a TTL)
    ttls: dict[str, Ttl | None] = field(default_factory=dict)

    def for_task(self, component: str, task: int) -> ExecutorTaskStates:
        """A commit-phase task's door to state on an executor: its ``KeyValueState``."""
        return ExecutorTaskStates(component, task, key_value=_ExecutorTask(
            self, f"{self.topology_id}:{component}:{task}", self.ttls.get(component)))


class _ExecutorTask:
    """The key-value part of a commit-phase task's door on an executor
    (``engine.task_states.KeyValueTask``): its state opened on first use; when the
    task ends well, ``pre_prepare`` and ``prepare_commit`` of the micro-batch's checkpoint.
    (``pre_commit`` and ``pre_rollback`` are not called here: the commit and a rollback
    happen on the driver, where the task's bolt instance is not.)"""

    def __init__(self, spec: ExecutorKeyValueStates, namespace: str, ttl: Ttl | None = None) -> None:
        self.spec, self.namespace, self.ttl = spec, namespace, ttl
        self.state: KeyValueState | None = None
        self.owner: Any = None

    def key_value_state(self, owner: Any = None) -> KeyValueState:
        if owner is not None:
            self.owner = owner
        if self.state is None:
            s = self.spec
            self.state = open_key_value_state(s.url, self.namespace, fence_scope=s.topology_id, epoch=s.epoch,
                                              ttl=self.ttl, **s.options)
            self.state.at(s.time_ms)
        return self.state

    def finish(self) -> None:
        if self.state is not None:
            if self.owner is not None:
                self.owner.pre_prepare(self.spec.txid)
            self.state.prepare_commit(self.spec.txid)

    def abort(self) -> None:
        """The task failed: the driver rolls every state of the micro-batch back."""
