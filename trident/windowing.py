"""Trident windows (docs/windows.md): ``Stream.tumbling_window``, ``sliding_window`` and
``window(config, store_factory, in_fields, aggregator, out_fields)``.

    counts = (stream.tumbling_window(Duration(1, "minutes"), WindowsStoreFactory("minute"),
                                     Fields("word"), Count(), Fields("count"),
                                     timestamp_field="ts", lag=Duration(5, "seconds")))

A window stage runs in the commit phase, in txid order, with one task (its input is
gathered globally). Its open windows live in a transactional map of the topology's user
state (``WindowsStoreFactory(name)``: memory:// or redis://, as ``TopologyConfig.state``
says), updated once per txid in the same atomic write as the txid's other maps. So windows
are exactly once: batch ``t`` reads the window store as batch ``t-1`` left it, adds its
tuples in their fixed order, fires the windows that are complete, and stores what stays
open -- a function of the txids a window covers. A replay of ``t`` fires the same windows
with the same contents (processing time is the time recorded by ``t``'s first commit),
and a persistent state downstream skips what it already took.

Times: processing time is the driver's clock (milliseconds) when the txid's first commit
began, recorded with the txid and the same on every replay;
with ``timestamp_field`` it is event time, and the watermark is the least, over the
upstream partitions (source tasks) that sent tuples, of the greatest timestamp each sent,
minus ``lag`` (each batch is complete when it is committed, so a batch advances it once). A tuple below the watermark is late: counted (``late`` in the store,
``RunResult``'s log) and dropped with a log line.

The window configs are Storm's: ``TumblingCountWindow.of(n)``, ``SlidingCountWindow.of(n,
s)``, ``TumblingDurationWindow.of(d)``, ``SlidingDurationWindow.of(d, s)``, each a
``WindowConfig`` -- the one core windowed bolts use (``transactional.windowing``), run by
the one window core (``transactional.engine.window_core``). The output of a window stage is
what its aggregator emits for each window fired (``out_fields``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from transactional.exceptions import ConfigError
from transactional.windowing import Count, Duration, WindowConfig

__all__ = ["WindowConfig", "TumblingCountWindow", "SlidingCountWindow", "TumblingDurationWindow",
           "SlidingDurationWindow", "WindowsStoreFactory", "InMemoryWindowsStoreFactory",
           "RedisWindowsStoreFactory", "Count", "Duration"]


def _check(config: WindowConfig, what: str) -> None:
    """``ConfigError`` naming the operation and the fix for a window that cannot run."""
    if not isinstance(config.length, type(config.sliding)):
        msg = f"{what}: the window length and sliding interval are both tuples or both durations; got {config!r}"
        raise ConfigError(msg)
    count = isinstance(config.length, Count)
    unit = "tuples" if count else "ms"
    length, sliding = (x.value if isinstance(x, Count) else x.ms for x in (config.length, config.sliding))  # type: ignore[union-attr]
    if length < 1 or sliding < 1:
        msg = f"{what}: window length and sliding interval must be >= 1 {unit}; got {length}, {sliding}"
        raise ConfigError(msg)
    if sliding > length:
        msg = (f"{what}: sliding interval {sliding} {unit} is longer than the window {length} {unit}; "
               "tuples between windows would never be seen. Give a sliding interval <= the window length")
        raise ConfigError(msg)


def _ms(d: Any, what: str) -> int:
    if isinstance(d, Duration):
        return d.ms
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        return int(d)
    msg = f"{what} is a Duration(value, unit) (or milliseconds); got {d!r}"
    raise ConfigError(msg)


def _n(c: Any, what: str) -> Count:
    if isinstance(c, Count):
        return c
    if isinstance(c, int) and not isinstance(c, bool):
        if c < 1:
            msg = f"{what}: window length and sliding interval must be >= 1 tuples; got {c}"
            raise ConfigError(msg)
        return Count(c)
    msg = f"{what} is a number of tuples; got {c!r}"
    raise ConfigError(msg)


def _d(d: Any, what: str) -> Duration:
    return Duration.of(_ms(d, what))


class TumblingCountWindow:
    """Storm's ``TumblingCountWindow``: every ``n`` tuples, a window of them."""

    @staticmethod
    def of(n: int | Count) -> WindowConfig:
        """Windows of ``n`` tuples, each tuple in one."""
        k = _n(n, "TumblingCountWindow.of")
        return WindowConfig(k, k)


