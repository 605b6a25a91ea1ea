"""``RunObserver``: what a run is doing, kept from the coordinator's transitions.

The engine publishes every transition of its coordinator (``transactional.engine.coordinator.
Transition``) to its listeners; a ``RunObserver`` is one. It keeps, for the status page
(``snapshot()``, served as ``/api/status``) and the Prometheus metrics
(``transactional.ops.webui.metrics``):

* the run's phase, the last committed txid, attempts launched and failed;
* every txid in flight and its status -- ``processing`` (launched), ``waiting`` (processed,
  waiting for its commit), ``committing`` -- and the last few that ended (``committed``,
  ``failed``, ``cancelled``: a later txid of a failed one, re-emitted with it);
* per component: tuples executed and emitted in committed batches, the seconds its tasks
  ran (``busy_secs`` of committed transitions) and from them Storm's *process latency*
  (ms per tuple) and *capacity* (the share of the last ``window`` seconds its tasks were
  busy, per task), failed attempts by kind, and the last error with its traceback and time;
* the txid being retried (``retrying``: txid, next attempt, ``max_attempts``, because);
* per spout of a core topology, when committed transitions carry them (``info`` keys
  ``acked``, ``failed``: spout -> tuples acked, failed by the run so far; ``pending``:
  spout -> tuples emitted and not yet acked or failed);
* a bounded history (``history`` points): spout tuples committed per second, and the
  commit latency of each txid (launched -> committed);
* spout lag, polled from a callable the engine hands over (``set_lag_source``), and any
  other figures pushed with ``observe_extra``.

Transitions arrive in the engine's main thread; the server reads from its own threads:
every read and write of the kept state holds one lock. Time is the engine's clock (the
transitions' ``at``); ``clock`` must be the same clock (``time.monotonic``), and tests pass
their own.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from state import _timing
from transactional.engine.events import Transition
from transactional.metrics import fold_committed, quantile
from transactional.ops.webui.graph import topology_graph
from transactional.ops.webui.metrics import RunMetrics
from transactional.ops.webui.server import Controls, StatusServer
from transactional.result import Histogram

__all__ = ["RunObserver", "LagSource", "process_latency_ms"]

log = logging.getLogger("trident.webui")

#: ``() -> {spout_id: {partition: records behind}}``
LagSource = Callable[[], Mapping[str, Mapping[str, int]]]

#: statuses of a txid in flight, in pipeline order
IN_FLIGHT = ("processing", "waiting", "committing")
_STATUS_OF = {"launched": "processing", "processed": "waiting", "committing": "committing"}


class RunObserver:
    """A listener of one run (``engine.listeners.append(observer)``): call it with each
    ``Transition``; read ``snapshot()`` and ``metrics``.

    ``topology``: the run's ``Topology`` (its graph is drawn from it); ``config_summary``:
    settings to show (a dict of JSON values, e.g. ``TopologyConfig.redacted()``);
    ``history``: points kept per plot; ``recent``: ended txids kept for the pipeline view;
    ``lag_interval``: the lag source is asked at most this often (seconds); ``window``:
    the seconds capacity is measured over (Storm's 10 minutes); ``spark_ui``: a callable
    giving the Spark UI's address (or None), asked when a snapshot is taken.

    >>> from spouts import MemoryTransactionalSpout
    >>> from transactional import Fields, TransactionalTopologyBuilder
    >>> from transactional.engine.events import Transition
    >>> b = TransactionalTopologyBuilder("doc", "spout", MemoryTransactionalSpout({0: ["a"]}, Fields("w"), 1))
    >>> o = RunObserver(b.build(), clock=lambda: 0.0)
    >>> o(Transition("launched", 1, 1, 0.0)); o(Transition("committing", 1, 1, 0.5))
    >>> o(Transition("committed", 1, 1, 1.0, {"launched_at": 0.0, "emitted": {"spout": 1}}))
    >>> s = o.snapshot(); s["committed_txid"], s["components"][0]["emitted"], s["latency"]["points"]
    (1, 1, [[1.0, 1.0, 1]])
    """

    def __init__(self, topology: Any, config_summary: Mapping[str, Any] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, history: int = 600, recent: int = 10,
                 lag_interval: float = 1.0, window: float = 600.0,
                 spark_ui: Callable[[], str | None] | None = None) -> None:
        self.topology_id: str = topology.topology_id
        self.graph = topology_graph(topology)
        self.spouts = tuple(c.id for c in topology.spouts)
        self.config = dict(config_summary or {})
        self.clock = clock
        self.history = history
        self.started = clock()
        self.lag_interval = lag_interval
        self._lock = threading.RLock()
        self.phase = "starting"                   # "running" after the first launch, then "stopped"
        self.stopped_because: str | None = None
        self.committed_txid: int | None = None
        self.batches_committed = 0
        self.attempts = 0
        self.failed_attempts = 0
        self.cancelled_attempts = 0               # attempts cancelled for an earlier txid's failure, or at the stop
        self.inflight: dict[int, dict[str, Any]] = {}     # txid -> {"txid", "attempt", "status", "since"}
        self.ended: deque[dict[str, Any]] = deque(maxlen=recent)
        self.executed: dict[str, int] = {}
        self.emitted: dict[str, int] = {}
        self.busy: dict[str, float] = {}
        self.window = window
        self._busy_recent: deque[tuple[float, dict[str, float]]] = deque()   # (at, component -> secs)
        self.parallelism = {n["id"]: int(n["parallelism"]) for n in self.graph["nodes"]}
        self.retrying: dict[str, Any] | None = None
        self.control: dict[str, Any] = {"state": "active"}    # `trident deactivate|activate`, as heard
        self.spark_ui = spark_ui
        self.failures: dict[str, dict[str, int]] = {}   # component -> kind -> failed attempts
        self.errors: dict[str, dict[str, Any]] = {}     # component -> its last error
        self.acked: dict[str, int] = {}
        self.failed_tuples: dict[str, int] = {}
        self.pending: dict[str, int] = {}
        self.extras: dict[str, dict[str, Any]] = {}
        self.user_metrics: dict[str, dict[str, Any]] = {}   # component -> name -> figures (transactional.metrics)
        self.latencies = Histogram()
        self._per_second: deque[list[int]] = deque(maxlen=history)   # [second since start, spout tuples]
        self._latency: deque[list[float]] = deque(maxlen=history)     # [t, seconds, txid]
        self._lag_source: LagSource | None = None
        self._lag: dict[str, dict[str, int]] = {}
        self._lag_at: float | None = None
        self.metrics = RunMetrics(self)
        self.server: StatusServer | None = None
        self._complained = False

    # -- serving ----------------------------------------------------------------------------------
    def start(self, host: str = "127.0.0.1", port: int = 0, controls: Controls | None = None) -> StatusServer:
        """Serve the status page, ``/api/status`` and ``/metrics`` on ``host``:``port`` (0: a
        free port), with the page's controls when ``controls`` has a token, and time this
        process's ZooKeeper and Redis calls; returns the server (``server.url``). Raises
        ``OSError`` when the address is taken."""
        if self.server is None:
            self.server = StatusServer(self, host, port, controls).start()
            _timing.add_sink(self.state_call)
        return self.server

    def stop(self) -> None:
        """Stop serving and timing (the kept figures stay readable)."""
        _timing.remove_sink(self.state_call)
        server, self.server = self.server, None
        if server is not None:
            server.stop()

    def topologies(self) -> list[dict[str, Any]]:
        """This run's topology (a driver serves its own run only)."""
        with self._lock:
            return [{"topology_id": self.topology_id, "last_committed_txid": self.committed_txid,
                     "run": self.phase}]

    def exposition(self) -> bytes:
        """The run's metrics in Prometheus text format."""
        return self.metrics.exposition()

    @property
    def url(self) -> str | None:
        """The status page's address while serving, else None."""
        return None if self.server is None else self.server.url

    # -- the listener ---------------------------------------------------------------------------
    def __call__(self, t: Transition) -> None:
        """Take one transition (the engine's main thread). Never raises: a figure it cannot
        read is logged and skipped, the run goes on."""
        try:
            self._take(t)
        except Exception as e:  # noqa: BLE001 - watching a run must not stop it
            if not self._complained:
                self._complained = True
                log.warning("%s: the status page skips a %r transition of txid %d it cannot read: %r",
                            self.topology_id, t.kind, t.txid, e)

    def _take(self, t: Transition) -> None:
        with self._lock:
            if t.kind in _STATUS_OF:
                self._move(t)
            elif t.kind == "committed":
                self._committed(t)
            elif t.kind == "failed":
                self._failed(t)
            elif t.kind in ("deactivated", "activated"):
                self.control = {"state": "inactive" if t.kind == "deactivated" else "active",
                                "by": str(t.info.get("by") or "")}
            elif t.kind == "stopped":
                # a rebalance stops the run after its commit and goes on with new task counts
                self.phase = "rebalancing" if t.info.get("reason") == "rebalance" else "stopped"
                self.stopped_because = str(t.info.get("reason", ""))
                self.retrying = None
                for b in self.inflight.values():
                    self.ended.append({**b, "status": "cancelled", "since": t.at})
                    self.cancelled_attempts += 1
                self.inflight.clear()

    def _move(self, t: Transition) -> None:
        status = _STATUS_OF[t.kind]
        if t.kind == "launched":
            self.attempts += 1
            self.phase = "running"
        self.inflight[t.txid] = {"txid": t.txid, "attempt": t.attempt, "status": status, "since": t.at}

    def spout_counts(self, acked: dict[str, int], failed: dict[str, int], pending: dict[str, int]) -> None:
        """Core topologies: the spout tuples acked and failed by the run so far and pending
        now, pushed by the engine between commits too (acks that a checkpoint released,
        trees that timed out)."""
        with self._lock:
            for now, counts in ((self.acked, acked), (self.failed_tuples, failed), (self.pending, pending)):
                for k, v in counts.items():
                    now[k] = int(v)

    def _committed(self, t: Transition) -> None:
        info = t.info
        self.inflight.pop(t.txid, None)
        self.ended.append({"txid": t.txid, "attempt": t.attempt, "status": "committed", "since": t.at})
        self.committed_txid = t.txid
        self.batches_committed += 1
        for total, counts in ((self.executed, info.get("executed")), (self.emitted, info.get("emitted"))):
            for k, v in (counts or {}).items():
                total[k] = total.get(k, 0) + int(v)
        fold_committed(self.user_metrics, info.get("metrics") or {})
        busy = {str(k): float(v) for k, v in (info.get("busy_secs") or {}).items()}
        for k, v in busy.items():
            self.busy[k] = self.busy.get(k, 0.0) + v
        if busy:
            self._busy_recent.append((t.at, busy))
        self._forget_busy(t.at)
        if self.retrying is not None and self.retrying["txid"] == t.txid:
            self.retrying = None
        # core topologies: the run's totals so far (acked, failed) and the pending now
        for now, counts in ((self.acked, info.get("acked")), (self.failed_tuples, info.get("failed")),
                            (self.pending, info.get("pending"))):
            for k, v in (counts or {}).items():
                now[k] = int(v)
        tuples = sum(int(n) for c, n in (info.get("emitted") or {}).items() if c in self.spouts)
        sec = max(0, math.floor(t.at - self.started))
        if self._per_second and self._per_second[-1][0] == sec:
            self._per_second[-1][1] += tuples
        else:
            self._per_second.append([sec, tuples])
        latency = t.at - info["launched_at"] if "launched_at" in info else None
        if latency is not None:
            self.latencies.add(latency)
            self._latency.append([round(t.at - self.started, 3), round(latency, 6), t.txid])
        self.metrics.committed(latency, info.get("processing_secs"), info.get("commit_secs"))

    def _failed(self, t: Transition) -> None:
        f = t.info.get("failure")
        component = str(getattr(f, "component", "?"))
        kind = str(getattr(f, "kind", "error"))
        self.failed_attempts += 1
        by_kind = self.failures.setdefault(component, {})
        by_kind[kind] = by_kind.get(kind, 0) + 1
        error = {
            "txid": t.txid, "attempt": t.attempt, "task": getattr(f, "task", None), "kind": kind,
            "error_type": getattr(f, "error_type", type(f).__name__.lstrip("_")),
            "message": str(getattr(f, "message", f)), "traceback": str(getattr(f, "traceback", "") or ""),
            "at": round(t.at - self.started, 3), "at_unix": round(time.time(), 3), "count": sum(by_kind.values()),
        }
        self.errors[component] = error
        if kind != "fatal":
            self.retrying = {"txid": t.txid, "attempt": t.attempt + 1, "max_attempts": self.config.get("max_attempts"),
                             "because": f"{component}: {error['error_type']}: {error['message']}"[:500],
                             "since": t.at}
        # the coordinator fails this txid and every later one in flight (docs/design.md §4.6)
        for txid in sorted(x for x in self.inflight if x >= t.txid):
            b = self.inflight.pop(txid)
            status = "failed" if txid == t.txid else "cancelled"
            self.cancelled_attempts += status == "cancelled"
            self.ended.append({**b, "status": status, "since": t.at,
                               **({"component": component} if status == "failed" else {})})

    # -- other figures ----------------------------------------------------------------------------
    def observe_extra(self, name: str, values: Mapping[str, Any]) -> None:
        """Show ``values`` (key -> a number or a short string) under ``name`` on the status
        page, replacing what was shown under that name; numbers are also exported as
        ``trident_observed{topology, name, key}``. For figures the engine has beyond the
        transitions (e.g. the acker's pending trees)."""
        with self._lock:
            self.extras[name] = dict(values)

    def set_lag_source(self, source: LagSource | None) -> None:
        """Poll ``source()`` for spout lag (``{spout_id: {partition: records behind}}``,
        e.g. ``lag_source(coordinators)``), at most every ``lag_interval`` seconds, from
        the server's threads: it must be quick and thread-safe."""
        with self._lock:
            self._lag_source = source
            self._lag_at = None

    def lag(self) -> dict[str, dict[str, int]]:
        """Spout lag as last polled (polling again when ``lag_interval`` has passed)."""
        with self._lock:
            source, at = self._lag_source, self._lag_at
            now = self.clock()
            if source is None or (at is not None and now - at < self.lag_interval):
                return {s: dict(p) for s, p in self._lag.items()}
            self._lag_at = now
        try:
            got = {str(s): {str(p): int(n) for p, n in parts.items()} for s, parts in source().items()}
        except Exception as e:  # noqa: BLE001 - a spout's lag must not break the page
            log.debug("spout lag source failed: %r", e)
            got = None
        with self._lock:
            if got is not None:
                self._lag = got
            return {s: dict(p) for s, p in self._lag.items()}

    def state_call(self, backend: str, op: str, secs: float) -> None:
        """A timed ZooKeeper or Redis call (a ``state._timing`` sink)."""
        self.metrics.state_call(backend, op, secs)

    # -- reading ------------------------------------------------------------------------------------
    def counts(self) -> dict[str, dict[str, Any]]:
        """Per component: ``executed``, ``emitted``, ``failures`` (by kind),
        ``process_latency_ms`` and ``capacity`` (None before the first commit), and for
        spouts of core topologies ``acked``, ``failed``, ``pending`` when reported."""
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            capacity = self.capacity()
            for n in self.graph["nodes"]:
                c = n["id"]
                row: dict[str, Any] = {"executed": self.executed.get(c, 0), "emitted": self.emitted.get(c, 0),
                                       "failures": dict(self.failures.get(c, {})),
                                       "process_latency_ms": process_latency_ms(
                                           self.busy.get(c), self.executed.get(c, 0) or self.emitted.get(c, 0)),
                                       "capacity": capacity.get(c)}
                for key, d in (("acked", self.acked), ("failed", self.failed_tuples), ("pending", self.pending)):
                    if c in d:
                        row[key] = d[c]
                out[c] = row
            return out

    def capacity(self, now: float | None = None) -> dict[str, float]:
        """Per component that reported busy time: Storm's capacity, the seconds its tasks
        ran in committed attempts of the last ``window`` seconds over ``window`` times its
        parallelism (the window shortened to the run's age) -- near 1 (or above: tasks
        of one component ran at once on more cores) the component is the bottleneck."""
        with self._lock:
            now = self.clock() if now is None else now
            self._forget_busy(now)
            span = max(min(self.window, now - self.started), 1e-3)
            total: dict[str, float] = {}
            for _, busy in self._busy_recent:
                for c, v in busy.items():
                    total[c] = total.get(c, 0.0) + v
            return {c: round(v / (span * max(1, self.parallelism.get(c, 1))), 3) for c, v in total.items()}

    def _forget_busy(self, now: float) -> None:
        """Drop the busy figures older than the capacity window: done at every commit, so
        that a run nobody reads keeps only the window's commits (not one per txid)."""
        while self._busy_recent and self._busy_recent[0][0] < now - self.window:
            self._busy_recent.popleft()

    def totals(self) -> dict[str, Any]:
        """The counts and gauges the metrics export, read at once: ``committed_txid``,
        ``in_flight`` (status -> txids), ``batches_committed``, ``attempts``, ``failures``
        (component -> kind -> failed attempts), ``counts`` (``counts()``), ``extras``."""
        with self._lock:
            statuses = [b["status"] for b in self.inflight.values()]
            return {
                "committed_txid": self.committed_txid,
                "in_flight": {s: statuses.count(s) for s in IN_FLIGHT},
                "batches_committed": self.batches_committed, "attempts": self.attempts,
                "failures": {c: dict(k) for c, k in self.failures.items()},
                "counts": self.counts(), "extras": {k: dict(v) for k, v in self.extras.items()},
                "user_metrics": copy.deepcopy(self.user_metrics),
            }

    def throughput(self, now: float | None = None) -> list[list[float]]:
        """``[second, spout tuples committed in it]`` for each whole second of the last
        ``history`` that has ended (seconds since the observer started; a second with no
        commit counts 0)."""
        with self._lock:
            end = math.floor((self.clock() if now is None else now) - self.started) - 1
            first = max(0, end - self.history + 1)
            got = {s: n for s, n in self._per_second}
            return [[float(s), float(got.get(s, 0))] for s in range(first, end + 1)]

    def snapshot(self, topology: str | None = None) -> dict[str, Any] | None:
        """Everything the status page shows, as JSON values (``/api/status``); None when
        ``topology`` names another topology than this run's."""
        if topology not in (None, "", self.topology_id):
            return None
        lag = self.lag()
        try:
            spark_ui = self.spark_ui() if self.spark_ui is not None else None
        except Exception:  # noqa: BLE001 - a link, not worth failing the page for
            spark_ui = None
        with self._lock:
            now = self.clock()
            counts = self.counts()
            components = []
            for n in self.graph["nodes"]:
                row = {k: n[k] for k in ("id", "kind", "phase", "parallelism", "committer", "class_name")}
                row.update(counts[n["id"]])
                row["failures"] = sum(counts[n["id"]]["failures"].values())
                if n["id"] in lag:
                    row["lag"] = sum(lag[n["id"]].values())
                components.append(row)
            spout_tuples = sum(self.emitted.get(s, 0) for s in self.spouts)
            elapsed = max(now - self.started, 1e-9)
            recent = self.throughput(now)[-10:]
            p50, p99 = self.latencies.percentile(50), self.latencies.percentile(99)
            retrying = None
            if self.retrying is not None:
                retrying = {**self.retrying, "since": round(now - self.retrying["since"], 3)}
            return {
                "mode": "live", "topology": self.topology_id, "phase": self.phase,
                "stopped_because": self.stopped_because, "spark_ui": spark_ui, "retrying": retrying,
                "control": dict(self.control),
                "uptime_secs": round(now - self.started, 3), "config": self.config,
                "committed_txid": self.committed_txid, "batches_committed": self.batches_committed,
                "attempts": self.attempts, "failed_attempts": self.failed_attempts,
                "cancelled_attempts": self.cancelled_attempts, "in_flight": len(self.inflight),
                "pipeline": [{**b, "since": round(b["since"] - self.started, 3), "secs": round(now - b["since"], 3)}
                             for b in
                             [*self.ended, *(self.inflight[t] for t in sorted(self.inflight))]],
                "graph": self.graph, "components": components,
                "spout_tuples": spout_tuples,
                "tuples_per_sec": round(spout_tuples / elapsed, 1),
                "recent_tuples_per_sec": round(sum(n for _, n in recent) / len(recent), 1) if recent else 0.0,
                "commit_latency_ms": {"p50": _ms(p50), "p99": _ms(p99)},
                "throughput": {"interval_secs": 1, "points": self.throughput(now)},
                "latency": {"points": [list(p) for p in self._latency]},
                "lag": lag, "errors": {c: dict(e) for c, e in self.errors.items()},
                "extras": {k: dict(v) for k, v in self.extras.items()},
                "user_metrics": user_metrics_rows(self.user_metrics, now - self.started),
            }


def user_metrics_rows(metrics: Mapping[str, Mapping[str, Any]], elapsed: float) -> list[dict[str, Any]]:
    """The page's rows of the user's metrics: component, name, kind and what to show (a
    counter's count, a meter's count and rate per second of the run, a histogram's count,
    mean, p50, p99 and max, a gauge's value per task)."""
    rows = []
    for component, named in sorted(metrics.items()):
        for name, m in sorted(named.items()):
            row: dict[str, Any] = {"component": component, "name": name, "kind": m["kind"]}
            if m["kind"] in ("counter", "meter"):
                row["count"] = m["count"]
                if m["kind"] == "meter":
                    row["rate"] = round(m["count"] / max(elapsed, 1e-9), 2)
            elif m["kind"] == "gauge":
                row["tasks"] = {str(t): v for t, v in sorted(m["tasks"].items())}
            else:
                row.update(count=m["count"], mean=round(m["sum"] / m["count"], 3) if m["count"] else None,
                           p50=quantile(m, 0.5), p99=quantile(m, 0.99), max=m["max"])
            rows.append(row)
    return rows


def _ms(secs: float | None) -> float | None:
    return None if secs is None else round(secs * 1000, 1)


def process_latency_ms(busy_secs: float | None, tuples: int) -> float | None:
    """Milliseconds a component's tasks ran per tuple they executed (a spout: emitted),
    None without both figures.

    >>> process_latency_ms(0.5, 1000), process_latency_ms(None, 3), process_latency_ms(1.0, 0)
    (0.5, None, None)
    """
    if busy_secs is None or not tuples:
        return None
    return round(busy_secs * 1000 / tuples, 4)


def lag_source(coordinators: Mapping[str, Any]) -> LagSource:
    """A lag source over spout coordinators (``{spout_id: coordinator}``): those with a
    ``lag()`` method (``spouts.kafka.KafkaCoordinator``) report ``{partition: records
    behind}``; the others are left out."""
    with_lag = {sid: c for sid, c in coordinators.items() if callable(getattr(c, "lag", None))}

    def poll() -> dict[str, dict[str, int]]:
        return {sid: dict(c.lag()) for sid, c in with_lag.items()}

    return poll
