"""``RunResult``: what ``run_topology`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by nearest rank; None for no values."""
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
    wall_secs: float = 0.0
    commit_latencies: list[float] = field(default_factory=list)   # batch emitted -> committed, s
    commit_phase_secs: list[float] = field(default_factory=list)  # time in the commit phase, s
    processing_secs: list[float] = field(default_factory=list)    # processing job of the committed attempt, s
    stopped_because: str = ""
    _states: Any = field(default=None, repr=False)

    @property
    def tuples(self) -> int:
        """Tuples emitted by the spout in committed batches."""
        return sum(self.emitted.get(c, 0) for c in self.emitted if c == self._spout_id)

    _spout_id: str = field(default="", repr=False)

    def map_state(self, name: str, opaque: bool | None = None) -> Any:
        """The map ``name`` the committers used (``TransactionalMap``/``OpaqueMap``), to
        read values: ``result.map_state("counts").get("cow")``."""
        return self._states.existing(name, opaque)

    def latency_ms(self, q: float) -> float | None:
        v = percentile(self.commit_latencies, q)
        return None if v is None else v * 1000

    def summary(self) -> dict:
        """A JSON-friendly summary."""
        return {
            "topology_id": self.topology_id, "first_txid": self.first_txid, "last_txid": self.last_txid,
            "batches_committed": self.batches_committed, "attempts": self.attempts,
            "failed_attempts": len(self.failures), "spout_tuples": self.tuples,
            "wall_secs": round(self.wall_secs, 3),
            "tuples_per_sec": round(self.tuples / self.wall_secs, 1) if self.wall_secs else None,
            "commit_latency_p50_ms": _r(self.latency_ms(50)), "commit_latency_p99_ms": _r(self.latency_ms(99)),
            "stopped_because": self.stopped_because,
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)
