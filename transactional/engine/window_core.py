"""The window core: one machine for core windowed bolts and Trident windows (docs/windows.md),
as Storm's Trident windows reuse core's ``WindowManager``.

Both APIs configure it with one ``transactional.windowing.WindowConfig``; each adapts it:
core windowed bolts in ``transactional.engine.core.window_keeper`` (a machine per task, kept
on the driver across micro-batches, its tuples acked as they leave) and Trident windows in
``trident.runtime.window_proc`` (a machine rebuilt from the window record each txid and
stored back in the txid's atomic write). A ``WindowMachine`` holds ``Event`` s in arrival
order and does, the same for both:

* **Watermark** (``Watermark``): the least, over input partitions, of the greatest event
  time each sent, minus the lag. The adapter says when it moves (core: at the end of a
  micro-batch, never back; Trident: as the txids before left it).
* **Late tuples**: a tuple below the watermark (a session: whose own session would already
  have fired, ``ts + gap <= watermark``) is refused: ``add`` returns None, the adapter routes it.
* **Triggers**: a count trigger fires every ``s`` tuples as they are added; a time trigger
  fires each window ``[end - length, end)`` whose end (a multiple of the sliding interval)
  the reference time reached (the watermark, or processing time); a session trigger fires
  each session whose end the watermark reached. ``flush`` fires what is pending at the end
  of a finite input.
* **Eviction**: the tuples no later window can hold leave (``WindowHooks.evicted``) and are
  the next window's expired tuples.
* **Sessions**: a session of a key is a run of its tuples, in event time, where each tuple
  is less than ``gap`` after the one before: ``[first ts, last ts + gap)``. Sessions are not
  kept as such: they are derived, each time, from the tuples held, so a late tuple that
  falls between two sessions of its key (within ``gap`` of both) merges them, as Flink's
  merging windows do.

**A new window trigger goes here, in one place**: a subclass of ``Trigger`` (override what
it changes: lateness, on each tuple, on the reference time, at the end of the input, when
due, what a store keeps) and a line in ``trigger_for``; both APIs then have it (a new
``WindowConfig`` field says when).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from transactional.windowing import Count, Duration, WindowConfig

T = TypeVar("T")

__all__ = ["Session", "split_sessions", "is_late", "Event", "Watermark", "watermark", "WindowHooks",
           "WindowMachine", "Trigger", "trigger_for"]


@dataclass(frozen=True)
class Session(Generic[T]):
    """One session: its key, ``[start, end)`` and its members, in the order given."""

    key: Any
    start: int
    end: int
    members: list[T]


def split_sessions(items: Iterable[T], ts: Callable[[T], int], key: Callable[[T], Any], gap: int) -> list[Session[T]]:
    """The sessions of ``items`` (module docstring), by key in order of first appearance,
    each key's in time order; members keep the order of ``items``.

    >>> s = split_sessions([("a", 0), ("a", 5), ("b", 1), ("a", 30)], lambda x: x[1], lambda x: x[0], 10)
    >>> [(x.key, x.start, x.end, [m[1] for m in x.members]) for x in s]
    [('a', 0, 15, [0, 5]), ('a', 30, 40, [30]), ('b', 1, 11, [1])]
    """
    by_key: dict[Any, list[tuple[int, int, T]]] = {}
    for i, x in enumerate(items):
        by_key.setdefault(key(x), []).append((ts(x), i, x))
    out: list[Session[T]] = []
    for k, rows in by_key.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        run: list[tuple[int, int, T]] = []
        for r in rows:
            if run and r[0] - run[-1][0] >= gap:
                out.append(_session(k, run, gap))
                run = []
            run.append(r)
        if run:
            out.append(_session(k, run, gap))
    return out


def _session(key: Any, run: list[tuple[int, int, T]], gap: int) -> Session[T]:
    members = [x for _, _, x in sorted(run, key=lambda r: r[1])]
    return Session(key, run[0][0], run[-1][0] + gap, members)


def is_late(ts: int, gap: int, watermark: int | None) -> bool:
    """A tuple whose own session would already have fired."""
    return watermark is not None and ts + gap <= watermark


# -- the machine's parts ------------------------------------------------------------------------

class Event:
    """A tuple held in a window: its number (arrival order), time, the adapter's ``item``
    (core: the tuple; Trident: its values), session ``key``, the adapter's ``chunk``
    (core: the persisted part it belongs to) and ``mark``: None, or the end of the first
    time window that may still count it -- every window ending before it was already
    evaluated for it, on the task it came from (a move of windows to another task count
    sets it, ``transactional.engine.core.window_moves``)."""

    __slots__ = ("seq", "ts", "item", "key", "chunk", "mark")

    def __init__(self, seq: int, ts: int, item: Any, key: Any = None, chunk: int = 0,
                 mark: int | None = None) -> None:
        self.seq, self.ts, self.item, self.key, self.chunk = seq, ts, item, key, chunk
        self.mark = mark


def watermark(maxima: dict[Any, int], lag: int, floor: int | None = None) -> int | None:
    """The least, over the partitions seen, of the greatest event time each sent, minus
    ``lag``, at least ``floor`` (a watermark set by hand, e.g. by a test driver); None
    before any tuple (and without a floor)."""
    wm = min(maxima.values()) - lag if maxima else None
    return wm if floor is None or (wm is not None and wm >= floor) else floor


class Watermark:
    """The event-time watermark over input partitions: ``maxima`` (partition -> greatest
    time seen), ``value`` the watermark in force (lateness and time triggers read it)."""

    __slots__ = ("lag", "maxima", "value", "at")

    def __init__(self, lag: int, maxima: dict[Any, int] | None = None) -> None:
        self.lag = lag
        self.maxima: dict[Any, int] = {} if maxima is None else maxima
        self.value: int | None = None
        self.at: float | None = None            # when (seconds) ``advance`` last took the maxima

    def observe(self, part: Any, ts: int) -> None:
        """A tuple at ``ts`` from ``part``."""
        if ts > self.maxima.get(part, ts - 1):
            self.maxima[part] = ts

    def seen(self, floor: int | None = None) -> int | None:
        """What the maxima give, at least ``floor`` (``watermark``)."""
        return watermark(self.maxima, self.lag, floor)

    def advance(self, now_s: float, interval_ms: int | None, by_hand: int | None = None) -> None:
        """``value`` moves to what the maxima give (at most every ``interval_ms``), or to
        ``by_hand`` when higher; it never goes back."""
        wm = by_hand
        if self.maxima and (interval_ms is None or self.at is None or now_s - self.at >= interval_ms / 1000):
            wm = self.seen(by_hand)
            self.at = now_s
        if wm is not None and (self.value is None or wm > self.value):
            self.value = wm


class WindowHooks(Protocol):
    """What an adapter does when the machine acts (called synchronously, in order)."""

    def held(self, event: Event) -> None:
        """``event`` entered the window (before any trigger it causes)."""

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        """A window fires: ``window`` its events in arrival order, ``[start, end)`` its bounds
        (``start`` None for a count window), ``key`` its session's key. The machine's
        ``expired`` and ``last_fired`` are as before this window. True: the window failed
        (its events leave the window without being evicted)."""
        ...

    def evicted(self, events: list[Event]) -> None:
        """``events`` left the window (no later window can hold them), in arrival order."""


def _size(x: Count | Duration) -> int:
    return x.value if isinstance(x, Count) else x.ms


class WindowMachine:
    """One task's windows (module docstring): ``add`` each tuple, ``reach`` the reference
    time, ``flush`` at the end of the input."""

    def __init__(self, config: WindowConfig, hooks: WindowHooks) -> None:
        assert config.length is not None and config.sliding is not None
        self.config, self.hooks = config, hooks
        self.event_time = config.event_time
        self.count_length = isinstance(config.length, Count)
        self.length = _size(config.length)
        self.slide = _size(config.sliding)
        self.trigger = trigger_for(config)
        self.wm = Watermark(config.lag.ms if config.lag is not None else 0)
        self.events: list[Event] = []
        self.next_seq = 1
        self.count_since = 0                 # tuples since the last count trigger
        self.next_end: int | None = None     # the end of the next time window
        self.last_fired = 0                  # the highest seq in the last window fired
        self.expired: list[Event] = []       # left since the last fire
        self.fired = 0
        self.late = 0

    def add(self, item: Any, ts: int, part: Any = None, key: Any = None, chunk: int = 0) -> Event | None:
        """A tuple at ``ts`` (event time from partition ``part``, or processing time): None
        when it is late (counted; the adapter routes it), else its ``Event``, held (a count
        trigger may fire)."""
        if self.event_time:
            if self.trigger.is_late(self, ts):
                self.late += 1
                return None
            self.wm.observe(part, ts)
        e = Event(self.next_seq, ts, item, key, chunk)
        self.next_seq += 1
        self.events.append(e)
        self.hooks.held(e)
        self.trigger.added(self, e)
        return e

    def reach(self, ref: int) -> None:
        """The reference time (the watermark, or processing time) is ``ref``: fire what is due."""
        self.trigger.reached(self, ref)

    def flush(self) -> None:
        """The input ended: every window still pending fires, as Flink's do at the end of a
        bounded input, and every tuple leaves."""
        if self.events:
            self.trigger.flush(self, max(e.ts for e in self.events))
            self.evict(list(self.events))

    def catch_up(self) -> None:
        """Fire the windows a trigger owes (``Trigger.overdue``): a move of windows to
        another task count may give a task more pending tuples than one trigger takes."""
        self.trigger.overdue(self)

    def due_ms(self) -> int | None:
        """When a processing-time window next fires (ms), if one holds tuples."""
        return None if self.event_time or not self.events else self.trigger.due(self)

    def retained(self) -> list[Event]:
        """The events some later window can hold (what a store must keep)."""
        return self.trigger.retained(self)

    # -- what triggers call ---------------------------------------------------------------------
    def fire(self, window: list[Event], start: int | None, end: int, key: Any = None) -> bool:
        """``window`` fires (``WindowHooks.fire``); a failed one's events leave it (True)."""
        failed = self.hooks.fire(window, start, end, key)
        if failed:
            ids = {id(x) for x in window}
            self.events = [x for x in self.events if id(x) not in ids]
        self.fired += 1
        self.last_fired = max(self.last_fired, max(e.seq for e in window))
        self.expired = []
        return failed

    def evict(self, gone: Iterable[Event]) -> None:
        """``gone`` leave the window: the next window's expired (``WindowHooks.evicted``)."""
        ids = {id(e) for e in gone}
        if not ids:
            return
        keep: list[Event] = []
        left: list[Event] = []
        for e in self.events:
            (left if id(e) in ids else keep).append(e)
        self.events = keep
        self.expired.extend(left)
        self.hooks.evicted(left)


