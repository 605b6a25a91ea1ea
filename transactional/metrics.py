"""Metrics of your own (Storm's metrics v2, Flink's metric groups): counters, gauges,
histograms and meters registered from a bolt's, a Trident operation's or a state's context.

    class Split(BaseFunction):
        def prepare(self, conf, context):
            self.words = context.register_counter("words")
            self.lengths = context.register_histogram("sentence_length")
        def execute(self, tuple, collector):
            words = tuple[0].split()
            self.words.inc(len(words))
            self.lengths.update(len(words))
            ...

Each task keeps its metrics for one batch; they travel to the driver with the task's
report, per component and task, and are aggregated there **per committed txid**: a batch
that failed and was replayed counts once, as the committed counts of the engine do.
Counters and meters add up over tasks and committed txids; a histogram merges the values
of every committed batch; a gauge keeps each task's last value of the last committed batch
(``register_gauge(name, fn)`` calls ``fn()`` at the end of each batch). What a failed
attempt counted is dropped with it; the status page and ``/metrics`` show the committed
figures (docs/operations.md, "Metrics of your own").
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Counter", "Gauge", "Histogram", "LiveMetric", "Meter", "MetricsContext", "TaskMetrics", "collecting", "current",
           "fold_committed", "merge_component", "merge_snapshots", "quantile"]


class Counter:
    """A count that only goes up: ``inc(n=1)``."""

    kind = "counter"

    def __init__(self) -> None:
        self.count = 0

    def inc(self, n: int = 1) -> None:
        """Add ``n`` (never negative)."""
        if n < 0:
            msg = f"a counter only goes up; inc({n}) -- use a gauge for a value that goes down"
            raise ValueError(msg)
        self.count += n

    def snapshot(self) -> dict[str, Any]:
        """Its figures, as the task reports them."""
        return {"kind": self.kind, "count": self.count}


class Meter(Counter):
    """Events over time: ``mark(n=1)``; the page shows their rate over committed batches."""

    kind = "meter"

    def mark(self, n: int = 1) -> None:
        """``n`` more events."""
        self.inc(n)


class Gauge:
    """A value that goes up and down: ``set(v)``, or a function read at the end of the batch."""

    kind = "gauge"

    def __init__(self, fn: Callable[[], float] | None = None) -> None:
        self.fn = fn
        self.value: float | None = None

    def set(self, value: float) -> None:
        """The gauge's value now."""
        self.value = float(value)

    def snapshot(self) -> dict[str, Any]:
        """Its value now (its function's, when it has one)."""
        value = self.fn() if self.fn is not None else self.value
        return {"kind": self.kind, "value": None if value is None else float(value)}


#: histogram buckets: a value v > 0 falls in the bucket of the smallest power of two >= v
def _bucket(v: float) -> int:
    return -1075 if v <= 0 else math.ceil(math.log2(v))


class Histogram:
    """A distribution of values: ``update(v)``; kept as count, sum, min, max and
    power-of-two buckets (so tasks and batches merge exactly)."""

    kind = "histogram"

    def __init__(self) -> None:
        self.count, self.sum = 0, 0.0
        self.min: float | None = None
        self.max: float | None = None
        self.buckets: dict[int, int] = {}

    def update(self, value: float) -> None:
        """One more value."""
        v = float(value)
        self.count += 1
        self.sum += v
        self.min = v if self.min is None else min(self.min, v)
        self.max = v if self.max is None else max(self.max, v)
        b = _bucket(v)
        self.buckets[b] = self.buckets.get(b, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """Count, sum, min, max and the buckets' counts."""
        return {"kind": self.kind, "count": self.count, "sum": self.sum, "min": self.min, "max": self.max,
                "buckets": dict(self.buckets)}


_KINDS: dict[str, type[Any]] = {"counter": Counter, "meter": Meter, "histogram": Histogram, "gauge": Gauge}


class TaskMetrics:
    """The metrics one task registered in one batch (the registry behind ``register_*``)."""

    def __init__(self, component: str, task: int) -> None:
        self.component, self.task = component, task
        self.metrics: dict[str, Any] = {}

    def register(self, kind: str, name: str, *args: Any) -> Any:
        """The metric ``name`` of ``kind``, made on first use; the same object afterwards in
        this batch. A name already taken by another kind is a ``ValueError``."""
        if not isinstance(name, str) or not name:
            msg = f"a metric's name is a non-empty string; got {name!r}"
            raise ValueError(msg)
        found = self.metrics.get(name)
        if found is None:
            found = self.metrics[name] = _KINDS[kind](*args)
        elif found.kind != kind:
            msg = f"{self.component!r}: metric {name!r} is a {found.kind}, not a {kind}"
            raise ValueError(msg)
        elif kind == "gauge" and args:
            found.fn = args[0]
        return found

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every metric's figures now (a gauge's function is read here)."""
        return {name: m.snapshot() for name, m in self.metrics.items()}


_current: contextvars.ContextVar[TaskMetrics | None] = contextvars.ContextVar("trident_task_metrics", default=None)


def current() -> TaskMetrics | None:
    """The registry of the task running in this thread (None outside a task)."""
    return _current.get()


@contextmanager
def collecting(component: str, task: int) -> Iterator[TaskMetrics]:
    """Run a task with a fresh registry as ``current()``; the caller reports its snapshot."""
    registry = TaskMetrics(component, task)
    token = _current.set(registry)
    try:
        yield registry
    finally:
        _current.reset(token)


def _registry() -> TaskMetrics:
    registry = current()
    if registry is None:
        msg = "metrics are registered and updated while a task runs (prepare, execute, finish_batch, a state's calls)"
        raise RuntimeError(msg)
    return registry


class LiveMetric:
    """What ``register_*`` returns: a handle that updates the metric ``name`` in the registry of
    the task running at the time of each call, so a handle kept across batches (a state's, made
    once per process) counts in the batch that uses it."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name

    def _metric(self) -> Any:
        return _registry().register(self.kind, self.name)

    def inc(self, n: int = 1) -> None:
        """Counter: add ``n``."""
        self._metric().inc(n)

    def mark(self, n: int = 1) -> None:
        """Meter: ``n`` more events."""
        self._metric().mark(n)

    def update(self, value: float) -> None:
        """Histogram: one more value."""
        self._metric().update(value)

    def set(self, value: float) -> None:
        """Gauge: its value now."""
        self._metric().set(value)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r}>"


