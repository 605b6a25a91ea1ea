"""``WindowProc``: a Trident window stage in the commit phase (``trident.windowing``), the
Trident adapter of the window core (``transactional.engine.window_core``, which core
windowed bolts use too: watermark, triggers, eviction, late tuples, sessions).

Per txid ``t``, in order: rebuild the task's window machine from its record as txid ``t-1``
left it (``multi_get_committed``; the watermark in force is what the record's maxima give),
add ``t``'s rows in their fixed order (count triggers fire as they come; a late row is
counted, and sent on the late stream when there is one), then reach the reference time --
event time: the least, over the upstream partitions (source, stream and task of each
payload) that sent tuples, of the greatest event time each sent, minus the lag;
processing time: the txid's time (the driver's clock when ``t``'s first commit began,
recorded with ``t``'s pending metadata and reused by every replay of ``t``:
``CoordinatorStore.commit_time``) -- which fires the duration windows and sessions whose
end it reached, then store the record once for ``t`` (``multi_update``: a transactional
map skips a txid it already holds), keeping only the events a later window can hold. Each
fired window's tuples go through the aggregator; what it emits flows on.

The record (JSON): ``{"txid", "now", "seq", "count_since", "next_end", "maxima": {"<source>/<stream>/<task>":
greatest ts}, "late", "fired", "events": [[seq, ts, [values...]], ...]}`` (a session's events
also carry their key: ``[seq, ts, [values...], [key...]]``); with a store TTL, ``"seen"``:
each key holding events -> the recorded time of the last txid that added one of its tuples
(``WindowsStoreFactory.ttl_secs``: at a txid at or after that time plus the TTL, the key's
events are dropped unfired before the txid's rows are added).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from transactional.engine.commit import TXID_TIME_MS
from transactional.engine.window_core import Event, WindowMachine
from transactional.exceptions import ConfigError
from transactional.windowing import WindowInfo
from trident.operation import TridentTuple
from trident.runtime.aggregators import as_aggregator
from trident.runtime.op import op_label
from trident.runtime.processors import Proc, _Collect

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

log = logging.getLogger("trident")


class _WindowCollect(_Collect):
    """A window aggregator's collector: ``window`` is the window being aggregated."""

    __slots__ = ("window",)

    def __init__(self, push: Any, width: int, what: str) -> None:
        super().__init__(push, width, what)
        self.window: WindowInfo | None = None


def _empty() -> dict[str, Any]:
    return {"txid": 0, "now": None, "seq": 0, "count_since": 0, "next_end": None, "maxima": {}, "late": 0,
            "fired": 0, "events": []}


#: ``TopologyConfig.conf`` key of hand-set watermarks (``trident.testing.TopologyTestDriver``):
#: ``{"<txid>": ms}``, each the least watermark of every event-time stage from that txid on
HAND_WATERMARKS = "trident.hand_watermarks"


def hand_watermark(conf: dict[str, Any], txid: int) -> int | None:
    """The hand-set watermark in force at ``txid`` (the greatest set at or before it), or
    None; a function of the txid, so a replay sees the same."""
    marks = conf.get(HAND_WATERMARKS) or {}
    got = [int(ms) for t, ms in marks.items() if int(t) <= txid]
    return max(got) if got else None


def _ttl_key(key: Any) -> str:
    """A session key (a window stage without sessions: None, the whole window) as the
    record's ``seen`` keeps it."""
    return "*" if key is None else json.dumps(list(key), sort_keys=True, default=str)


