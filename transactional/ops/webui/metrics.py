"""Prometheus metrics of one run, on a registry of its own (docs/operations.md lists them).

Every series carries the label ``topology``; per-component ones add ``component``. Counts
and gauges are read from the ``RunObserver`` when scraped (one collector); durations are
histograms fed as transitions and timed state calls arrive. A registry per run, never
prometheus-client's global one: several runs in one process (tests, notebooks) each get
their own series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from transactional.ops.webui.observer import RunObserver

__all__ = ["RunMetrics", "CONTENT_TYPE", "LATENCY_BUCKETS", "CALL_BUCKETS"]

#: the Content-Type of ``/metrics`` (Prometheus text format 0.0.4)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: buckets of the batch durations (seconds)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
#: buckets of ZooKeeper and Redis calls (seconds)
CALL_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RunMetrics:
    """The metrics of one run: ``registry`` (a ``CollectorRegistry``) and ``exposition()``,
    the text ``/metrics`` serves. Made by ``RunObserver``; not for direct use."""

    def __init__(self, observer: RunObserver) -> None:
        self.topology_id = tid = observer.topology_id
        self.registry = CollectorRegistry()
        reg = self.registry
        self.processing = Histogram(
            "trident_processing_seconds", "Processing phase (one Spark job) of each committed attempt",
            ["topology"], registry=reg, buckets=LATENCY_BUCKETS).labels(tid)
        self.commit = Histogram(
            "trident_commit_seconds", "Commit phase of each committed txid (committers, map writes, record)",
            ["topology"], registry=reg, buckets=LATENCY_BUCKETS).labels(tid)
        self.commit_latency = Histogram(
            "trident_commit_latency_seconds", "Commit latency: the committed attempt launched -> txid committed",
            ["topology"], registry=reg, buckets=LATENCY_BUCKETS).labels(tid)
        self._calls = Histogram(
            "trident_state_call_seconds", "Calls of the driver to ZooKeeper (coordinator state) and Redis (maps)",
            ["topology", "backend", "op"], registry=reg, buckets=CALL_BUCKETS)
        reg.register(_RunCollector(observer))

    def committed(self, latency: float | None, processing: float | None, commit: float | None) -> None:
        """A txid committed: its commit latency, processing and commit-phase seconds."""
        if latency is not None:
            self.commit_latency.observe(max(latency, 0.0))
        if processing is not None:
            self.processing.observe(max(processing, 0.0))
        if commit is not None:
            self.commit.observe(max(commit, 0.0))

    def state_call(self, backend: str, op: str, secs: float) -> None:
        """One timed call of ``backend`` ("zookeeper", "redis") doing ``op``."""
        self._calls.labels(self.topology_id, backend, op).observe(secs)

    def exposition(self) -> bytes:
        """Every metric of the run in Prometheus text format."""
        return generate_latest(self.registry)


class _RunCollector(Collector):
    """The counts and gauges, read from the observer at each scrape."""

    def __init__(self, observer: RunObserver) -> None:
        self.observer = observer

    def collect(self) -> Iterator[Metric]:
        o = self.observer
        tid = o.topology_id
        lag = o.lag()
        f = o.totals()
        yield from _run_metrics(tid, f)
        yield from _component_metrics(tid, f["counts"])
        yield from _lag_and_extras(tid, lag, f["extras"])
        yield from user_metrics(tid, f["user_metrics"])


def _run_metrics(tid: str, f: dict[str, Any]) -> Iterator[Metric]:
    """The run's txids, batches, attempts and failures."""
    g = GaugeMetricFamily("trident_committed_txid", "Last txid committed (0: none yet in this run)",
                          labels=["topology"])
    g.add_metric([tid], f["committed_txid"] or 0)
    yield g
    g = GaugeMetricFamily("trident_txids_in_flight",
                          "Txids emitted and not yet committed, by status "
                          "(processing, waiting: processed and waiting for the commit, committing)",
                          labels=["topology", "status"])
    for status, n in f["in_flight"].items():
        g.add_metric([tid, status], n)
    yield g
    c = CounterMetricFamily("trident_batches_committed", "Txids committed by this run", labels=["topology"])
    c.add_metric([tid], f["batches_committed"])
    yield c
    c = CounterMetricFamily("trident_attempts", "Attempts launched (a replay of a txid is a new attempt)",
                            labels=["topology"])
    c.add_metric([tid], f["attempts"])
    yield c
    c = CounterMetricFamily("trident_failures", "Failed attempts, by the component that failed and kind "
                            "(failed: FailedException, error, fatal)", labels=["topology", "component", "kind"])
    for comp, kinds in sorted(f["failures"].items()):
        for kind, n in sorted(kinds.items()):
            c.add_metric([tid, comp, kind], n)
    yield c


