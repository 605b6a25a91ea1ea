"""``RunResult``: what ``run_topology`` returns."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from transactional.engine.coordinator import Transition
from transactional.metrics import fold_committed, quantile
from transactional.redaction import redact, redact_text


class Histogram:
    """A bounded histogram of non-negative durations (seconds): log-spaced buckets 1%
    wide, so memory stays fixed however long the run; percentiles are within 1%.

    >>> h = Histogram(); h.extend([0.1, 0.2, 0.3, 0.4]); h.count, round(h.percentile(50), 2)
    (4, 0.2)
    """

    GROWTH = 1.01
    FLOOR = 1e-6

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, value: float) -> None:
        """Count one duration (negative values count as 0)."""
        v = max(value, 0.0)
        i = -1 if v < self.FLOOR else int(math.log(v / self.FLOOR, self.GROWTH))
        self.buckets[i] = self.buckets.get(i, 0) + 1
        self.count += 1
        self.total += v
        self.max = max(self.max, v)

    def extend(self, values: Iterable[float]) -> None:
        """``add`` each of ``values``."""
        for v in values:
            self.add(v)

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) by nearest rank; None when empty."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q / 100 * self.count))
        seen = 0
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                return 0.0 if i < 0 else min(self.max, self.FLOOR * self.GROWTH ** (i + 0.5))
        return self.max

    def __len__(self) -> int:
        return self.count


def percentile(values: list[float] | Histogram, q: float) -> float | None:
    """The ``q``-th percentile (0-100) by nearest rank; None for no values."""
    if isinstance(values, Histogram):
        return values.percentile(q)
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))
    return s[k]


@dataclass
class RunResult:
    """Summary of one run.

    ``batches_committed`` counts txids committed by this run (``first_txid`` ..
    ``last_txid``); ``attempts`` counts processing attempts launched (a replay is a new
    attempt); ``failures`` describes every failed attempt (txid, component, task, cause).
    ``executed``/``emitted`` count tuples per component over committed attempts.
    """

    topology_id: str
    first_txid: int | None = None
    last_txid: int = 0
    batches_committed: int = 0
    attempts: int = 0
    failures: list[str] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    emitted: dict[str, int] = field(default_factory=dict)
    #: the user's metrics of committed txids: component -> name -> figures (``transactional.metrics``)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_secs: float = 0.0
    commit_latencies: Histogram = field(default_factory=Histogram)   # attempt launched -> committed, s
    commit_phase_secs: Histogram = field(default_factory=Histogram)  # time in the commit phase, s
    processing_secs: Histogram = field(default_factory=Histogram)    # processing job of the committed attempt, s
    first_processing_secs: float | None = None                        # the first committed batch's job, s
    stopped_because: str = ""
    acked: dict[str, int] = field(default_factory=dict)        # core topologies: spout tuples acked, per spout
    failed: dict[str, int] = field(default_factory=dict)       # ... failed (explicitly or timed out), per spout
    timed_out: dict[str, int] = field(default_factory=dict)    # ... of which timed out
    pending: dict[str, int] = field(default_factory=dict)      # ... tracked and undecided when the run ended
    checkpoints: int = 0                                       # ... checkpoints of stateful bolts' states
    _states: Any = field(default=None, repr=False)

    @property
    def tuples(self) -> int:
        """Tuples emitted by the spouts in committed batches."""
        return sum(n for c, n in self.emitted.items() if c in self._spout_ids)

    _spout_ids: tuple[str, ...] = field(default=(), repr=False)

    def map_state(self, name: str, opaque: bool | str | None = None) -> Any:
        """The map ``name`` the committers used (``TransactionalMap``/``OpaqueMap``), to
        read values: ``result.map_state("counts").get("cow")``."""
        return self._states.existing(name, opaque)

    def key_value_state(self, component: str) -> dict[Any, Any]:
        """Core topologies: every key and value of a stateful bolt's ``KeyValueState``s
        (all its tasks) as the run left them: ``result.key_value_state("count")["cow"]``."""
        if not hasattr(self._states, "items"):
            msg = f"{self.topology_id!r} has no stateful bolt state to read"
            raise KeyError(msg)
        items: dict[Any, Any] = self._states.items(component)
        return items

    def on_transition(self, t: Transition) -> None:
        """The coordinator's listener: keeps the counts and latencies of the run."""
        if t.kind == "launched":
            self.attempts += 1
        elif t.kind == "failed":
            self.failures.append(t.info["failure"].describe())
        elif t.kind == "committed":
            info = t.info
            self.first_txid = self.first_txid or t.txid
            self.last_txid = t.txid
            self.batches_committed += 1
            self.commit_latencies.add(t.at - info["launched_at"])
            if "commit_secs" in info:
                self.commit_phase_secs.add(info["commit_secs"])
            if "processing_secs" in info:
                self.processing_secs.add(info["processing_secs"])
                if self.first_processing_secs is None:
                    self.first_processing_secs = info["processing_secs"]
            for total, counts in ((self.executed, info.get("executed", {})), (self.emitted, info.get("emitted", {}))):
                for k, v in counts.items():
                    total[k] = total.get(k, 0) + v
            fold_committed(self.metrics, info.get("metrics", {}))
        elif t.kind == "stopped":
            self.stopped_because = t.info.get("reason", "")

    def metric(self, component: str, name: str) -> Any:
        """A metric of your own over the committed txids (``transactional.metrics``): a counter's
        or meter's count, a gauge's ``{task: value}``, a histogram's figures (count, sum, min,
        max, p50, p99); ``KeyError`` naming what was registered when there is no such metric."""
        found = self.metrics.get(component, {}).get(name)
        if found is None:
            have = {c: sorted(m) for c, m in self.metrics.items()}
            msg = f"no metric {name!r} of component {component!r}; registered: {have}"
            raise KeyError(msg)
        if found["kind"] in ("counter", "meter"):
            return found["count"]
        if found["kind"] == "gauge":
            return dict(found["tasks"])
        return {"count": found["count"], "sum": found["sum"], "min": found["min"], "max": found["max"],
                "p50": quantile(found, 0.5), "p99": quantile(found, 0.99)}

    def latency_ms(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100) of commit latency (attempt launched to committed) in
        milliseconds; None when nothing was committed."""
        v = percentile(self.commit_latencies, q)
        return None if v is None else v * 1000

    def __repr__(self) -> str:
        """The dataclass's repr, redacted: failures and the reason the run stopped may
        quote a setting (``transactional.redaction``)."""
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr)
        return redact_text(f"{type(self).__name__}({fields})")

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly summary (redacted: ``transactional.redaction``)."""
        summary: dict[str, Any] = redact({
            "topology_id": self.topology_id, "first_txid": self.first_txid, "last_txid": self.last_txid,
            "batches_committed": self.batches_committed, "attempts": self.attempts,
            "failed_attempts": len(self.failures), "spout_tuples": self.tuples,
            "wall_secs": round(self.wall_secs, 3),
            "tuples_per_sec": round(self.tuples / self.wall_secs, 1) if self.wall_secs else None,
            "commit_latency_p50_ms": _r(self.latency_ms(50)), "commit_latency_p99_ms": _r(self.latency_ms(99)),
            "stopped_because": self.stopped_because,
            "executed": dict(self.executed), "emitted": dict(self.emitted),
            **({"acked": self.acked, "failed": self.failed, "timed_out": self.timed_out, "pending": self.pending,
                "checkpoints": self.checkpoints} if self.acked else {}),
        })
        return summary


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)
