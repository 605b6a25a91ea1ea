"""``HistorySource``: the status page without a driver (``trident ui``).

What the coordinator state keeps of each topology under a root -- the last committed txid,
the uncommitted txids, the lock's holder, the control record, the driver's ``status``
record (``transactional.ops.status.StatusRecorder``: counts, busy seconds, errors, the txid
being retried, the graph) and the ``runs`` record (the last runs) -- turned into the
snapshot the status page draws. Read-only, as ``trident status``; every request reads
the state afresh, so a running driver elsewhere shows as it writes its record (every
second).
"""

from __future__ import annotations

import time
from typing import Any

from transactional.ops.status import topology_list, topology_status
from transactional.ops.webui.observer import process_latency_ms

__all__ = ["HistorySource", "history_snapshot"]


class HistorySource:
    """The topologies under ``coordination`` (a ``zk://`` URL, or ``memory://`` in this
    process), for a ``StatusServer``; ``topology_id``: the one shown by default (None:
    the first listed)."""

    def __init__(self, coordination: str, *, auth: str | None = None, connect_timeout: float = 10.0,
                 topology_id: str | None = None) -> None:
        self.coordination = coordination
        self.auth = auth
        self.connect_timeout = connect_timeout
        self.default = topology_id

    @property
    def topology_id(self) -> str | None:
        """The topology shown by default."""
        return self.default

    def topologies(self) -> list[dict[str, Any]]:
        """``trident list``'s rows of the root."""
        return topology_list(self.coordination, auth=self.auth, connect_timeout=self.connect_timeout)

    def snapshot(self, topology: str | None = None) -> dict[str, Any] | None:
        """The page's status of ``topology`` (None: the default, else the first under the
        root); None when it never ran there."""
        tid = topology or self.default
        if tid is None:
            rows = self.topologies()
            if not rows:
                return history_snapshot(None, self.coordination)
            tid = rows[0]["topology_id"]
        st = topology_status(self.coordination, tid, auth=self.auth, connect_timeout=self.connect_timeout)
        if not st["exists"]:
            return None
        return history_snapshot(st, self.coordination)

    def exposition(self) -> bytes | None:
        """None: metrics are a driver's (``--metrics-port``)."""
        return None


def _graph(run: dict[str, Any]) -> dict[str, Any]:
    graph = run.get("graph")
    if isinstance(graph, dict) and graph.get("nodes") is not None:
        return graph
    # an older record without its graph: the components it counted, in one column
    ids = sorted(set(run.get("executed") or {}) | set(run.get("emitted") or {}))
    nodes = [{"id": c, "kind": "spout" if c in (run.get("spouts") or ()) else "bolt", "class_name": "",
              "parallelism": 1, "committer": False, "phase": "spout" if c in (run.get("spouts") or ()) else "processing",
              "layer": 0, "order": i, "x": 16, "y": 16 + i * 98} for i, c in enumerate(ids)]
    return {"nodes": nodes, "edges": [], "width": 222, "height": 32 + max(1, len(ids)) * 98 - 34,
            "node_w": 190, "node_h": 64, "col_gap": 90}


def history_snapshot(st: dict[str, Any] | None, coordination: str, now: float | None = None) -> dict[str, Any]:
    """The status page's snapshot of ``topology_status`` ``st`` (None: an empty root)."""
    now = time.time() if now is None else now
    if st is None:
        return {"mode": "history", "topology": None, "phase": "no topology", "coordination": coordination,
                "graph": {"nodes": [], "edges": [], "width": 0, "height": 0, "node_w": 190, "node_h": 64},
                "components": [], "pipeline": [], "errors": {}, "runs": [], "config": {"coordination": coordination}}
    run: dict[str, Any] = st["run"] if isinstance(st.get("run"), dict) else {}
    rs = st.get("run_state") or {}
    graph = _graph(run)
    started, updated = run.get("started_at"), run.get("updated_at")
    span = max((updated or now) - (started or now), 1e-3)
    spouts = set(run.get("spouts") or ()) or {n["id"] for n in graph["nodes"] if n.get("kind") == "spout"}
    busy = run.get("busy_secs") or {}
    components = []
    for n in graph["nodes"]:
        c = n["id"]
        executed, emitted = (run.get("executed") or {}).get(c, 0), (run.get("emitted") or {}).get(c, 0)
        row = {k: n.get(k) for k in ("id", "kind", "phase", "parallelism", "committer", "class_name")}
        row.update({"executed": executed, "emitted": emitted,
                    "failures": 1 if c in (run.get("errors") or {}) else 0,
                    "process_latency_ms": process_latency_ms(busy.get(c), executed or emitted),
                    "capacity": round(busy[c] / (span * max(1, int(n.get("parallelism") or 1))), 3)
                    if c in busy else None})
        for key in ("acked", "failed", "pending"):
            if c in (run.get(key) or {}):
                row[key] = run[key][c]
        components.append(row)
    errors = {}
    for c, e in (run.get("errors") or {}).items():
        etype, _, message = str(e.get("error", "")).partition(": ")
        errors[c] = {"txid": e.get("txid"), "attempt": e.get("attempt"), "task": e.get("task"), "kind": "error",
                     "error_type": etype, "message": message, "traceback": e.get("traceback", ""),
                     "at_unix": e.get("at"), "count": None}
    for line in st.get("runs") or []:           # earlier runs' last errors (no traceback kept)
        if line.get("owner") == run.get("owner"):
            continue
        for c, e in (line.get("errors") or {}).items():
            if c not in errors:
                etype, _, message = str(e.get("error", "")).partition(": ")
                errors[c] = {"txid": e.get("txid"), "attempt": e.get("attempt"), "task": e.get("task"),
                             "kind": "error", "error_type": etype, "message": message, "at_unix": e.get("at"),
                             "count": None, "traceback": f"(in an earlier run, by driver {line.get('owner')}; "
                                                         "its traceback is not kept)"}
    pipeline = [{"txid": u["txid"], "attempt": u.get("attempts", 0), "status": "uncommitted", "since": None,
                 "secs": None} for u in st["uncommitted"]]
    spout_tuples = sum(int(n) for c, n in (run.get("emitted") or {}).items() if c in spouts)
    retrying = run.get("retrying") if rs.get("state") in ("running", "stale") else None
    state = rs.get("state") or "never ran"
    return {
        "mode": "history", "topology": st["topology_id"], "phase": state, "run_state": rs,
        "stopped_because": run.get("stopped_because") or None, "spark_ui": run.get("spark_ui"),
        "retrying": retrying, "coordination": coordination,
        "uptime_secs": round(span, 3) if started else None, "updated_at": updated,
        "config": {"coordination": coordination, "kind": run.get("kind"), "driver": run.get("owner"),
                   "max_attempts": run.get("max_attempts")},
        "committed_txid": st["last_committed_txid"], "batches_committed": run.get("batches", 0),
        "attempts": run.get("attempts", 0), "failed_attempts": run.get("failed_attempts", 0),
        "in_flight": len(st["uncommitted"]), "pipeline": pipeline, "graph": graph, "components": components,
        "spout_tuples": spout_tuples, "tuples_per_sec": round(spout_tuples / span, 1) if started else None,
        "recent_tuples_per_sec": None, "commit_latency_ms": {"p50": None, "p99": None},
        "throughput": {"interval_secs": 1, "points": []}, "latency": {"points": []}, "lag": {},
        "errors": errors, "extras": {}, "runs": st.get("runs") or [], "lock_holder": st["lock_holder"],
        "control": st.get("control"), "verify": run.get("verify"),
    }
