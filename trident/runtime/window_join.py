"""``WindowJoinProc``: a Trident join over windows in the commit phase
(``TridentTopology.window_join``; docs/windows.md), built on the window core
(``transactional.engine.window_core``): one ``WindowMachine`` holds the tuples of both
streams, and each window it fires is hash-joined on its own.

Two streams, ``a`` (side 0) and ``b`` (side 1), joined where the keys are equal and both
tuples are in the same window (tumbling or sliding, by count or duration, event or
processing time): for each ``a`` tuple of a window, in arrival order, one output per ``b``
tuple of the window with its key, in arrival order; a left join also emits an ``a`` tuple
that has none, with None for ``b``'s fields. A sliding window's pair comes once per window
that holds both. Per txid, in order: rebuild the machine from the task's record as txid
``t-1`` left it (``multi_get_committed``), add ``t``'s rows in their fixed order (a row
below the watermark is late: counted, and sent on the late stream as ``("a" or "b",
[its values])``), reach the reference time (the watermark over both sides' partitions,
or the txid's time), store the record once for ``t`` with the txid's other maps. So a
replay joins the same windows.

The record (JSON): ``{"txid", "seq", "count_since", "next_end", "maxima", "late",
"fired", "events": [[seq, ts, [side, [values...]]], ...]}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from transactional.engine.commit import TXID_TIME_MS
from transactional.engine.window_core import Event, WindowMachine
from transactional.exceptions import ConfigError
from transactional.tuples import Fields
from transactional.windowing import Duration, WindowConfig
from trident.runtime.processors import JoinProc, Proc
from trident.runtime.window_proc import hand_watermark

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

log = logging.getLogger("trident")


@dataclass(frozen=True)
class WindowJoinSpec:
    """What a window join stage runs: the window (its time, lag and late stream), the store's
    map name, per side the key positions, the other positions and the timestamp position
    (None: processing time), whether it is a left join, and whether the output ends with
    the window's start and end."""

    config: WindowConfig
    store: str
    keys: tuple[tuple[int, ...], tuple[int, ...]]
    rest: tuple[tuple[int, ...], tuple[int, ...]]
    ts: tuple[int, int] | None
    left: bool = False
    bounds: bool = False

    @property
    def late_stream(self) -> str | None:
        """The stream late rows go to (``TridentTopology.late_stream``)."""
        return self.config.late_stream


def _empty() -> dict[str, Any]:
    return {"txid": 0, "seq": 0, "count_since": 0, "next_end": None, "maxima": {}, "late": 0, "fired": 0,
            "events": []}


class WindowJoinProc(JoinProc):
    """The window join of one task (module docstring); rows arrive by side."""

    def open(self, bolt: TridentBolt) -> None:
        Proc.open(self, bolt)
        assert self.op is not None
        self.spec: WindowJoinSpec = self.op.fn
        self.map = bolt.context.map_state(self.spec.store, "transactional")
        self.bolt, self.attempt = bolt, bolt.attempt
        self.txid_ms = int(bolt.conf[TXID_TIME_MS])
        self.rows_in: list[tuple[int, str, tuple[Any, ...]]] = []
        self.late_out = None if self.spec.late_stream is None else f"late-{self.spec.late_stream}"

    def side_row(self, side: int, r: tuple[Any, ...]) -> None:
        self.rows_in.append((side, self.bolt.partition, r))

    def finish(self) -> None:
        spec, key, now, conf = self.spec, f"wjoin:{self.task}", self.txid_ms, self.bolt.conf
        rec = self.map.multi_get_committed([key])[0] or _empty()
        m = WindowMachine(spec.config, self)
        m.next_seq, m.count_since, m.next_end = rec["seq"] + 1, rec["count_since"], rec["next_end"]
        m.late, m.fired = rec["late"], rec["fired"]
        m.wm.maxima = dict(rec["maxima"])
        m.wm.value = m.wm.seen(hand_watermark(conf, self.txid - 1))   # as the batches before left it
        m.events = [Event(e[0], e[1], e[2]) for e in rec["events"]]
        late = m.late
        for side, part, r in self.rows_in:
            ts = now if spec.ts is None else int(r[spec.ts[side]])
            if m.add([side, list(r)], ts, f"{side}/{part}") is None and self.late_out is not None:
                self.bolt.collector.emit((self.attempt, "ab"[side], list(r)), self.late_out)
        if m.late > late:
            log.warning("window join %r txid %d: %d late tuple(s) (below the watermark %s); %d so far",
                        self.stage, self.txid, m.late - late, m.wm.value, m.late)
        ref = m.wm.seen(hand_watermark(conf, self.txid)) if spec.ts is not None else now
        if ref is not None:
            m.reach(ref)
        new = {"txid": self.txid, "seq": m.next_seq - 1, "count_since": m.count_since, "next_end": m.next_end,
               "maxima": m.wm.maxima, "late": m.late, "fired": m.fired,
               "events": [[e.seq, e.ts, e.item] for e in m.retained()]}
        self.map.multi_update([key], lambda _old: new)
        Proc.finish(self)

    # -- the machine's hooks ---------------------------------------------------------------------
    def held(self, e: Event) -> None:
        """Nothing to do: the record is written once, at the end of the txid."""

    def evicted(self, events: list[Event]) -> None:
        """Nothing to do: left events are not written back."""

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        """Join one window: each ``a`` row with every ``b`` row of its key (module docstring)."""
        assert self.nxt is not None
        (ka, kb), (ra, rb) = self.spec.keys, self.spec.rest
        index: dict[str, list[tuple[Any, ...]]] = {}
        for e in window:
            side, values = e.item
            if side == 1:
                index.setdefault(repr([values[i] for i in kb]), []).append(tuple(values[i] for i in rb))
        nulls = [(None,) * len(rb)] if self.spec.left else []
        tail = (start, end) if self.spec.bounds else ()
        for e in window:
            side, values = e.item
            if side == 0:
                k = tuple(values[i] for i in ka)
                a_rest = tuple(values[i] for i in ra)
                for b_rest in index.get(repr(list(k)), nulls):
                    self.nxt.row((*k, *a_rest, *b_rest, *tail))
        return False