class MetricsContext:
    """``register_counter``/``register_gauge``/``register_histogram``/``register_meter`` for a
    context (a bolt's ``TopologyContext``, a Trident operation's, a state factory's
    ``metrics`` argument): each counts in the registry of the task running at each call."""

    def register_counter(self, name: str) -> LiveMetric:
        """A counter (Storm's ``registerCounter``): ``inc(n)``; summed per committed txid."""
        _registry().register("counter", name)
        return LiveMetric("counter", name)

    def register_meter(self, name: str) -> LiveMetric:
        """A meter (Storm's ``registerMeter``): ``mark(n)``; its rate over committed batches."""
        _registry().register("meter", name)
        return LiveMetric("meter", name)

    def register_histogram(self, name: str) -> LiveMetric:
        """A histogram (Storm's ``registerHistogram``): ``update(value)``."""
        _registry().register("histogram", name)
        return LiveMetric("histogram", name)

    def register_gauge(self, name: str, fn: Callable[[], float] | None = None) -> LiveMetric:
        """A gauge (Storm's ``registerGauge``): ``set(v)``, or ``fn()`` read at the end of the
        batch it was registered in."""
        _registry().register("gauge", name, fn)
        return LiveMetric("gauge", name)


def _merge_one(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two snapshots of one metric (over tasks or batches) as one; a gauge takes ``b``'s value."""
    if a["kind"] != b["kind"]:
        return b
    if a["kind"] in ("counter", "meter"):
        return {"kind": a["kind"], "count": a["count"] + b["count"]}
    if a["kind"] == "gauge":
        return b if b.get("value") is not None else a
    buckets = dict(a["buckets"])
    for k, n in b["buckets"].items():
        buckets[k] = buckets.get(k, 0) + n
    mins = [m for m in (a["min"], b["min"]) if m is not None]
    maxs = [m for m in (a["max"], b["max"]) if m is not None]
    return {"kind": "histogram", "count": a["count"] + b["count"], "sum": a["sum"] + b["sum"],
            "min": min(mins) if mins else None, "max": max(maxs) if maxs else None, "buckets": buckets}


def merge_snapshots(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Metric name -> snapshot, ``b`` folded into ``a`` (a new dict)."""
    out = dict(a)
    for name, snap in b.items():
        out[name] = _merge_one(out[name], snap) if name in out else snap
    return out


def merge_component(per_task: dict[tuple[str, int], dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """(component, task) -> snapshots, as component -> name -> snapshot; gauges keep each
    task's value under ``tasks``."""
    out: dict[str, dict[str, Any]] = {}
    for (component, task), snaps in sorted(per_task.items()):
        mine = out.setdefault(component, {})
        for name, snap in snaps.items():
            if snap["kind"] == "gauge":
                g = mine.setdefault(name, {"kind": "gauge", "tasks": {}})
                g["tasks"][task] = snap["value"]
            else:
                mine[name] = _merge_one(mine[name], snap) if name in mine else snap
    return out


def fold_committed(total: dict[str, dict[str, Any]], batch: dict[str, dict[str, Any]]) -> None:
    """Add one committed txid's per-component metrics ``batch`` into the run's ``total`` (in
    place): counts add, histograms merge, a gauge's tasks take the batch's values."""
    for component, metrics in batch.items():
        mine = total.setdefault(component, {})
        for name, snap in metrics.items():
            if snap["kind"] == "gauge" and name in mine:
                mine[name] = {"kind": "gauge", "tasks": {**mine[name].get("tasks", {}), **snap["tasks"]}}
            else:
                mine[name] = _merge_one(mine[name], snap) if name in mine else snap


def quantile(snap: dict[str, Any], q: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` of a histogram snapshot (within
    a factor of two of the true value; exact min and max are kept beside it)."""
    if not snap.get("count"):
        return None
    rank, seen = q * snap["count"], 0
    for b in sorted(snap["buckets"]):
        seen += snap["buckets"][b]
        if seen >= rank:
            bound = 0.0 if b == -1075 else 2.0 ** b
            return float(min(max(bound, snap["min"]), snap["max"]))
    return float(snap["max"])
