"""``WindowProc``: a Trident window stage in the commit phase (``trident.windowing``).

Per txid ``t``, in order: read the task's window record as txid ``t-1`` left it
(``multi_get_committed``), add ``t``'s rows in their fixed order (count triggers fire as
they come), advance the watermark (event time: the least, over the upstream partitions --
source, stream and task of each payload -- that sent tuples, of the greatest event time
each sent, minus the lag) or take the txid's time (processing
time: the driver's clock when ``t``'s first commit began, recorded with ``t``'s pending
metadata and reused by every replay of ``t``: ``CoordinatorStore.commit_time``), fire the duration
windows whose end it reached, then store the record once for ``t`` (``multi_update``: a
transactional map skips a txid it already holds). Each fired window's tuples go through
the aggregator; what it emits flows on.

The record (JSON): ``{"txid", "now", "seq", "count_since", "next_end", "maxima": {"<source>/<stream>/<task>":
greatest ts}, "late", "fired", "events": [[seq, ts, [values...]], ...]}``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from transactional.engine.commit import TXID_TIME_MS
from transactional.engine.sessions import is_late, split_sessions
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


def watermark(maxima: dict[str, int], lag: int, floor: int | None = None) -> int | None:
    """The least, over the partitions seen, of the greatest event time each sent, minus
    ``lag`` (at least ``floor``, a hand-set watermark); None before any tuple."""
    wm = min(maxima.values()) - lag if maxima else None
    return wm if floor is None or (wm is not None and wm >= floor) else floor


class WindowProc(Proc):
    """The window of one task of a window stage (module docstring)."""

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
            kind = type(getattr(self.map, "backing", None)).__name__.lower()
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
        cfg, spec = self.spec.config, self.spec
        key = f"window:{self.task}"
        rec = self.map.multi_get_committed([key])[0] or _empty()
        rec = {**rec, "events": [list(e) for e in rec["events"]], "maxima": dict(rec["maxima"])}
        now = self.txid_ms
        self.rec, self.now = rec, now
        late = 0
        maxima: dict[str, int] = rec["maxima"]
        wm = watermark(maxima, spec.lag, hand_watermark(self.conf, self.txid - 1))   # as the batches before left it
        for part, r in self.rows_in:
            if spec.timestamp_idx is not None:
                ts = int(r[spec.timestamp_idx])
                if is_late(ts, cfg.length, wm) if spec.session else (wm is not None and ts < wm):
                    late += 1
                    self._late(r)
                    continue
                if ts > maxima.get(part, ts - 1):
                    maxima[part] = ts
            else:
                ts = now
            rec["seq"] += 1
            rec["events"].append([rec["seq"], ts, list(r[i] for i in self.op.in_idx),   # type: ignore[union-attr]
                                  *([[r[i] for i in spec.key_idx]] if spec.session else [])])
            if cfg.count:
                self._count(ts)
        if late:
            rec["late"] += late
            log.warning("window stage %r txid %d: %d late tuple(s) %s (below the watermark %s); %d so far",
                        self.stage, self.txid, late,
                        "dropped" if spec.late_stream is None else f"sent to {spec.late_stream!r}", wm, rec["late"])
        if not cfg.count:
            ref = watermark(maxima, spec.lag, hand_watermark(self.conf, self.txid)) \
                if spec.timestamp_idx is not None else now
            if ref is not None:
                (self._fire_sessions if spec.session else self._fire_time)(ref)
        rec["txid"], rec["now"] = self.txid, now
        self.map.multi_update([key], lambda _old: rec)
        super().finish()

    def _late(self, r: tuple[Any, ...]) -> None:
        """A late tuple: on the late stream, when the window has one (else only counted)."""
        if self.late_out is not None:
            self.bolt.collector.emit((self.attempt, *r), self.late_out)

    def _count(self, ts: int) -> None:
        """One more tuple for a count trigger: as Storm's ``WindowManager``, every ``sliding``
        tuples what is beyond the length leaves and the rest fires; only the last ``length -
        sliding`` can be in a later window."""
        cfg, rec = self.spec.config, self.rec
        rec["count_since"] += 1
        if rec["count_since"] >= cfg.sliding:
            rec["count_since"] = 0
            self._fire(rec["events"][-cfg.length:], None, ts)
            keep = cfg.length - cfg.sliding
            rec["events"] = rec["events"][-keep:] if keep else []

    def _fire_sessions(self, ref: int) -> None:
        """Every session (``transactional.engine.sessions``; events ``[seq, ts, values,
        key]``) whose end the watermark reached fires, emitted after its key's fields, and
        leaves the record."""
        rec, gone = self.rec, set[int]()
        for s in split_sessions(rec["events"], lambda e: e[1], lambda e: tuple(e[3]), self.spec.config.length):
            if s.end <= ref:
                self._fire(s.members, s.start, s.end, s.key)
                gone.update(e[0] for e in s.members)
        if gone:
            rec["events"] = [e for e in rec["events"] if e[0] not in gone]

    def _fire_time(self, ref: int) -> None:
        cfg, rec = self.spec.config, self.rec
        step = cfg.sliding
        while rec["events"]:
            first = (min(e[1] for e in rec["events"]) // step + 1) * step
            if rec["next_end"] is None or rec["next_end"] < first:
                rec["next_end"] = first
            end = rec["next_end"]
            if end > ref:
                break
            start = end - cfg.length
            window = [e for e in rec["events"] if start <= e[1] < end]
            if window:
                self._fire(window, start, end)
            rec["events"] = [e for e in rec["events"] if e[1] >= end + step - cfg.length]
            rec["next_end"] = end + step

    def _fire(self, window: list[list[Any]], start: int | None, end: int, key: Any = None) -> None:
        """One window through the aggregator, which finds its bounds in ``collector.window``."""
        self.rec["fired"] += 1
        c, agg, tt = self.collector, self.agg, self.tt
        c.current = key if key is not None else ()          # a group's fields come first
        c.window = WindowInfo(start, end, None if not key else key[0] if len(key) == 1 else key)
        state = agg.init(self.attempt, c)
        for e in window:
            agg.aggregate(state, tt(tuple(e[2])), c)
        agg.complete(state, c)
