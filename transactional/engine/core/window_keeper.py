"""The windows of core windowed bolts (``transactional.windowing``), kept on the driver:
the core's adapter of the window core (``transactional.engine.window_core``, which also
serves Trident's windows: watermark, triggers, eviction, late tuples, sessions).

A windowed bolt runs in the commit phase on the driver, one ``WindowTask`` (a
``WindowMachine`` and what core adds to it) per task living across micro-batches in the
``WindowKeeper``; each micro-batch the bolt's adapter (``Windowed``) adds the task's tuples
to it and ends it:

* **Timestamps**: event time (the bolt's field or extractor), else the driver's clock
  in milliseconds when the micro-batch is committed.
* **Triggers** (the window core's): count triggers fire as tuples are added; time and
  session triggers at the end of the micro-batch, when the reference time (the watermark,
  or the driver's clock) reached a window's end. Empty windows do not fire.
* **Watermark**: at the end of a micro-batch (at most every ``with_watermark_interval``),
  the least over input partitions (source, stream, task) of the greatest timestamp seen,
  minus the lag; it never goes back. A late tuple is emitted on the late-tuple stream
  anchored to it, or logged; then acked.
* **Eviction**: the tuples no later window can hold leave and are acked (they are the next
  window's ``get_expired()``). ``FailedException`` from ``execute`` fails every tuple of the
  window instead, and they leave it (their spouts replay them).
* **Anchoring across micro-batches**: a tuple's key in the task's input is new each
  micro-batch (held tuples are numbered below zero), and at the end of each one the ids
  of the tuples anchored to a held tuple are folded into its message id, so that acking
  it in a later micro-batch reports exactly what Storm's acker expects.
* **Failure** of a micro-batch: every window goes back to where it was before it
  (``WindowKeeper.rollback``); a persistent window reloads from its state, which the
  checkpointer rolled back.
* **Persistence** (``BaseStatefulWindowedBolt.with_persistence``): the window lives in the
  task's ``KeyValueState`` too: ``__window__`` holds the triggers' state, and
  ``__window__:<n>`` the tuples that arrived in one micro-batch (rewritten as they
  leave). Its tuples are acked when they are added; the checkpoint holds those acks until
  it has committed the window. A restart loads it. Each held tuple's *origin* (its spout
  tuples' spout and msg id, ``CoreSpoutPlanner.origin``, its values, ``#n``) is stored
  with it: a tuple arriving with the origin of one held (a spout's replay after a driver
  died between a checkpoint's commit and the release of its acks) is acked, not added.
  A rebalance moves the held tuples to the tasks their keys now reach
  (``transactional.engine.core.window_moves``); a moved tuple's ``mark`` (the first window
  end that may still count it) is stored with it, as an 8th field.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from transactional.engine.core.task import CoreTuple
from transactional.engine.core.window_moves import META
from transactional.engine.task_states import DriverTaskStates
from transactional.engine.window_core import Event, WindowMachine
from transactional.exceptions import ConfigError, FailedException
from transactional.ticks import is_tick
from transactional.topology import Topology
from transactional.tuples import Fields
from transactional.windowing import WINDOWED_KINDS, Count, Duration, WindowConfig

log = logging.getLogger("trident")

#: a tuple's message id (``{root: id}``) -> the identity of its spout tuples that a replay
#: carries too (``CoreSpoutPlanner.origin``), or None when it has none
Origin = Callable[[dict[int, int]], "str | None"]


class Window:
    """A ``TupleWindow`` (``transactional.windowing``)."""

    __slots__ = ("_all", "_new", "_expired", "_start", "_end", "_key")

    def __init__(self, all: list[Any], new: list[Any], expired: list[Any], start: int | None, end: int,
                 key: Any = None) -> None:
        self._all, self._new, self._expired, self._start, self._end = all, new, expired, start, end
        self._key = key

    def get(self) -> list[Any]:
        return self._all

    def get_new(self) -> list[Any]:
        return self._new

    def get_expired(self) -> list[Any]:
        return self._expired

    def get_start_timestamp(self) -> int | None:
        return self._start

    def get_end_timestamp(self) -> int:
        return self._end

    def get_key(self) -> Any:
        return self._key

    def __repr__(self) -> str:
        return f"Window({len(self._all)} tuples, start={self._start}, end={self._end})"


class WindowTask:
    """One task's windows: the window core's machine (``transactional.engine.window_core``)
    over the task's tuples (module docstring). ``begin`` / ``add`` / ``end`` per micro-batch."""

    def __init__(self, topology: Topology, component: str, task: int, config: WindowConfig,
                 clock: Callable[[], float], origin: Origin | None = None) -> None:
        self.topology, self.component, self.task = topology, component, task
        self.config = config
        self.clock = clock
        self.origin = origin                 # a tuple's roots -> the identity its replays carry
        self.origins: dict[int, str] = {}    # persistent: event seq -> its tuple's origin
        self.holding: set[str] = set()       # the origins of the tuples held
        self.arriving: str | None = None     # the origin of the tuple being added
        self.seen: dict[str, int] = {}       # origins (without the #n) arrived in this micro-batch
        self.machine = WindowMachine(config, self)
        self.kv: Any = None
        self.loaded = False
        self.dirty_chunks: set[int] = set()
        self.router: Any = None
        self.bolt: Any = None
        self.now_ms = 0
        self.batch_chunk = 0
        self.final = False                   # this micro-batch ends the input: fire what is pending

    @property
    def events(self) -> list[Event]:
        """The tuples held, in arrival order."""
        return self.machine.events

    @property
    def fired(self) -> int:
        """Windows fired so far."""
        return self.machine.fired

    # -- a micro-batch -------------------------------------------------------------------------
    def begin(self, router: Any, bolt: Any, kv: Any = None) -> None:
        """Start a micro-batch: ``router`` is the task's collector, ``kv`` its state when the
        window is persistent (loaded on first use)."""
        self.router, self.bolt = router, bolt
        self.now_ms = int(self.clock() * 1000)
        if self.config.persistent and not self.loaded:
            self.kv = kv
            self._load()
        self.batch_chunk = self.machine.next_seq
        for i, e in enumerate(self.machine.events):      # keys unique within this micro-batch's input
            e.item.key = -1 - i
        if self.config.persistent:
            origins, self.seen = self.origins, {}
            self.holding = {o for e in self.machine.events if (o := origins.get(e.seq)) is not None}
            self.machine.catch_up()      # count windows a move left overdue (``window_moves``) fire first

    def add(self, t: CoreTuple) -> None:
        """One input tuple: late, or into the window (a count trigger may fire)."""
        if is_tick(t):
            return
        cfg = self.config
        if cfg.event_time:
            ts = int(t[cfg.timestamp_field] if cfg.timestamp_field is not None
                     else cfg.timestamp_extractor(t))                 # type: ignore[misc]
        else:
            ts = self.now_ms
        key = t[cfg.session_key] if cfg.session_key is not None else None
        if cfg.persistent and self.origin is not None and t.message_id:
            self.arriving = self._origin(t)
            if self.arriving is not None and self.arriving in self.holding:
                self._replayed(t)
                return
        if self.machine.add(t, ts, (t.source_component, t.source_stream, t.source_task), key,
                            self.batch_chunk) is None:
            self.arriving = None
            self._late(t, ts)

    def end(self, watermark: int | None = None) -> None:
        """End of the micro-batch: the watermark, the time triggers, ids folded, the
        persistent window written. ``watermark``: event time advanced by hand (a test
        driver's), used instead of the one the timestamps give when it is higher."""
        now_s = self.clock()
        self.now_ms = int(now_s * 1000)
        cfg, m = self.config, self.machine
        if cfg.event_time:
            iv = cfg.watermark_interval
            m.wm.advance(now_s, None if iv is None else iv.ms, watermark)
        ref = m.wm.value if cfg.event_time else self.now_ms
        if ref is not None:
            m.reach(ref)
        if self.final and not cfg.persistent:
            m.flush()
        report = self.router.ids.report
        for e in m.events:
            msg = e.item.message_id
            if msg:
                e.item.message_id = report(e.item.key, msg)
        if cfg.persistent:
            self._save()

    def due_ms(self) -> int | None:
        """When a processing-time window next fires (driver's clock, ms), if it holds tuples."""
        return self.machine.due_ms()

    # -- the machine's hooks ---------------------------------------------------------------------
    def held(self, e: Event) -> None:
        """A persistent window's tuple is acked as it is held: the checkpoint that stores it
        holds the ack."""
        if self.config.persistent:
            self.dirty_chunks.add(e.chunk)
            if self.arriving is not None:
                self.origins[e.seq] = self.arriving
                self.holding.add(self.arriving)
                self.arriving = None
            else:
                self.origins.pop(e.seq, None)
            self.router.ack(e.item)
            e.item.message_id = None

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        """``execute`` the bolt on the window; ``FailedException`` fails its tuples."""
        m = self.machine
        tuples = [e.item for e in window]
        new = [e.item for e in window if e.seq > m.last_fired]
        try:
            self.bolt.execute(Window(tuples, new, [e.item for e in m.expired], start, end, key))
        except FailedException as ex:
            log.warning("windowed bolt %r task %d failed a window of %d tuple(s) (%s): they leave it and are "
                        "replayed by their spouts", self.component, self.task, len(tuples), ex)
            for t in tuples:
                self.router.fail(t)
            for x in window:
                self.dirty_chunks.add(x.chunk)
            return True
        return False

    def evicted(self, events: list[Event]) -> None:
        """Tuples left the window: acked (a persistent window's were, when held)."""
        for e in events:
            if not self.config.persistent:
                self.router.ack(e.item)
            self.dirty_chunks.add(e.chunk)

    def _origin(self, t: CoreTuple) -> str | None:
        """``t``'s origin: its spout tuples' (``origin``), its values (a spout may number its
        ids afresh in a new run) and ``#n``, the how-many-th such tuple of the micro-batch (a
        bolt may emit equal tuples from one spout tuple; its replay does again, in the same
        micro-batch)."""
        assert self.origin is not None and t.message_id
        o = self.origin(t.message_id)
        if o is None:
            return None
        o = f"{o}={t.values!r}"
        n = self.seen[o] = self.seen.get(o, -1) + 1
        return f"{o}#{n}"

    def _replayed(self, t: CoreTuple) -> None:
        """A persistent window already holds ``t`` (its spout replayed it: a driver died
        after the checkpoint that stores it committed, before its held acks reached the
        spout): acked, not added again."""
        log.info("windowed bolt %r task %d: a replayed tuple its persistent window already holds is acked, not "
                 "added again: %r", self.component, self.task, t.values)
        self.arriving = None
        self.router.ack(t)

    def _late(self, t: CoreTuple, ts: int) -> None:
        stream = self.config.late_stream
        if stream is not None:
            self.router.emit((t.values,), anchors=t, stream=stream)
        else:
            log.warning("windowed bolt %r task %d: late tuple (timestamp %d below the watermark %s) dropped: %r; "
                        "set with_late_tuple_stream to receive late tuples", self.component, self.task, ts,
                        self.machine.wm.value, t.values)
        self.router.ack(t)

    # -- rollback and persistence ---------------------------------------------------------------
    def snapshot(self) -> tuple[Any, ...]:
        """What ``restore`` needs to undo one micro-batch."""
        m = self.machine
        return ([(e, e.item.message_id) for e in m.events], m.next_seq, m.count_since, m.next_end,
                m.wm.value, m.wm.at, dict(m.wm.maxima), m.last_fired, list(m.expired), m.fired, m.late)

    def restore(self, snap: tuple[Any, ...]) -> None:
        m = self.machine
        events, m.next_seq, m.count_since, m.next_end, m.wm.value, m.wm.at, m.wm.maxima, \
            m.last_fired, m.expired, m.fired, m.late = snap
        for e, msg in events:
            e.item.message_id = msg
        m.events = [e for e, _ in events]
        self.dirty_chunks = set()

    def reload(self) -> None:
        """The state was rolled back: load the window from it again on next use."""
        self.loaded = False
        self.machine.events, self.machine.expired, self.dirty_chunks = [], [], set()

    def _load(self) -> None:
        self.loaded = True
        m = self.machine
        meta = self.kv.get(META)
        m.events = []
        if meta is None:
            return
        m.next_seq, m.count_since, m.next_end = meta["seq"], meta["count_since"], meta["next_end"]
        m.wm.value, m.last_fired = meta["watermark"], meta["last_fired"]
        m.wm.maxima = {(s, st, t): v for s, st, t, v in meta["maxts"]}
        field = self.config.session_key
        fields: dict[tuple[str, str], Fields] = {}
        self.origins = {}
        for chunk in meta["chunks"]:
            for seq, values, ts, src, stream, task, *rest in self.kv.get(f"{META}:{chunk}", []):
                if rest and rest[0] is not None:
                    self.origins[seq] = rest[0]
                f = fields.get((src, stream))
                if f is None:
                    f = fields[(src, stream)] = self.topology.component(src).streams[stream].fields
                t = CoreTuple(tuple(values), f, src, stream, task, None, -1)
                m.events.append(Event(seq, ts, t, t[field] if field is not None else None, chunk,
                                      rest[1] if len(rest) > 1 else None))
        m.events.sort(key=lambda e: e.seq)
        log.info("windowed bolt %r task %d resumed %d tuple(s) in its windows from its state", self.component,
                 self.task, len(m.events))

    def _save(self) -> None:
        m = self.machine
        by_chunk: dict[int, list[Event]] = {}
        for e in m.events:
            by_chunk.setdefault(e.chunk, []).append(e)
        origins = self.origins
        if len(origins) > len(m.events):     # drop the origins of tuples that left
            self.origins = origins = {e.seq: o for e in m.events if (o := origins.get(e.seq)) is not None}
        for c in self.dirty_chunks:
            rows = by_chunk.get(c)
            if rows:
                self.kv.put(f"{META}:{c}", [[e.seq, list(e.item.values), e.ts, e.item.source_component,
                                             e.item.source_stream, e.item.source_task, origins.get(e.seq),
                                             *([] if e.mark is None else [e.mark])] for e in rows])
            else:
                self.kv.delete(f"{META}:{c}")
        self.dirty_chunks = set()
        self.kv.put(META, {"seq": m.next_seq, "count_since": m.count_since, "next_end": m.next_end,
                           "watermark": m.wm.value, "last_fired": m.last_fired,
                           "maxts": [[*k, v] for k, v in sorted(m.wm.maxima.items())], "chunks": sorted(by_chunk)})