# -- triggers: a new one goes here ---------------------------------------------------------------

class Trigger:
    """When windows fire and what they hold; stateless (the machine holds the state). The
    defaults: late below the watermark, nothing fires, every event may be in a later window."""

    def is_late(self, m: WindowMachine, ts: int) -> bool:
        """A tuple at ``ts`` no window can take any more (event time)."""
        return m.wm.value is not None and ts < m.wm.value

    def added(self, m: WindowMachine, e: Event) -> None:
        """``e`` was added."""

    def reached(self, m: WindowMachine, ref: int) -> None:
        """The reference time is ``ref``."""

    def flush(self, m: WindowMachine, last: int) -> None:
        """The input ended (``last``: the newest time held): fire every pending window."""

    def due(self, m: WindowMachine) -> int | None:
        """When (processing time, ms) the next window fires; None: not by time."""
        return None

    def overdue(self, m: WindowMachine) -> None:
        """Fire what is owed now (``WindowMachine.catch_up``); nothing by default."""

    def retained(self, m: WindowMachine) -> list[Event]:
        """The events a later window can hold."""
        return m.events


class CountTrigger(Trigger):
    """Every ``sliding`` tuples, as Storm's ``WindowManager.onTrigger``: first what the window
    no longer holds leaves (beyond the last ``length`` tuples, or older than ``ref -
    length``), then the window is every tuple left."""

    def added(self, m: WindowMachine, e: Event) -> None:
        m.count_since += 1
        if m.count_since >= m.slide:
            m.count_since = 0
            self._fire(m, e.ts)

    def overdue(self, m: WindowMachine) -> None:
        """``count_since`` at or above the sliding count (a move met several tasks' pending
        tuples): each trigger those tuples owe fires in order, as if they had arrived here."""
        while m.count_since >= m.slide and m.events:
            extra = m.count_since - m.slide
            cut = len(m.events) - extra
            tail, m.events = m.events[cut:], m.events[:cut]
            m.count_since = 0
            self._fire(m, m.events[-1].ts)
            m.events += tail
            m.count_since = extra

    def flush(self, m: WindowMachine, last: int) -> None:
        if m.count_since:                         # the tuples since the last trigger make a last window
            m.count_since = 0
            self._fire(m, last)

    def retained(self, m: WindowMachine) -> list[Event]:
        if not m.count_length:
            return m.events
        keep = m.length - m.slide + m.count_since  # the next trigger's window is the last ``length``
        return m.events[-keep:] if keep > 0 else []

    @staticmethod
    def _fire(m: WindowMachine, ref: int) -> None:
        if m.count_length:
            m.evict(m.events[:max(len(m.events) - m.length, 0)])
            start = None
            window = list(m.events)
        else:
            start = ref - m.length + 1
            m.evict([e for e in m.events if e.ts < start])
            window = [e for e in m.events if e.ts <= ref]
        if window:
            m.fire(window, start, ref)


