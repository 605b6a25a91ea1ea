"""Windows in core topologies: Storm's ``BaseWindowedBolt`` (docs/windows.md).

A windowed bolt sees its input as windows of tuples instead of one tuple at a time::

    class RollingCount(BaseWindowedBolt):
        def prepare(self, conf, context, collector):
            self.collector = collector
        def execute(self, window):                       # a TupleWindow
            counts = Counter(t["word"] for t in window.get())
            for word, n in counts.items():
                self.collector.emit((word, n, window.get_end_timestamp()))
        def declare_output_fields(self, declarer):
            declarer.declare(Fields("word", "count", "end"))

    bolt = RollingCount().with_window(Duration(60, "seconds"), Duration(10, "seconds")) \\
                         .with_timestamp_field("ts").with_lag(Duration(5, "seconds")) \\
                         .with_late_tuple_stream("late")
    builder.set_bolt("rolling", bolt, 2).fields_grouping("words", Fields("word"))

Lengths and sliding intervals are ``Count(n)`` (tuples) or ``Duration(value, unit)``
(milliseconds underneath); a window without a sliding interval slides by every tuple.
Without a timestamp field or extractor, durations are processing time: the driver's
clock when the tuple's micro-batch is committed. With one, they are event time: the
watermark is the least, over the input's partitions (source task and stream), of the
greatest timestamp seen, minus ``with_lag``; a window ``[end - length, end)`` (ends
aligned to multiples of the sliding interval) fires once the watermark reaches its end;
a tuple older than the watermark when it arrives is late: it goes to the late-tuple
stream (field ``late_tuple``: the tuple's values), or, without one, is acked and logged.

The tuples of a window are anchored and acked as Storm does: each tuple is acked when it
leaves the window (when no later window can hold it), and failed when ``execute`` raises
``FailedException`` on a window holding it. A windowed bolt runs in the commit phase on
the driver, where its windows live between micro-batches; ``BaseStatefulWindowedBolt``
adds ``init_state`` and, ``with_persistence()``, keeps the window contents in its
``KeyValueState`` so that a restart resumes the open windows.

Classes users subclass: ``BaseWindowedBolt``, ``BaseStatefulWindowedBolt``. ``TupleWindow``
is what the framework passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from transactional.exceptions import TopologyError

if TYPE_CHECKING:
    from state.keyvalue import KeyValueState
    from transactional.bolt import OutputFieldsDeclarer, TopologyContext
    from transactional.core import OutputCollector
    from transactional.topology import Topology
    from transactional.tuples import Tuple

#: ``ComponentSpec.core`` of windowed bolts (plain, and stateful).
WINDOWED_KINDS = ("windowed", "swindowed")

__all__ = ["Count", "Duration", "TupleWindow", "WindowInfo", "WindowConfig", "BaseWindowedBolt", "BaseStatefulWindowedBolt"]

_UNITS_MS = {"ms": 1, "milliseconds": 1, "millis": 1, "s": 1000, "seconds": 1000, "secs": 1000,
             "m": 60_000, "minutes": 60_000, "h": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "days": 86_400_000}


@dataclass(frozen=True)
class Count:
    """A window length or sliding interval in tuples (Storm's ``BaseWindowedBolt.Count``).

    >>> Count(10), Count.of(3).value
    (Count(10), 3)
    """

    value: int

    def __post_init__(self) -> None:
        if not isinstance(self.value, int) or isinstance(self.value, bool) or self.value < 1:
            msg = f"Count must be a whole number of tuples >= 1; got {self.value!r}"
            raise TopologyError(msg)

    @classmethod
    def of(cls, value: int) -> Count:
        """Storm's ``Count.of(n)``."""
        return cls(value)

    def __repr__(self) -> str:
        return f"Count({self.value})"


@dataclass(frozen=True)
class Duration:
    """A window length, sliding interval, lag or watermark interval in time (Storm's
    ``BaseWindowedBolt.Duration``); ``value`` in ``unit`` ("ms", "seconds", "minutes",
    "hours", "days"), kept as milliseconds in ``ms``.

    >>> Duration(10, "seconds").ms, Duration.minutes(1).ms, Duration(250).ms
    (10000, 60000, 250)
    """

    value: float
    unit: str = "ms"

    def __post_init__(self) -> None:
        if self.unit not in _UNITS_MS:
            msg = f"Duration unit {self.unit!r} is not one of {sorted(_UNITS_MS)}"
            raise TopologyError(msg)
        if not isinstance(self.value, (int, float)) or isinstance(self.value, bool):
            msg = f"Duration value must be a number; got {self.value!r}"
            raise TopologyError(msg)

    @property
    def ms(self) -> int:
        """The duration in whole milliseconds."""
        return int(round(self.value * _UNITS_MS[self.unit]))

    @classmethod
    def of(cls, ms: int) -> Duration:
        """Storm's ``Duration.of(millis)``."""
        return cls(ms, "ms")

    @classmethod
    def seconds(cls, n: float) -> Duration:
        """``n`` seconds."""
        return cls(n, "seconds")

    @classmethod
    def minutes(cls, n: float) -> Duration:
        """``n`` minutes."""
        return cls(n, "minutes")

    @classmethod
    def hours(cls, n: float) -> Duration:
        """``n`` hours."""
        return cls(n, "hours")

    @classmethod
    def days(cls, n: float) -> Duration:
        """``n`` days."""
        return cls(n, "days")

    def __repr__(self) -> str:
        return f"Duration({self.value}, {self.unit!r})"


Length = Count | Duration


class TupleWindow(Protocol):
    """What ``BaseWindowedBolt.execute`` receives (Storm's ``TupleWindow``)."""

    def get(self) -> list[Tuple]:
        """Every tuple in the window, in arrival order."""
        ...

    def get_new(self) -> list[Tuple]:
        """The tuples that arrived since the window last fired."""
        ...

    def get_expired(self) -> list[Tuple]:
        """The tuples that left the window since it last fired (already acked)."""
        ...

    def get_start_timestamp(self) -> int | None:
        """The window's start in milliseconds (event time, or the driver's clock); None
        for a count window."""
        ...

    def get_end_timestamp(self) -> int:
        """The window's end in milliseconds (a count window: its newest tuple's time)."""
        ...

    def get_key(self) -> Any:
        """The key the window is of (a session window per key); None for these windows."""
        ...


@dataclass(frozen=True)
class WindowInfo:
    """Which window is being aggregated: what a Trident window's aggregator finds in
    ``collector.window`` (the same three questions a core ``TupleWindow`` answers).

    >>> w = WindowInfo(0, 2000, "alice")
    >>> w.get_start_timestamp(), w.get_end_timestamp(), w.get_key()
    (0, 2000, 'alice')
    """

    start: int | None
    end: int
    key: Any = None

    def get_start_timestamp(self) -> int | None:
        """The window's start in ms (inclusive); None for a count window."""
        return self.start

    def get_end_timestamp(self) -> int:
        """The window's end in ms (exclusive; a count window: its newest tuple's time)."""
        return self.end

    def get_key(self) -> Any:
        """The group the window is of (a session's key); None for a window of the whole stream."""
        return self.key


@dataclass(frozen=True)
class WindowConfig:
    """A windowed bolt's settings, as its ``with_*`` methods left them."""

    length: Length | None = None
    sliding: Length | None = None
    timestamp_field: str | None = None
    timestamp_extractor: Callable[[Any], int] | None = None
    lag: Duration | None = None
    watermark_interval: Duration | None = None
    late_stream: str | None = None
    persistent: bool = False
    session: bool = False                 # a session window: ``length`` is the gap
    session_key: str | None = None        # the field whose value a session is of (None: the task's input)

    @property
    def event_time(self) -> bool:
        """Timestamps come from the tuples (a field or an extractor)."""
        return self.timestamp_field is not None or self.timestamp_extractor is not None

    def check(self, component: str) -> None:
        """``TopologyError`` naming ``component`` and the fix for a window that cannot run."""
        if self.length is None:
            msg = (f"windowed bolt {component!r} has no window; call with_window(length, sliding_interval) "
                   "or with_tumbling_window(length) on it")
            raise TopologyError(msg)
        s = self.sliding
        if s is not None and type(s) is type(self.length):
            size = s.value if isinstance(s, Count) else s.ms
            length = self.length.value if isinstance(self.length, Count) else self.length.ms
            if size > length:
                msg = (f"windowed bolt {component!r}: sliding interval {s!r} is longer than the window {self.length!r}; "
                       "tuples between windows would never be seen. Give a sliding interval <= the window "
                       "length (equal: with_tumbling_window)")
                raise TopologyError(msg)
        for what, d in (("window length", self.length), ("sliding interval", s)):
            if isinstance(d, Duration) and d.ms <= 0:
                msg = f"windowed bolt {component!r}: {what} {d!r} must be > 0 ms"
                raise TopologyError(msg)
        if self.lag is not None and self.lag.ms < 0:
            msg = (f"windowed bolt {component!r}: negative lag {self.lag!r}; the lag is how long the watermark "
                   "waits for out-of-order tuples: give with_lag(Duration(n, unit)) with n >= 0")
            raise TopologyError(msg)
        if self.watermark_interval is not None and self.watermark_interval.ms <= 0:
            msg = f"windowed bolt {component!r}: watermark interval {self.watermark_interval!r} must be > 0 ms"
            raise TopologyError(msg)
        if self.session and not self.event_time:
            msg = (f"windowed bolt {component!r} has a session window, which is over event time; add "
                   "with_timestamp_field(name) or with_timestamp_extractor(fn)")
            raise TopologyError(msg)
        if (self.lag is not None or self.late_stream is not None) and not self.event_time:
            msg = (f"windowed bolt {component!r} sets a lag or a late-tuple stream but no event time; add "
                   "with_timestamp_field(name) or with_timestamp_extractor(fn)")
            raise TopologyError(msg)


class BaseWindowedBolt:
    """Storm's ``BaseWindowedBolt`` (module docstring). Configure with the ``with_*``
    methods (each returns the bolt), implement ``execute(window)``.

    >>> b = BaseWindowedBolt().with_tumbling_window(Count(3))
    >>> b.window_config.length, b.window_config.sliding
    (Count(3), Count(3))
    """

    _window: WindowConfig = WindowConfig()

    @property
    def window_config(self) -> WindowConfig:
        """The settings the ``with_*`` methods made."""
        return self._window

    def _with(self, **changes: Any) -> BaseWindowedBolt:
        self._window = replace(self._window, **changes)
        return self

    def with_window(self, length: Length, sliding_interval: Length | None = None) -> BaseWindowedBolt:
        """A sliding window of ``length`` that fires every ``sliding_interval`` (default:
        every tuple, ``Count(1)``)."""
        _check_length("window length", length)
        if sliding_interval is not None:
            _check_length("sliding interval", sliding_interval)
        return self._with(length=length, sliding=sliding_interval or Count(1), session=False)

    def with_session_window(self, gap: Duration, key_field: str | None = None) -> BaseWindowedBolt:
        """Session windows over event time (add ``with_timestamp_field``): a session is a
        run of tuples each less than ``gap`` after the one before, per value of
        ``key_field`` (None: of all the task's tuples); it fires when the watermark passes
        its last tuple plus ``gap``, and a late tuple that bridges two sessions merges them
        (``transactional.engine.window_core``). ``window.get_key()`` is the key."""
        if not isinstance(gap, Duration) or gap.ms <= 0:
            msg = f"with_session_window takes a Duration gap > 0 ms (e.g. Duration(30, 'seconds')); got {gap!r}"
            raise TopologyError(msg)
        return self._with(length=gap, sliding=gap, session=True, session_key=key_field)

    def with_tumbling_window(self, length: Length) -> BaseWindowedBolt:
        """Windows of ``length`` that do not overlap: each tuple is in exactly one."""
        _check_length("window length", length)
        return self._with(length=length, sliding=length, session=False)

    def with_timestamp_field(self, name: str) -> BaseWindowedBolt:
        """Event time: each tuple's field ``name`` holds its time in milliseconds (an int)."""
        if not isinstance(name, str) or not name:
            msg = f"with_timestamp_field takes a field name; got {name!r}"
            raise TopologyError(msg)
        return self._with(timestamp_field=name, timestamp_extractor=None)

    def with_timestamp_extractor(self, fn: Callable[[Any], int]) -> BaseWindowedBolt:
        """Event time: ``fn(tuple)`` gives each tuple's time in milliseconds."""
        if not callable(fn):
            msg = f"with_timestamp_extractor takes a function of the tuple; got {fn!r}"
            raise TopologyError(msg)
        return self._with(timestamp_extractor=fn, timestamp_field=None)

    def with_lag(self, lag: Duration) -> BaseWindowedBolt:
        """How far behind the newest timestamp the watermark stays (out-of-order tuples
        within the lag are still in time). A negative lag is refused at build."""
        if not isinstance(lag, Duration):
            msg = f"with_lag takes a Duration; got {lag!r}"
            raise TopologyError(msg)
        return self._with(lag=lag)

    def with_watermark_interval(self, interval: Duration) -> BaseWindowedBolt:
        """Advance the watermark at most this often (driver's clock); default: every
        micro-batch."""
        if not isinstance(interval, Duration):
            msg = f"with_watermark_interval takes a Duration; got {interval!r}"
            raise TopologyError(msg)
        return self._with(watermark_interval=interval)

    def with_late_tuple_stream(self, stream: str) -> BaseWindowedBolt:
        """Late tuples are emitted on ``stream`` (one field, ``late_tuple``: the values)."""
        if not isinstance(stream, str) or not stream:
            msg = f"with_late_tuple_stream takes a stream id; got {stream!r}"
            raise TopologyError(msg)
        return self._with(late_stream=stream)

    # -- what users implement ------------------------------------------------------------------
    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        """Called once per task per micro-batch, before any ``execute``; keep ``collector``."""

    def execute(self, window: TupleWindow) -> None:
        """Called each time a window fires. Emit anchored to ``window.get()`` tuples if
        you want them tracked; do not ack them (the framework does when they leave)."""
        msg = f"{type(self).__name__} must implement execute(window)"
        raise NotImplementedError(msg)

    def cleanup(self) -> None:
        """Called when the task's micro-batch ends."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare output streams (the late-tuple stream is declared by the framework)."""

    def declare_framework_streams(self, declarer: OutputFieldsDeclarer) -> None:
        """The late-tuple stream, when one is set (called by the builder)."""
        from transactional.tuples import Fields

        if self._window.late_stream is not None:
            declarer.declare(Fields("late_tuple"), self._window.late_stream)


class BaseStatefulWindowedBolt(BaseWindowedBolt):
    """Storm's ``BaseStatefulWindowedBolt``: a windowed bolt with a ``KeyValueState``
    (``init_state``, checkpointed as ``BaseStatefulBolt``'s). ``with_persistence()`` keeps
    the window contents in that state too (keys starting ``__window__``), so that a
    restart resumes its open windows; its tuples are then acked at the checkpoint that
    holds them, not when they leave the window."""

    def with_persistence(self) -> BaseStatefulWindowedBolt:
        """Keep the windows in the bolt's ``KeyValueState`` (class docstring)."""
        self._with(persistent=True)
        return self

    def init_state(self, state: KeyValueState) -> None:
        """The task's state; keep it (after ``prepare``, before the first ``execute``)."""

    def pre_prepare(self, txid: int) -> None:
        """Hook: just before the framework prepares checkpoint ``txid`` of this state."""

    def pre_commit(self, txid: int) -> None:
        """Hook: just before the framework commits checkpoint ``txid`` of this state."""

    def pre_rollback(self) -> None:
        """Hook: just before the framework rolls this state back to its last checkpoint."""


def _check_length(what: str, x: Any) -> None:
    if not isinstance(x, (Count, Duration)):
        msg = f"a {what} is a Count(n) or a Duration(value, unit); got {x!r}"
        raise TopologyError(msg)


def check_windowed(topology: Topology) -> None:
    """At build: ``TopologyError`` naming the bolt and the fix for a window that cannot run
    (``WindowConfig.check``), or whose timestamp field an input stream lacks."""
    for c in topology.bolts:
        if c.core not in WINDOWED_KINDS:
            continue
        w: WindowConfig = c.new_instance().window_config
        w.check(c.id)
        if w.timestamp_field is None:
            continue
        for s in c.inputs:
            fields = topology.component(s.source).streams[s.stream].fields
            if w.timestamp_field not in fields:
                msg = (f"windowed bolt {c.id!r} reads its timestamps from field {w.timestamp_field!r}, which stream "
                       f"{s.stream!r} of {s.source!r} does not have (its fields: {list(fields)}); declare it there, "
                       "or use with_timestamp_extractor(fn)")
                raise TopologyError(msg)