def _component_metrics(tid: str, counts: dict[str, Any]) -> Iterator[Metric]:
    """Each component's tuples, and the core spouts' acked, failed and pending tuples."""
    for key, doc in (("executed", "Tuples executed by each component in committed batches"),
                     ("emitted", "Tuples emitted by each component in committed batches")):
        c = CounterMetricFamily(f"trident_tuples_{key}", doc, labels=["topology", "component"])
        for comp, row in counts.items():
            c.add_metric([tid, comp], row[key])
        yield c
    for key, doc in (("acked", "Spout tuples acked (core topologies)"),
                     ("failed", "Spout tuples failed (core topologies)")):
        c = CounterMetricFamily(f"trident_spout_{key}", doc, labels=["topology", "component"])
        for comp, row in counts.items():
            if key in row:
                c.add_metric([tid, comp], row[key])
        yield c
    g = GaugeMetricFamily("trident_spout_pending", "Spout tuples emitted and not yet acked or failed "
                          "(core topologies)", labels=["topology", "component"])
    for comp, row in counts.items():
        if "pending" in row:
            g.add_metric([tid, comp], row["pending"])
    yield g


def _lag_and_extras(tid: str, lag: dict[str, Any], extras: dict[str, Any]) -> Iterator[Metric]:
    """The spouts' lag per partition, and the figures the engine reports (observe_extra)."""
    g = GaugeMetricFamily("trident_spout_lag", "Records behind per spout partition: the high watermark minus "
                          "the end of its last committed batch", labels=["topology", "component", "partition"])
    for spout, parts in sorted(lag.items()):
        for part, n in sorted(parts.items()):
            g.add_metric([tid, spout, part], n)
    yield g
    g = GaugeMetricFamily("trident_observed", "Other figures the engine reports (observe_extra)",
                          labels=["topology", "name", "key"])
    for name, values in sorted(extras.items()):
        for key, v in sorted(values.items()):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                g.add_metric([tid, name, str(key)], v)
    yield g


def user_metrics(tid: str, metrics: dict[str, dict[str, Any]]) -> Iterator[Metric]:
    """The user's metrics of committed txids (``transactional.metrics``): ``trident_user_<name>``
    with the labels ``topology`` and ``component`` (and ``task`` for gauges); counters and
    meters as counters (``_total``), histograms with power-of-two buckets. A name made of
    other characters than Prometheus allows has them replaced by ``_``."""
    for component, named in sorted(metrics.items()):
        for name, m in sorted(named.items()):
            metric = f"trident_user_{_prom_name(name)}"
            doc = f"{m['kind']} {name!r} of {component} (per committed txid)"
            if m["kind"] in ("counter", "meter"):
                c = CounterMetricFamily(metric, doc, labels=["topology", "component"])
                c.add_metric([tid, component], m["count"])
                yield c
            elif m["kind"] == "gauge":
                g = GaugeMetricFamily(metric, doc, labels=["topology", "component", "task"])
                for task, v in sorted(m["tasks"].items()):
                    if v is not None:
                        g.add_metric([tid, component, str(task)], v)
                yield g
            else:
                yield _histogram(metric, doc, tid, component, m)


def _histogram(metric: str, doc: str, tid: str, component: str, m: dict[str, Any]) -> Metric:
    h = HistogramMetricFamily(metric, doc, labels=["topology", "component"])
    cumulative, buckets = 0, []
    for b in sorted(m["buckets"]):
        cumulative += m["buckets"][b]
        buckets.append((repr(0.0 if b == -1075 else 2.0 ** b), cumulative))
    buckets.append(("+Inf", m["count"]))
    h.add_metric([tid, component], buckets, m["sum"])
    return h


def _prom_name(name: str) -> str:
    out = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return out if not out[:1].isdigit() else f"_{out}"
