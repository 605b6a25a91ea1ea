"""Task reports: failures, counters and an opaque spout's actual metadata, as data.

Tasks never raise across the executor boundary: each adds a *report* to the job's
accumulator, merged with ``merge_reports``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transactional.engine.task import TaskFailure
from transactional.tuples import TransactionAttempt


def empty_report() -> dict[str, Any]:
    return {"failures": [], "executed": {}, "emitted": {}, "actual": {}, "runs": {}, "acks": {}, "busy": {},
            "metrics": {}}


def merge_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Fold report ``b`` into ``a``: failures (list), counters per (component, task), actual
    metadata (spout -> partition -> what it emitted). A task Spark runs again (a lost
    executor) reports again what it reported before: counters and metadata are set, not
    added, so they do not double."""
    a["failures"].extend(b["failures"])
    for k in ("executed", "emitted", "acks", "busy", "metrics"):
        a.setdefault(k, {}).update(b.get(k, {}))
    for k, n in b.get("runs", {}).items():
        a["runs"][k] = a["runs"].get(k, 0) + n
    for spout, parts in b["actual"].items():
        a["actual"].setdefault(spout, {}).update(parts)
    return a


def report(component: str, task: int, executed: int = 0, emitted: int = 0, failure: TaskFailure | None = None,
           actual: dict[Any, Any] | None = None, acks: Any = None, busy: float = 0.0,
           metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """One task's report: its failure, or its counters (and an opaque emitter's actual
    metadata, with ``runs``: how many times Spark ran that emitter task; a core task's
    report to the ackers, ``acks``, kept per task like the counters; ``busy``: the
    seconds the task ran, for the status page's process latency and capacity; ``metrics``:
    the user's metrics of the task, ``transactional.metrics``)."""
    if failure is not None:
        return {"failures": [failure], "executed": {}, "emitted": {}, "actual": {}, "runs": {}, "acks": {}, "busy": {},
                "metrics": {}}
    return {"failures": [], "executed": {(component, task): executed}, "emitted": {(component, task): emitted},
            "busy": {(component, task): busy}, "metrics": {(component, task): metrics} if metrics else {},
            "actual": {component: actual} if actual is not None else {},
            "runs": {(component, task): 1} if actual is not None else {},
            "acks": {(component, task): acks} if acks is not None else {}}


def rerun_failures(r: dict[str, Any], attempt: TransactionAttempt) -> list[TaskFailure]:
    """Spark runs a task again when the executor holding its output is lost, and both runs
    report. An opaque emitter may read a different range the second time (retention moved
    on, more data arrived), and consumers that read the first run's output would see a
    batch mixing two readings: an opaque emitter task that ran twice fails the attempt."""
    return [TaskFailure(c, t, attempt.txid, attempt.attempt_id, "failed", "EmitterRerun",
                        f"opaque emitter {c!r} task {t} ran {n} times in this attempt (Spark re-ran it "
                        "after losing an executor); it may have read a different range, so the attempt "
                        "is replayed", "")
            for (c, t), n in sorted(r.get("runs", {}).items()) if n > 1]


def per_component(counts: dict[tuple[str, int], Any]) -> dict[str, Any]:
    """Counters per (component, task) summed per component."""
    out: dict[str, Any] = {}
    for (component, _), n in counts.items():
        out[component] = out.get(component, 0) + n
    return out


@dataclass
class ProcessingResult:
    """What an attempt's processing phase returns to the driver."""

    attempt: TransactionAttempt
    records: list[Any] = field(default_factory=list)       # (key, payload) for commit components
    failures: list[TaskFailure] = field(default_factory=list)
    executed: dict[str, int] = field(default_factory=dict)
    emitted: dict[str, int] = field(default_factory=dict)
    actual: dict[Any, Any] = field(default_factory=dict)
    seconds: float = 0.0
    kept: Any = None          # commits on executors: the records, kept where they are
    acks: dict[tuple[str, int], Any] = field(default_factory=dict)   # core topologies: (component, task) -> its report to the ackers
    busy: dict[str, float] = field(default_factory=dict)   # component -> seconds its tasks ran
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)   # component -> the user's metrics
