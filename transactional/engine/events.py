"""What the engine publishes: the coordinator's transitions (``Transition``), which go to
every listener of a run -- the run's ``RunResult`` (``Tally``) and the listeners its caller
adds through its ``RunWatch`` (``transactional.engine.driver``) -- and a core topology's
spout figures between commits (``SpoutFigures``). The engine imports nothing of
``transactional.ops``: ``transactional.ops.run`` adds the operator's tools (progress lines,
the status record, the status page, ``trident kill|deactivate``) from outside.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from transactional.metrics import fold_committed
from transactional.result import RunResult


@dataclass(frozen=True)
class Transition:
    """What listeners hear: ``kind`` is "launched", "processed", "failed", "committing",
    "committed", "stopped", "deactivated" or "activated"; ``txid``/``attempt`` where it applies; ``at`` the time."""

    kind: str
    txid: int
    attempt: int
    at: float
    info: dict[str, Any] = field(default_factory=dict)


class Tally:
    """The coordinator's listener that keeps the counts and latencies of ``result``'s run."""

    def __init__(self, result: RunResult) -> None:
        self.result = result

    def __call__(self, t: Transition) -> None:
        """Count ``t`` into the result."""
        result = self.result
        if t.kind == "launched":
            result.attempts += 1
        elif t.kind == "failed":
            result.add_failure(t.info["failure"].describe())
        elif t.kind == "committed":
            info = t.info
            result.first_txid = result.first_txid or t.txid
            result.last_txid = t.txid
            result.batches_committed += 1
            result.commit_latencies.add(t.at - info["launched_at"])
            if "commit_secs" in info:
                result.commit_phase_secs.add(info["commit_secs"])
            if "processing_secs" in info:
                result.processing_secs.add(info["processing_secs"])
                if result.first_processing_secs is None:
                    result.first_processing_secs = info["processing_secs"]
            for total, counts in ((result.executed, info.get("executed", {})), (result.emitted, info.get("emitted", {}))):
                for k, v in counts.items():
                    total[k] = total.get(k, 0) + v
            fold_committed(result.metrics, info.get("metrics", {}))
        elif t.kind == "stopped":
            result.stopped_because = t.info.get("reason", "")


class SpoutFigures(Protocol):
    """Who hears a core topology's spout figures between commits (``TopologyRunner.show``)."""

    def spout_counts(self, acked: dict[str, int], failed: dict[str, int], pending: dict[str, int]) -> None:
        """The spouts' tuples acked, failed and pending now, per spout."""