class TimeTrigger(Trigger):
    """Each window ``[end - length, end)`` (a count length: the last ``length`` tuples
    before ``end``), ends at multiples of the sliding interval, once the reference time
    reaches its end; empty windows do not fire (and drop their expired, as Storm's). A
    duration window leaves out a tuple whose ``Event.mark`` is above its end (the task it
    came from evaluated it there already)."""

    def reached(self, m: WindowMachine, ref: int) -> None:
        step = m.slide
        while m.events:
            first = (min(e.ts for e in m.events) // step + 1) * step
            if m.next_end is None or m.next_end < first:
                if m.next_end is not None and m.next_end <= ref:
                    m.expired = []                   # an empty window fired: Storm drops its expired
                m.next_end = first                   # the windows before hold nothing
            end = m.next_end
            if end > ref:
                break
            if m.count_length:
                before = [e for e in m.events if e.ts < end]
                window, start = before[-m.length:], None
                gone = before[:-m.length] if len(before) > m.length else []
            else:
                start = end - m.length
                window = [e for e in m.events if start <= e.ts < end and (e.mark is None or e.mark <= end)]
                gone = [e for e in m.events if e.ts < end + step - m.length]
            if window:
                m.fire(window, start, end)
            else:
                m.expired = []                       # as Storm's onTrigger of an empty window
            m.evict(gone)
            m.next_end = end + step

    def flush(self, m: WindowMachine, last: int) -> None:
        step = m.slide
        self.reached(m, (last // step + 1) * step if m.count_length else last + m.length)

    def due(self, m: WindowMachine) -> int | None:
        if m.next_end is None:
            return (min(e.ts for e in m.events) // m.slide + 1) * m.slide
        return m.next_end


class SessionTrigger(Trigger):
    """Every session (``split_sessions``, gap ``length``) whose end the watermark reached
    fires, its tuples in arrival order, and its tuples leave (a session has no expired)."""

    def is_late(self, m: WindowMachine, ts: int) -> bool:
        return is_late(ts, m.length, m.wm.value)

    def reached(self, m: WindowMachine, ref: int) -> None:
        gone: set[int] = set()
        for s in split_sessions(m.events, _ts, _key, m.length):
            if s.end <= ref:
                m.expired = []
                if not m.fire(s.members, s.start, s.end, s.key):     # failed: its events left already
                    m.hooks.evicted(s.members)
                    gone.update(id(e) for e in s.members)
        if gone:                                                     # one pass for every session fired
            m.events = [e for e in m.events if id(e) not in gone]
        m.expired = []

    def flush(self, m: WindowMachine, last: int) -> None:
        self.reached(m, last + m.length)


def _ts(e: Event) -> int:
    return e.ts


def _key(e: Event) -> Any:
    return e.key


def trigger_for(config: WindowConfig) -> Trigger:
    """The trigger of a window: sessions, else by the sliding interval's kind."""
    if config.session:
        return SessionTrigger()
    if isinstance(config.sliding, Count):
        return CountTrigger()
    return TimeTrigger()