class SlidingCountWindow:
    """Storm's ``SlidingCountWindow``: the last ``n`` tuples, every ``s`` tuples."""

    @staticmethod
    def of(n: int | Count, s: int | Count) -> WindowConfig:
        """The last ``n`` tuples, fired after every ``s``."""
        return WindowConfig(_n(n, "SlidingCountWindow.of"), _n(s, "SlidingCountWindow.of"))


class TumblingDurationWindow:
    """Storm's ``TumblingDurationWindow``: windows ``[k*d, (k+1)*d)`` of time."""

    @staticmethod
    def of(d: Duration | int) -> WindowConfig:
        """Windows of duration ``d`` (a ``Duration``, or milliseconds)."""
        ms = _d(d, "TumblingDurationWindow.of")
        return WindowConfig(ms, ms)


class SlidingDurationWindow:
    """Storm's ``SlidingDurationWindow``: windows of ``d`` ending at every multiple of ``s``."""

    @staticmethod
    def of(d: Duration | int, s: Duration | int) -> WindowConfig:
        """Windows of duration ``d``, one ending every ``s``."""
        return WindowConfig(_d(d, "SlidingDurationWindow.of"), _d(s, "SlidingDurationWindow.of"))


@dataclass(frozen=True)
class WindowsStoreFactory:
    """Where a window stage keeps its open windows: the transactional map ``name`` of the
    topology's user state (``TopologyConfig.state``: memory:// or redis://). Storm's
    ``WindowsStoreFactory``; ``backend`` ("memory", "redis" or None for either) is checked
    against the state's URL when the stage opens it. ``ttl_secs``: a key (a session's key;
    a window stage without sessions: the whole window) that no tuple reached for that long,
    by the txids' recorded times, loses its open sessions or windows unfired, as a map
    key's value expires (``state.map.ttl``; docs/windows.md, "Windows that expire")."""

    name: str
    backend: str | None = None
    ttl_secs: float | None = None

    def __post_init__(self) -> None:
        from state.keys import check_state_name

        check_state_name(self.name)
        t = self.ttl_secs
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
            msg = (f"windows store {self.name!r}: ttl_secs={t!r}; give a number of seconds > 0, or None for "
                   "windows that never expire")
            raise ConfigError(msg)


def InMemoryWindowsStoreFactory(name: str = "windows") -> WindowsStoreFactory:   # noqa: N802 - Storm's name
    """Storm's ``InMemoryWindowsStoreFactory``: the windows in a map of a ``memory://`` state
    (for the run; a restarted driver starts with no open windows)."""
    return WindowsStoreFactory(name, "memory")


def RedisWindowsStoreFactory(name: str = "windows") -> WindowsStoreFactory:   # noqa: N802 - Storm's name
    """The windows in a map of a ``redis://`` state: durable, resumed by a restart."""
    return WindowsStoreFactory(name, "redis")


@dataclass(frozen=True)
class WindowSpec:
    """What a window stage runs (``trident.runtime.window_proc.WindowProc``): the window
    (``config``, with its time, lag and late stream), where it is kept, the aggregator, and
    the positions of the timestamp and of a session's key fields in the stream."""

    config: WindowConfig
    store: WindowsStoreFactory
    aggregator: Any
    timestamp_idx: int | None = None
    key_idx: tuple[int, ...] = ()     # a session per value of these fields (a grouped stream)

    @property
    def late_stream(self) -> str | None:
        """The stream late tuples go to (``TridentTopology.late_stream``)."""
        return self.config.late_stream

    @property
    def session(self) -> bool:
        """A session window (``config.length`` is the gap)."""
        return self.config.session

    @property
    def lag(self) -> int:
        """The watermark's lag in ms."""
        return 0 if self.config.lag is None else self.config.lag.ms