class WindowProc(Proc):
    """The window of one task of a window stage (module docstring): the window core's
    machine, rebuilt from the record and stored back each txid."""

    def open(self, bolt: TridentBolt) -> None:
        super().open(bolt)
        op = self.op
        assert op is not None and self.nxt is not None
        self.spec = op.fn
        if hasattr(self.spec.aggregator, "prepare"):
            self.spec.aggregator.prepare(bolt.conf, bolt.op_context)
        self.map = bolt.context.map_state(self.spec.store.name, "transactional")
        want = self.spec.store.backend
        if want is not None:
            kind = type(self.map.backing).__name__.lower()
            if want not in kind:
                msg = (f"window stage {self.stage!r}: its store {self.spec.store.name!r} is a {want} windows store, "
                       f"but the topology's state is {kind or 'another backend'}; set TopologyConfig.state to a "
                       f"{want}:// URL, or use WindowsStoreFactory({self.spec.store.name!r}) for either")
                raise ConfigError(msg)
        self.agg = as_aggregator(self.spec.aggregator)
        self.tt = TridentTuple.of(op.in_fields)
        self.attempt = bolt.attempt
        self.txid_ms = int(bolt.conf[TXID_TIME_MS])     # the txid's time, the same on every replay
        self.collector = _WindowCollect(self.nxt.row, len(op.out_fields) - len(self.spec.key_idx), op_label(op))
        self.late_out = None if self.spec.late_stream is None else f"late-{self.spec.late_stream}"
        self.bolt, self.conf = bolt, bolt.conf
        self.rows_in: list[tuple[str, tuple[Any, ...]]] = []

    def row(self, r: tuple[Any, ...]) -> None:
        self.rows_in.append((self.bolt.partition, r))

    def finish(self) -> None:
        spec, now, in_idx = self.spec, self.txid_ms, self.op.in_idx      # type: ignore[union-attr]
        key = f"window:{self.task}"
        old = self.map.multi_get_committed([key])[0] or _empty()
        m = self._machine(old)
        m.wm.value = m.wm.seen(hand_watermark(self.conf, self.txid - 1))
        seen = self._expire(m, old, now)
        wm = m.wm.value                              # as the batches before left it (and a hand-set floor)
        late, ts_idx, key_idx = m.late, spec.timestamp_idx, spec.key_idx if spec.config.session else None
        for part, r in self.rows_in:
            ts = now if ts_idx is None else int(r[ts_idx])
            k = None if key_idx is None else tuple(r[i] for i in key_idx)
            if m.add([r[i] for i in in_idx], ts, part, k) is None:
                self._late(r)
            elif seen is not None:
                seen[_ttl_key(k)] = now
        if m.late > late:
            log.warning("window stage %r txid %d: %d late tuple(s) %s (below the watermark %s); %d so far",
                        self.stage, self.txid, m.late - late,
                        "dropped" if spec.late_stream is None else f"sent to {spec.late_stream!r}", wm, m.late)
        ref = m.wm.seen(hand_watermark(self.conf, self.txid)) if ts_idx is not None else now
        if ref is not None:
            m.reach(ref)
        rec = self._record(m, now)
        if seen is not None:      # only the keys still holding events
            held = {_ttl_key(e.key) for e in m.retained()}
            rec["seen"] = {k: v for k, v in sorted(seen.items()) if k in held}
        self.map.multi_update([key], lambda _old: rec)
        super().finish()

    def _machine(self, rec: dict[str, Any]) -> WindowMachine:
        """The machine as the record left it; the watermark in force is what its maxima give."""
        m = WindowMachine(self.spec.config, self)
        m.next_seq, m.count_since, m.next_end = rec["seq"] + 1, rec["count_since"], rec["next_end"]
        m.late, m.fired = rec["late"], rec["fired"]
        m.wm.maxima = dict(rec["maxima"])
        m.wm.value = m.wm.seen()
        if self.spec.config.session:
            m.events = [Event(e[0], e[1], e[2], tuple(e[3])) for e in rec["events"]]
        else:
            m.events = [Event(e[0], e[1], e[2]) for e in rec["events"]]
        return m

    def _expire(self, m: WindowMachine, rec: dict[str, Any], now: int) -> dict[str, int] | None:
        """With a store TTL: drop, unfired, the events of each key no tuple reached for
        ``ttl_secs`` by the txids' recorded times (``now``: this txid's); the keys' last
        times, for this txid to update. None without a TTL."""
        ttl = self.spec.store.ttl_secs
        if ttl is None:
            return None
        seen: dict[str, int] = dict(rec.get("seen") or {})
        gone = {k for k, at in seen.items() if at + int(ttl * 1000) <= now}
        if gone:
            before = len(m.events)
            m.events = [e for e in m.events if _ttl_key(e.key) not in gone]
            if not self.spec.config.session:
                m.count_since = 0
            log.info("window stage %r txid %d: %d idle key(s) expired, %d tuple(s) dropped unfired", self.stage,
                     self.txid, len(gone), before - len(m.events))
        return {k: at for k, at in seen.items() if k not in gone}

    def _record(self, m: WindowMachine, now: int) -> dict[str, Any]:
        """The record of the machine (module docstring): only the events a later window can hold."""
        events = m.retained()
        if self.spec.config.session:
            rows = [[e.seq, e.ts, e.item, list(e.key)] for e in events]
        else:
            rows = [[e.seq, e.ts, e.item] for e in events]
        return {"txid": self.txid, "now": now, "seq": m.next_seq - 1, "count_since": m.count_since,
                "next_end": m.next_end, "maxima": m.wm.maxima, "late": m.late, "fired": m.fired, "events": rows}

    def _late(self, r: tuple[Any, ...]) -> None:
        """A late tuple: on the late stream, when the window has one (else only counted)."""
        if self.late_out is not None:
            self.bolt.collector.emit((self.attempt, *r), self.late_out)

    # -- the machine's hooks ---------------------------------------------------------------------
    def held(self, e: Event) -> None:
        """Nothing to do: the record is written once, at the end of the txid."""

    def evicted(self, events: list[Event]) -> None:
        """Nothing to do: left events are not written back."""

    def fire(self, window: list[Event], start: int | None, end: int, key: Any) -> bool:
        """One window through the aggregator, which finds its bounds in ``collector.window``
        (a session's key fields are emitted first)."""
        c, agg, tt = self.collector, self.agg, self.tt
        c.current = key if key is not None else ()
        c.window = WindowInfo(start, end, None if not key else key[0] if len(key) == 1 else key)
        state = agg.init(self.attempt, c)
        for e in window:
            agg.aggregate(state, tt(tuple(e.item)), c)
        agg.complete(state, c)
        return False