class WindowKeeper:
    """Every windowed task's ``WindowTask`` for a run, with a per-micro-batch undo."""

    def __init__(self, topology: Topology, clock: Callable[[], float], origin: Origin | None = None) -> None:
        self.topology = topology
        self.clock = clock
        self.origin = origin
        self.tasks: dict[tuple[str, int], WindowTask] = {}
        self.snaps: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.configs = {c.id: c.new_instance().window_config for c in topology.bolts if c.core in WINDOWED_KINDS}
        #: the micro-batch being run ends a finite input: pending windows fire (``WindowTask._flush``)
        self.final = False

    def task(self, component: str, task: int) -> WindowTask:
        key = (component, task)
        t = self.tasks.get(key)
        if t is None:
            t = self.tasks[key] = WindowTask(self.topology, component, task, self.configs[component], self.clock,
                                                 self.origin)
        if key not in self.snaps:
            self.snaps[key] = t.snapshot()
        t.final = self.final
        return t

    def commit(self) -> None:
        """The micro-batch committed: drop its undo."""
        self.snaps = {}
        self.final = False

    def rollback(self, reload: bool = False) -> None:
        """The micro-batch failed: every window as before it (``reload``: persistent ones
        from their rolled-back states)."""
        for key, snap in self.snaps.items():
            self.tasks[key].restore(snap)
        self.snaps = {}
        self.final = False
        if reload:
            for t in self.tasks.values():
                if t.config.persistent:
                    t.reload()

    def flushable(self) -> bool:
        """Some window that is not persistent holds tuples: the end of the input fires it."""
        return any(t.events for t in self.tasks.values() if not t.config.persistent)

    def due(self) -> float | None:
        """When (driver's clock, seconds) a processing-time window next fires."""
        times = [d for d in (t.due_ms() for t in self.tasks.values()) if d is not None]
        return min(times) / 1000 if times else None

    def due_in(self) -> float | None:
        """In how many seconds a processing-time window next fires (<= 0: now)."""
        due = self.due()
        return None if due is None else due - self.clock()

    def fired(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (c, _), t in self.tasks.items():
            out[c] = out.get(c, 0) + t.fired
        return out


class CoreStates:
    """The commit phase's view of a core topology's task states: the checkpointer's
    ``KeyValueState`` per stateful task, and the windows."""

    def __init__(self, checkpointer: Any, windows: WindowKeeper) -> None:
        self.checkpointer, self.windows = checkpointer, windows

    def for_task(self, component: str, task: int) -> DriverTaskStates:
        """A commit-phase task's door to state on the driver: its windows, and its
        ``KeyValueState`` when it is a stateful bolt."""
        cp = self.checkpointer
        kv = cp.key_value_task(component, task) if cp is not None and component in cp.stateful else None
        return DriverTaskStates(component, task, key_value=kv, windows=self.windows)


class Windowed:
    """A windowed bolt on the batch path (``transactional.engine.core.task.adapter``)."""

    def __init__(self, bolt: Any) -> None:
        self.bolt = bolt

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any, id: Any) -> None:
        self.bolt.prepare(conf, context, collector)
        kv = None
        if hasattr(self.bolt, "init_state"):
            kv = context.key_value_state(owner=self.bolt)
            self.bolt.init_state(kv)
        self.window: WindowTask = context.window_state()
        self.window.begin(collector, self.bolt, kv)
        self.execute = self.window.add

    def finish_batch(self) -> None:
        self.window.end()
        self.bolt.cleanup()

    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(declarer)