def window_spec(fields: Any, config: WindowConfig, store: WindowsStoreFactory, aggregator: Any,
                timestamp_field: str | None, lag: Duration | int | None, what: str,
                late_stream: str | None = None) -> WindowSpec:
    """The checked ``WindowSpec`` of a window over a stream of ``fields``; ``ConfigError``
    naming ``what`` and the fix."""
    from trident.operation import Aggregator, CombinerAggregator, ReducerAggregator

    if not isinstance(config, WindowConfig) or config.length is None or config.sliding is None:
        msg = f"{what} takes a window config (e.g. TumblingCountWindow.of(100)); got {config!r}"
        raise ConfigError(msg)
    _check(config, what)
    if not isinstance(store, WindowsStoreFactory):
        msg = f"{what} takes a WindowsStoreFactory (e.g. WindowsStoreFactory('windows')); got {store!r}"
        raise ConfigError(msg)
    if not isinstance(aggregator, (Aggregator, CombinerAggregator, ReducerAggregator)):
        msg = f"{what} takes an aggregator (Count(), Sum(), an Aggregator ...); got {aggregator!r}"
        raise ConfigError(msg)
    lag_ms = 0 if lag is None else _ms(lag, f"{what}: lag")
    if lag_ms < 0:
        msg = f"{what}: negative lag {lag!r}; give a lag >= 0 (how long the watermark waits for late tuples)"
        raise ConfigError(msg)
    if lag is not None and timestamp_field is None:
        msg = f"{what}: a lag needs event time; give timestamp_field='<field with the time in ms>'"
        raise ConfigError(msg)
    if late_stream is not None and (not isinstance(late_stream, str) or not late_stream):
        msg = f"{what}: late_stream is the name of a stream (e.g. 'late'); got {late_stream!r}"
        raise ConfigError(msg)
    if late_stream is not None and timestamp_field is None:
        msg = f"{what}: a late_stream needs event time; give timestamp_field='<field with the time in ms>'"
        raise ConfigError(msg)
    ts_idx = None
    if timestamp_field is not None:
        if timestamp_field not in fields:
            msg = (f"{what}: timestamp field {timestamp_field!r} is not in the stream, whose fields are "
                   f"{list(fields)}; fix the name or add the field first")
            raise ConfigError(msg)
        ts_idx = list(fields).index(timestamp_field)
    timed = replace(config, timestamp_field=timestamp_field, lag=None if lag is None else Duration.of(lag_ms),
                    late_stream=late_stream)
    return WindowSpec(timed, store, aggregator, ts_idx)


def session_spec(fields: Any, gap: Any, store: WindowsStoreFactory, aggregator: Any, timestamp_field: Any,
                 lag: Any, late_stream: str | None, key_idx: tuple[int, ...], what: str) -> WindowSpec:
    """The checked ``WindowSpec`` of a session window (``Stream.session_window``)."""
    if timestamp_field is None:
        msg = f"{what}: a session window is over event time; give timestamp_field='<field with the time in ms>'"
        raise ConfigError(msg)
    ms = _ms(gap, f"{what}: gap")
    if ms <= 0:
        msg = f"{what}: the gap must be > 0 ms; got {gap!r}"
        raise ConfigError(msg)
    gap_ms = Duration.of(ms)
    spec = window_spec(fields, WindowConfig(gap_ms, gap_ms, session=True), store, aggregator, timestamp_field, lag,
                       what, late_stream)
    return replace(spec, key_idx=key_idx)
