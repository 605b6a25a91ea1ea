"""The windows of core windowed bolts (``transactional.windowing``), kept on the driver.

A windowed bolt runs in the commit phase on the driver, one ``WindowTask`` per task
living across micro-batches in the ``WindowKeeper``; each micro-batch the bolt's adapter
(``Windowed``) adds the task's tuples to it and ends it:

* **Timestamps**: event time (the bolt's field or extractor), else the driver's clock
  in milliseconds when the micro-batch is committed.
* **Triggers**: a ``Count(s)`` sliding interval fires after every ``s`` tuples (as they
  are added); a ``Duration(i)`` one fires each window ``[end - length, end)`` whose end, a
  multiple of ``i``, the reference time has reached: the watermark (event time) or the
  driver's clock, at the end of the micro-batch. Empty windows do not fire.
* **Watermark**: at the end of a micro-batch (at most every ``with_watermark_interval``),
  the least over input partitions (source, stream, task) of the greatest timestamp seen,
  minus the lag. A tuple whose timestamp is below the watermark when it arrives is late:
  emitted on the late-tuple stream anchored to it, or logged; then acked.
* **Eviction** after each fire: the tuples no later window can hold leave and are acked
  (they are the next window's ``get_expired()``). ``FailedException`` from ``execute``
  fails every tuple of the window instead, and they leave it (their spouts replay them).
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
  it has committed the window. A restart loads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from transactional.engine.core.task import CoreTuple
from transactional.engine.sessions import is_late, split_sessions
from transactional.engine.task_states import DriverTaskStates
from transactional.exceptions import ConfigError, FailedException
from transactional.ticks import is_tick
from transactional.topology import Topology
from transactional.tuples import Fields
from transactional.windowing import WINDOWED_KINDS, Count, Duration, WindowConfig

log = logging.getLogger("trident")

META = "__window__"


class _Event:
    __slots__ = ("seq", "tuple", "ts", "chunk")

    def __init__(self, seq: int, tuple: CoreTuple, ts: int, chunk: int) -> None:
        self.seq, self.tuple, self.ts, self.chunk = seq, tuple, ts, chunk


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


def _size(x: Count | Duration) -> int:
    return x.value if isinstance(x, Count) else x.ms


class WindowTask:
    """One task's windows (module docstring). ``begin`` / ``add`` / ``end`` per micro-batch."""

    def __init__(self, topology: Topology, component: str, task: int, config: WindowConfig,
                 clock: Callable[[], float]) -> None:
        self.topology, self.component, self.task = topology, component, task
        self.config = config
        self.clock = clock
        assert config.length is not None and config.sliding is not None
        self.count_length = isinstance(config.length, Count)
        self.length = _size(config.length)
        self.count_trigger = isinstance(config.sliding, Count)
        self.slide = _size(config.sliding)
        self.lag = config.lag.ms if config.lag is not None else 0
        self.events: list[_Event] = []
        self.next_seq = 1
        self.count_since = 0
        self.next_end: int | None = None
        self.watermark: int | None = None
        self.watermark_at: float | None = None
        self.maxts: dict[tuple[str, str, int], int] = {}
        self.last_fired = 0                  # the highest seq in the last window fired
        self.expired: list[CoreTuple] = []   # left since the last fire
        self.fired = 0
        self.late = 0
        self.kv: Any = None
        self.loaded = False
        self.dirty_chunks: set[int] = set()
        self.router: Any = None
        self.bolt: Any = None
        self.now_ms = 0
        self.batch_chunk = 0
        self.final = False                   # this micro-batch ends the input: fire what is pending

    # -- a micro-batch -------------------------------------------------------------------------
    def begin(self, router: Any, bolt: Any, kv: Any = None) -> None:
        """Start a micro-batch: ``router`` is the task's collector, ``kv`` its state when the
        window is persistent (loaded on first use)."""
        self.router, self.bolt = router, bolt
        self.now_ms = int(self.clock() * 1000)
        if self.config.persistent and not self.loaded:
            self.kv = kv
            self._load()
        self.batch_chunk = self.next_seq
        for i, e in enumerate(self.events):      # keys unique within this micro-batch's input
            e.tuple.key = -1 - i

    def add(self, t: CoreTuple) -> None:
        """One input tuple: late, or into the window (a count trigger may fire)."""
        if is_tick(t):
            return
        cfg = self.config
        if cfg.event_time:
            ts = int(t[cfg.timestamp_field] if cfg.timestamp_field is not None
                     else cfg.timestamp_extractor(t))                 # type: ignore[misc]
            if is_late(ts, self.length, self.watermark) if cfg.session else \
                    (self.watermark is not None and ts < self.watermark):
                self._late(t, ts)
                return
            k = (t.source_component, t.source_stream, t.source_task)
            if ts > self.maxts.get(k, ts - 1):
                self.maxts[k] = ts
        else:
            ts = self.now_ms
        e = _Event(self.next_seq, t, ts, self.batch_chunk)
        self.next_seq += 1
        self.events.append(e)
        if cfg.persistent:
            self.dirty_chunks.add(e.chunk)
            self.router.ack(t)                   # held by the checkpoint that stores it
            t.message_id = None
        if self.count_trigger:
            self.count_since += 1
            if self.count_since >= self.slide:
                self.count_since = 0
                self._fire_count(ts)

    def end(self, watermark: int | None = None) -> None:
        """End of the micro-batch: the watermark, the time triggers, ids folded, the
        persistent window written. ``watermark``: event time advanced by hand (a test
        driver's), used instead of the one the timestamps give when it is higher."""
        now_s = self.clock()
        self.now_ms = int(now_s * 1000)
        cfg = self.config
        if cfg.event_time:
            self._advance_watermark(now_s, watermark)
        if cfg.session:
            if self.watermark is not None:
                self._fire_sessions(self.watermark)
        elif not self.count_trigger:
            ref = self.watermark if cfg.event_time else self.now_ms
            if ref is not None:
                self._fire_time(ref)
        if self.final and not cfg.persistent and self.events:
            self._flush()
        report = self.router.ids.report
        for e in self.events:
            m = e.tuple.message_id
            if m:
                e.tuple.message_id = report(e.tuple.key, m)
        if cfg.persistent:
            self._save()

    def _advance_watermark(self, now_s: float, by_hand: int | None) -> None:
        """The least greatest timestamp over the input partitions minus the lag (at most
        every watermark interval), or ``by_hand`` when higher; it never goes back."""
        wm = by_hand
        iv = self.config.watermark_interval
        if self.maxts and (iv is None or self.watermark_at is None or now_s - self.watermark_at >= iv.ms / 1000):
            seen = min(self.maxts.values()) - self.lag
            wm = seen if wm is None else max(wm, seen)
            self.watermark_at = now_s
        if wm is not None and (self.watermark is None or wm > self.watermark):
            self.watermark = wm

    def due_ms(self) -> int | None:
        """When a processing-time window next fires (driver's clock, ms), if it holds tuples."""
        if self.config.event_time or self.count_trigger or not self.events:
            return None
        if self.next_end is None:
            return (min(e.ts for e in self.events) // self.slide + 1) * self.slide
        return self.next_end

    # -- firing and eviction ------------------------------------------------------------------
    def _flush(self) -> None:
        """The input ended (``WindowKeeper.final``): every window still pending fires, as
        Flink's do at the end of a bounded input, and every tuple leaves (acked)."""
        last = max(e.ts for e in self.events)
        if self.config.session:
            self._fire_sessions(last + self.length)
        elif self.count_trigger:
            if self.count_since:
                self.count_since = 0
                self._fire_count(last)
        else:
            step = self.slide
            self._fire_time((last // step + 1) * step if self.count_length else last + self.length)
        self._evict(list(self.events))

    def _fire_sessions(self, ref: int) -> None:
        """Every session (``transactional.engine.sessions``) whose end the watermark
        reached fires, its tuples in arrival order, and its tuples leave."""
        field = self.config.session_key
        key = (lambda e: e.tuple[field]) if field is not None else (lambda e: None)
        for s in split_sessions(self.events, lambda e: e.ts, key, self.length):
            if s.end <= ref:
                self.expired = []                    # a session has no expired tuples
                self._execute(s.members, s.start, s.end, s.key)
                self._evict(s.members)
        self.expired = []

    def _fire_count(self, ref: int) -> None:
        """A count trigger, as Storm's ``WindowManager.onTrigger``: first evict what the
        window no longer holds (beyond the last ``length`` tuples, or older than ``ref -
        length``), then the window is every tuple left."""
        if self.count_length:
            self._evict(self.events[:max(len(self.events) - self.length, 0)])
            start = None
        else:
            start = ref - self.length + 1
            self._evict([e for e in self.events if e.ts < start])
        window = [e for e in self.events if e.ts <= ref] if start is not None else list(self.events)
        if window:
            self._execute(window, start, ref)

    def _fire_time(self, ref: int) -> None:
        step = self.slide
        while self.events:
            first = (min(e.ts for e in self.events) // step + 1) * step
            if self.next_end is None or self.next_end < first:
                if self.next_end is not None and self.next_end <= ref:
                    self.expired = []                # an empty window fired: Storm drops its expired
                self.next_end = first                # the windows before hold nothing
            end = self.next_end
            if end > ref:
                break
            if self.count_length:
                before = [e for e in self.events if e.ts < end]
                window, start = before[-self.length:], None
                gone = before[:-self.length] if len(before) > self.length else []
            else:
                start = end - self.length
                window = [e for e in self.events if start <= e.ts < end]
                gone = [e for e in self.events if e.ts < end + step - self.length]
            if window:
                self._execute(window, start, end)
            else:
                self.expired = []                    # as Storm's onTrigger of an empty window
            self._evict(gone)
            self.next_end = end + step

    def _execute(self, window: list[_Event], start: int | None, end: int, key: Any = None) -> None:
        tuples = [e.tuple for e in window]
        new = [e.tuple for e in window if e.seq > self.last_fired]
        w = Window(tuples, new, self.expired, start, end, key)
        try:
            self.bolt.execute(w)
        except FailedException as e:
            log.warning("windowed bolt %r task %d failed a window of %d tuple(s) (%s): they leave it and are "
                        "replayed by their spouts", self.component, self.task, len(tuples), e)
            for t in tuples:
                self.router.fail(t)
            ids = {id(x) for x in window}
            for x in window:
                self.dirty_chunks.add(x.chunk)
            self.events = [x for x in self.events if id(x) not in ids]
        self.fired += 1
        self.last_fired = max(self.last_fired, max(e.seq for e in window))
        self.expired = []

    def _evict(self, gone: Iterable[_Event]) -> None:
        ids = {id(e) for e in gone}
        if not ids:
            return
        keep = []
        for e in self.events:
            if id(e) in ids:
                if not self.config.persistent:
                    self.router.ack(e.tuple)
                self.dirty_chunks.add(e.chunk)
                self.expired.append(e.tuple)
            else:
                keep.append(e)
        self.events = keep

    def _late(self, t: CoreTuple, ts: int) -> None:
        self.late += 1
        stream = self.config.late_stream
        if stream is not None:
            self.router.emit((t.values,), anchors=t, stream=stream)
        else:
            log.warning("windowed bolt %r task %d: late tuple (timestamp %d below the watermark %s) dropped: %r; "
                        "set with_late_tuple_stream to receive late tuples", self.component, self.task, ts,
                        self.watermark, t.values)
        self.router.ack(t)

    # -- rollback and persistence ---------------------------------------------------------------
    def snapshot(self) -> tuple[Any, ...]:
        """What ``restore`` needs to undo one micro-batch."""
        return ([(e, e.tuple.message_id) for e in self.events], self.next_seq, self.count_since, self.next_end,
                self.watermark, self.watermark_at, dict(self.maxts), self.last_fired, list(self.expired),
                self.fired, self.late)

    def restore(self, snap: tuple[Any, ...]) -> None:
        events, self.next_seq, self.count_since, self.next_end, self.watermark, self.watermark_at, maxts, \
            self.last_fired, self.expired, self.fired, self.late = snap
        self.maxts = maxts
        for e, m in events:
            e.tuple.message_id = m
        self.events = [e for e, _ in events]
        self.dirty_chunks = set()

    def reload(self) -> None:
        """The state was rolled back: load the window from it again on next use."""
        self.loaded = False
        self.events, self.expired, self.dirty_chunks = [], [], set()

    def _load(self) -> None:
        self.loaded = True
        meta = self.kv.get(META)
        self.events = []
        if meta is None:
            return
        self.next_seq, self.count_since, self.next_end = meta["seq"], meta["count_since"], meta["next_end"]
        self.watermark, self.last_fired = meta["watermark"], meta["last_fired"]
        self.maxts = {(s, st, t): v for s, st, t, v in meta["maxts"]}
        fields: dict[tuple[str, str], Fields] = {}
        for chunk in meta["chunks"]:
            for seq, values, ts, src, stream, task in self.kv.get(f"{META}:{chunk}", []):
                f = fields.get((src, stream))
                if f is None:
                    f = fields[(src, stream)] = self.topology.component(src).streams[stream].fields
                self.events.append(_Event(seq, CoreTuple(tuple(values), f, src, stream, task, None, -1), ts, chunk))
        self.events.sort(key=lambda e: e.seq)
        log.info("windowed bolt %r task %d resumed %d tuple(s) in its windows from its state", self.component,
                 self.task, len(self.events))

    def _save(self) -> None:
        by_chunk: dict[int, list[Any]] = {}
        for e in self.events:
            by_chunk.setdefault(e.chunk, []).append(e)
        for c in self.dirty_chunks:
            rows = by_chunk.get(c)
            if rows:
                self.kv.put(f"{META}:{c}", [[e.seq, list(e.tuple.values), e.ts, e.tuple.source_component,
                                             e.tuple.source_stream, e.tuple.source_task] for e in rows])
            else:
                self.kv.delete(f"{META}:{c}")
        self.dirty_chunks = set()
        self.kv.put(META, {"seq": self.next_seq, "count_since": self.count_since, "next_end": self.next_end,
                           "watermark": self.watermark, "last_fired": self.last_fired,
                           "maxts": [[*k, v] for k, v in sorted(self.maxts.items())], "chunks": sorted(by_chunk)})


class WindowKeeper:
    """Every windowed task's ``WindowTask`` for a run, with a per-micro-batch undo."""

    def __init__(self, topology: Topology, clock: Callable[[], float]) -> None:
        self.topology = topology
        self.clock = clock
        self.tasks: dict[tuple[str, int], WindowTask] = {}
        self.snaps: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.configs = {c.id: c.new_instance().window_config for c in topology.bolts if c.core in WINDOWED_KINDS}
        #: the micro-batch being run ends a finite input: pending windows fire (``WindowTask._flush``)
        self.final = False

    def task(self, component: str, task: int) -> WindowTask:
        key = (component, task)
        t = self.tasks.get(key)
        if t is None:
            t = self.tasks[key] = WindowTask(self.topology, component, task, self.configs[component], self.clock)
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
