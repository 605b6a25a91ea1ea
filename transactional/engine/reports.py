"""Task reports: failures, counters and an opaque spout's actual metadata, as data.

Tasks never raise across the executor boundary: each adds a *report* to the job's
accumulator, merged with ``merge_reports``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transactional.engine.task import TaskFailure
from transactional.metrics import merge_component
from transactional.tuples import TransactionAttempt

TaskKey = tuple[str, int]     # (component, task)


@dataclass
class TaskReport:
    """What tasks report to the driver, per (component, task): failures (a list), the
    tuples each executed and emitted, an opaque emitter's actual metadata (spout ->
    partition -> what it emitted) with ``runs`` (how many times Spark ran that emitter
    task), a core task's report to the ackers (``acks``), the seconds each ran (``busy``,
    for the status page's process latency and capacity) and the user's metrics
    (``transactional.metrics``)."""

    failures: list[TaskFailure] = field(default_factory=list)
    executed: dict[TaskKey, int] = field(default_factory=dict)
    emitted: dict[TaskKey, int] = field(default_factory=dict)
    actual: dict[str, dict[Any, Any]] = field(default_factory=dict)
    runs: dict[TaskKey, int] = field(default_factory=dict)
    acks: dict[TaskKey, Any] = field(default_factory=dict)
    busy: dict[TaskKey, float] = field(default_factory=dict)
    metrics: dict[TaskKey, dict[str, Any]] = field(default_factory=dict)

    def per_component(self) -> PhaseReport:
        """The counters summed per component (the failures as they are)."""
        return PhaseReport(self.failures, per_component(self.executed), per_component(self.emitted),
                           per_component(self.busy), merge_component(self.metrics), self.acks)


@dataclass
class PhaseReport:
    """What a phase's tasks reported, per component: failures, tuples executed and
    emitted, seconds busy, the user's metrics; and a core topology's reports to the
    ackers, per (component, task)."""

    failures: list[TaskFailure]
    executed: dict[str, int]
    emitted: dict[str, int]
    busy: dict[str, float]
    metrics: dict[str, dict[str, Any]]
    acks: dict[TaskKey, Any] = field(default_factory=dict)


def empty_report() -> TaskReport:
    """A report of nothing (an accumulator's zero)."""
    return TaskReport()


def merge_reports(a: TaskReport, b: TaskReport) -> TaskReport:
    """Fold report ``b`` into ``a``: failures (list), counters per (component, task), actual
    metadata (spout -> partition -> what it emitted). A task Spark runs again (a lost
    executor) reports again what it reported before: counters and metadata are set, not
    added, so they do not double."""
    a.failures.extend(b.failures)
    a.executed.update(b.executed)
    a.emitted.update(b.emitted)
    a.acks.update(b.acks)
    a.busy.update(b.busy)
    a.metrics.update(b.metrics)
    for k, n in b.runs.items():
        a.runs[k] = a.runs.get(k, 0) + n
    for spout, parts in b.actual.items():
        a.actual.setdefault(spout, {}).update(parts)
    return a


def report(component: str, task: int, executed: int = 0, emitted: int = 0, failure: TaskFailure | None = None,
           actual: dict[Any, Any] | None = None, acks: Any = None, busy: float = 0.0,
           metrics: dict[str, Any] | None = None) -> TaskReport:
    """One task's report: its failure, or its counters (and an opaque emitter's actual
    metadata, counted in ``runs``; ``acks``, ``busy``, ``metrics``: see ``TaskReport``)."""
    if failure is not None:
        return TaskReport(failures=[failure])
    key = (component, task)
    return TaskReport(executed={key: executed}, emitted={key: emitted}, busy={key: busy},
                      metrics={key: metrics} if metrics else {},
                      actual={component: actual} if actual is not None else {},
                      runs={key: 1} if actual is not None else {},
                      acks={key: acks} if acks is not None else {})


def rerun_failures(r: TaskReport, attempt: TransactionAttempt) -> list[TaskFailure]:
    """Spark runs a task again when the executor holding its output is lost, and both runs
    report. An opaque emitter may read a different range the second time (retention moved
    on, more data arrived), and consumers that read the first run's output would see a
    batch mixing two readings: an opaque emitter task that ran twice fails the attempt."""
    return [TaskFailure(c, t, attempt.txid, attempt.attempt_id, "failed", "EmitterRerun",
                        f"opaque emitter {c!r} task {t} ran {n} times in this attempt (Spark re-ran it "
                        "after losing an executor); it may have read a different range, so the attempt "
                        "is replayed", "")
            for (c, t), n in sorted(r.runs.items()) if n > 1]


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