def window_join_spec(a: Any, b: Any, config: Any, a_fields: Any, b_fields: Any, out_fields: Fields, store: Any,
                     join_type: str, timestamp_fields: Any, lag: Any, late_stream: str | None) -> WindowJoinSpec:
    """The checked ``WindowJoinSpec`` of ``TridentTopology.window_join`` (``a``, ``b``: the
    streams); ``ConfigError`` naming the fix."""
    from trident.windowing import WindowsStoreFactory, _check, _ms

    what = "window_join"
    if not isinstance(config, WindowConfig) or config.length is None or config.sliding is None or config.session:
        msg = (f"{what} takes a tumbling or sliding window config (e.g. TumblingDurationWindow.of(Duration(1, "
               f"'minutes')), SlidingCountWindow.of(10, 5)); got {config!r}")
        raise ConfigError(msg)
    _check(config, what)
    if not isinstance(store, WindowsStoreFactory):
        msg = f"{what} takes a WindowsStoreFactory (e.g. WindowsStoreFactory('joins')); got {store!r}"
        raise ConfigError(msg)
    if join_type not in ("inner", "left"):
        msg = f"{what}: join_type is 'inner' or 'left'; got {join_type!r}"
        raise ConfigError(msg)
    keys = tuple(s._in(f, what)[1] for s, f in ((a, a_fields), (b, b_fields)))
    if len(keys[0]) != len(keys[1]):
        msg = f"{what}: a's key {a_fields!r} and b's key {b_fields!r} must have as many fields"
        raise ConfigError(msg)
    rest = tuple(tuple(i for i in range(len(s.fields)) if i not in k) for s, k in zip((a, b), keys, strict=True))
    names = [a.fields[i] for i in keys[0]] + [a.fields[i] for i in rest[0]] + [b.fields[i] for i in rest[1]]
    if len(out_fields) not in (len(names), len(names) + 2):
        msg = (f"{what}: out_fields name the key, then a's other fields, then b's ({len(names)} in all: {names}), "
               f"and optionally two more for the window's start and end; got {list(out_fields)}")
        raise ConfigError(msg)
    ts = None
    if timestamp_fields is not None:
        pair = (timestamp_fields, timestamp_fields) if isinstance(timestamp_fields, str) else tuple(timestamp_fields)
        if len(pair) != 2:
            msg = f"{what}: timestamp_fields is a field name, or one per stream (a's, b's); got {timestamp_fields!r}"
            raise ConfigError(msg)
        ts = (a._in(Fields(pair[0]), what)[1][0], b._in(Fields(pair[1]), what)[1][0])
    lag_ms = 0 if lag is None else _ms(lag, f"{what}: lag")
    if lag_ms < 0 or ((lag is not None or late_stream is not None) and ts is None):
        msg = (f"{what}: a lag (>= 0) or a late_stream needs event time: give timestamp_fields=('a_ts', 'b_ts'); "
               f"got lag={lag!r}, late_stream={late_stream!r}")
        raise ConfigError(msg)
    # the machine reads event time from ``config.event_time``; the positions are the spec's (``ts``)
    timed = replace(config, timestamp_field=None if ts is None else "ts", lag=None if lag is None else Duration.of(lag_ms),
                    late_stream=late_stream)
    return WindowJoinSpec(timed, store.name, (keys[0], keys[1]), (rest[0], rest[1]), ts,
                          join_type == "left", len(out_fields) == len(names) + 2)