def check_windows(topology: Topology, config: Any) -> None:
    """Refuse, before anything runs, windows that cannot work with this run's settings:
    a duration window (plus its sliding interval) not below ``message_timeout_secs`` --
    its tuples would time out while in it; a count window (plus its sliding interval)
    above ``max_spout_pending`` (Storm refuses both); and windows on executors."""
    for c in topology.bolts:
        if c.core not in WINDOWED_KINDS:
            continue
        w: WindowConfig = c.new_instance().window_config
        assert w.length is not None and w.sliding is not None
        durations = sum(x.ms for x in (w.length, w.sliding) if isinstance(x, Duration))
        if durations and durations >= config.message_timeout_secs * 1000:
            msg = (f"windowed bolt {c.id!r}: its window {w.length!r} sliding {w.sliding!r} spans {durations} ms, "
                   f"not less than message_timeout_secs={config.message_timeout_secs} (x1000); its tuples "
                   "would time out while in the window and be replayed. Raise message_timeout_secs above "
                   f"{durations / 1000:g} or shorten the window")
            raise ConfigError(msg)
        counts = sum(x.value for x in (w.length, w.sliding) if isinstance(x, Count))
        cap = config.max_spout_pending
        if counts and cap is not None and counts > cap:
            msg = (f"windowed bolt {c.id!r}: its window {w.length!r} sliding {w.sliding!r} needs {counts} tuples "
                   f"pending, more than max_spout_pending={cap}; the window would never fill. Raise "
                   f"max_spout_pending to at least {counts} or shorten the window")
            raise ConfigError(msg)
        if config.commit_placement != "driver":
            msg = (f"windowed bolt {c.id!r} keeps its windows on the driver; run with commit_placement='driver' "
                   "(the default)")
            raise ConfigError(msg)
