"""``IntervalJoinProc``: a Trident interval join in the commit phase (``TridentTopology.interval_join``;
docs/windows.md).

Two streams, ``a`` (side 0) and ``b`` (side 1), joined where the keys are equal and
``b.ts - lower <= a.ts <= b.ts + upper``. A late row goes on the late stream as
``("a" or "b", [its values])``. Per txid, in order: read the task's record as
txid ``t-1`` left it (``multi_get_committed``), take ``t``'s rows in their fixed order --
a row below the watermark is late (counted, and sent on the late stream when there is
one); any other row is emitted joined with every stored row of the other side that
matches, then stored -- so each pair is emitted once, when its later row arrives. Then
the watermark advances (the least, over the partitions of both sides, of the greatest
time each sent, minus the lag) and the rows no later row can match leave: an ``a`` row
once ``a.ts + lower`` is below it, a ``b`` row once ``b.ts + upper`` is. The record is
written once for ``t`` with the txid's other maps, so a replay emits the same pairs.

The record (JSON): ``{"txid", "maxima", "late", "rows": [[side, ts, key, values], ...]}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transactional.engine.window_core import watermark
from trident.runtime.processors import JoinProc, Proc
from trident.runtime.window_proc import hand_watermark

if TYPE_CHECKING:
    from trident.runtime.bolt import TridentBolt

log = logging.getLogger("trident")


@dataclass(frozen=True)
class IntervalJoinSpec:
    """What an interval join stage runs: per side (key positions, timestamp position), the
    bounds and lag in ms, the store's map name and the late stream."""

    keys: tuple[tuple[int, ...], tuple[int, ...]]
    ts: tuple[int, int]
    lower: int
    upper: int
    lag: int
    store: str
    late_stream: str | None = None


class IntervalJoinProc(JoinProc):
    """The interval join of one task (module docstring); rows arrive by side."""

    def open(self, bolt: TridentBolt) -> None:
        Proc.open(self, bolt)
        assert self.op is not None
        self.spec: IntervalJoinSpec = self.op.fn
        self.map = bolt.context.map_state(self.spec.store, "transactional")
        self.bolt, self.attempt = bolt, bolt.attempt
        self.rows_in: list[tuple[int, str, tuple[Any, ...]]] = []
        self.late_out = None if self.spec.late_stream is None else f"late-{self.spec.late_stream}"

    def side_row(self, side: int, r: tuple[Any, ...]) -> None:
        self.rows_in.append((side, self.bolt.partition, r))

    def finish(self) -> None:
        spec, key = self.spec, f"ijoin:{self.task}"
        rec = self.map.multi_get_committed([key])[0] or {"txid": 0, "maxima": {}, "late": 0, "rows": []}
        rows: list[list[Any]] = [list(x) for x in rec["rows"]]
        maxima: dict[str, int] = dict(rec["maxima"])
        wm = watermark(maxima, spec.lag, hand_watermark(self.bolt.conf, self.txid - 1))
        late = 0
        index: dict[tuple[int, str], list[list[Any]]] = {}      # (side, key) -> its stored rows
        for x in rows:
            index.setdefault((x[0], repr(x[2])), []).append(x)
        for side, part, r in self.rows_in:
            ts = int(r[spec.ts[side]])
            if wm is not None and ts < wm:
                late += 1
                if self.late_out is not None:
                    self.bolt.collector.emit((self.attempt, "ab"[side], list(r)), self.late_out)
                continue
            maxima[f"{side}/{part}"] = max(ts, maxima.get(f"{side}/{part}", ts))
            k = [r[i] for i in spec.keys[side]]
            self._match(side, ts, r, index.get((1 - side, repr(k)), ()))
            row = [side, ts, k, list(r)]
            rows.append(row)
            index.setdefault((side, repr(k)), []).append(row)
        wm = watermark(maxima, spec.lag, hand_watermark(self.bolt.conf, self.txid))
        if wm is not None:
            rows = [x for x in rows if x[1] + (spec.lower if x[0] == 0 else spec.upper) >= wm]
        if late:
            log.warning("interval join %r txid %d: %d late tuple(s) (below the watermark)", self.stage, self.txid, late)
        new = {"txid": self.txid, "maxima": maxima, "late": rec["late"] + late, "rows": rows}
        self.map.multi_update([key], lambda _old: new)
        Proc.finish(self)

    def _match(self, side: int, ts: int, r: tuple[Any, ...], others: Any) -> None:
        """Emit ``r`` joined with every stored row of the other side with its key
        (``others``) whose time matches (a's fields first)."""
        assert self.nxt is not None
        lo, hi = self.spec.lower, self.spec.upper
        for _, ots, _, ovalues in others:
            a_ts, b_ts = (ts, ots) if side == 0 else (ots, ts)
            if b_ts - lo <= a_ts <= b_ts + hi:
                self.nxt.row((*r, *ovalues) if side == 0 else (*ovalues, *r))
