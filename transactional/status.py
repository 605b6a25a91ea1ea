"""``trident status``: what the coordinator state of a topology says, for people and scripts.

>>> from state.base import MemoryTransactionalState
>>> s = MemoryTransactionalState("status-doctest")
>>> s.set("committed", {"txid": 4, "meta": {"0": [9, 12]}, "partitions": None})
>>> s.set("meta/5", {"meta": {"0": [12, 15]}, "attempts": 2, "commit_started": []})
>>> st = topology_status("memory://", "status-doctest")
>>> st["last_committed_txid"], [(u["txid"], u["attempts"]) for u in st["uncommitted"]]
(4, [(5, 2)])
>>> print(format_status(st).splitlines()[2])
  last committed txid: 4
>>> MemoryTransactionalState.reset("status-doctest")

Read-only: it takes no lock and, on ZooKeeper, creates no znode, so it is safe to run
next to a live driver (and, with digest auth on, without the credentials: the
topology's znodes are world-readable).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from state.base import JSON, TransactionalState, open_transactional_state
from transactional.progress import plural
from transactional.redaction import redact, redact_url

__all__ = ["topology_status", "format_status", "topology_list", "format_list", "StatusRecorder"]


def topology_status(coordination_url: str, topology_id: str, *, auth: str | None = None,
                    connect_timeout: float = 10.0) -> dict[str, Any]:
    """The coordinator state of ``topology_id`` as a JSON-ready dict::

        {"topology_id": "words", "coordination": "zk://127.0.0.1:2181/trident",
         "exists": True,                      # False: nothing stored for this id
         "last_committed_txid": 12,           # None before the first commit
         "committed_meta": {...},             # metadata of that batch (per partition)
         "partitions": {...} | None,          # latest per-partition metadata, if any
         "uncommitted": [{"txid": 13, "attempts": 1, "meta": ..., "commit_started": []}],
         "stale_txids": [],                   # metadata left of committed txids (dropped on start)
         "lock_holder": "host:4242:ab12cd" | None,
         "lock_waiting": ["host2:77:ef34gh"], # drivers queued for the lock
         "run": {...} | None}                 # the driver's status record (``StatusRecorder``)

    Raises ``StateUnavailableError`` (naming the address) when ZooKeeper cannot be reached
    within ``connect_timeout``, ``ConfigError`` for a bad URL.
    """
    options: dict[str, Any] = {}
    if coordination_url.startswith("zk:"):
        options = {"auth": auth, "connect_timeout": connect_timeout, "read_only": True}
    state = open_transactional_state(coordination_url, topology_id, **options)
    try:
        return dict(redact(_read(state, coordination_url, topology_id)))
    finally:
        state.close()


def _read(state: TransactionalState, url: str, topology_id: str) -> dict[str, Any]:
    committed = state.get("committed")
    last = committed.get("txid") if isinstance(committed, dict) else None
    uncommitted: list[dict[str, Any]] = []
    stale: list[int] = []
    for name in state.children("meta"):
        if not name.isdigit():
            continue
        txid = int(name)
        if last is not None and txid <= last:
            stale.append(txid)  # committed, but the driver died before dropping it
            continue
        rec = state.get(f"meta/{name}") or {}
        uncommitted.append({"txid": txid, "attempts": rec.get("attempts", 0),
                            "meta": rec.get("meta"),
                            "commit_started": rec.get("commit_started", [])})
    uncommitted.sort(key=lambda u: u["txid"])
    contenders = _contenders(state)
    return {
        "topology_id": topology_id,
        "coordination": url,
        "exists": bool(committed is not None or uncommitted or stale or contenders
                       or state.children("")),
        "last_committed_txid": last,
        "committed_meta": committed.get("meta") if isinstance(committed, dict) else None,
        "partitions": committed.get("partitions") if isinstance(committed, dict) else None,
        "uncommitted": uncommitted,
        "stale_txids": sorted(stale),
        "lock_holder": contenders[0] if contenders else None,
        "lock_waiting": contenders[1:],
        "run": state.get("status"),
        "control": state.get("control"),
    }


def topology_list(coordination_url: str, *, auth: str | None = None,
                  connect_timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every topology under the coordination root (``trident list``): its id, last
    committed txid, lock holder (the driver running it, None when none does) and its
    state (``active``/``inactive``, from ``trident deactivate|activate``)."""
    if coordination_url.startswith("zk:"):
        from state.zookeeper import topology_ids

        ids = topology_ids(coordination_url, auth=auth, connect_timeout=connect_timeout)
    else:
        from state.base import MemoryTransactionalState

        ids = MemoryTransactionalState.topology_ids()
    out = []
    for tid in ids:
        st = topology_status(coordination_url, tid, auth=auth, connect_timeout=connect_timeout)
        run = st.get("run") or {}
        out.append({"topology_id": tid, "last_committed_txid": st["last_committed_txid"],
                    "lock_holder": st["lock_holder"], "state": (st.get("control") or {}).get("state", "active"),
                    "kind": run.get("kind"), "uncommitted": len(st["uncommitted"])})
    return out


def format_list(rows: list[dict[str, Any]], url: str) -> str:
    """``topology_list``'s rows as a table."""
    if not rows:
        return f"no topology under {redact_url(url)}"
    head = ("TOPOLOGY", "KIND", "LAST TXID", "STATE", "DRIVER")
    table = [head] + [(r["topology_id"], r["kind"] or "?", "-" if r["last_committed_txid"] is None
                       else str(r["last_committed_txid"]), r["state"], r["lock_holder"] or "(not running)")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)


def _contenders(state: TransactionalState) -> list[str]:
    queue = getattr(state, "lock_contenders", None)
    if queue is not None:
        return list(queue())
    holder = state.lock_holder()
    return [holder] if holder else []


def _short(value: JSON, width: int = 100) -> str:
    text = json.dumps(value, separators=(", ", ": "), sort_keys=True)
    return text if len(text) <= width else text[: width - 3] + "..."


def format_status(status: dict[str, Any]) -> str:
    """``topology_status``'s dict as a few lines for a person (long metadata shortened)."""
    tid, url = status["topology_id"], status["coordination"]
    lines = [f"topology {tid}", f"  coordination: {url}"]
    if not status["exists"]:
        lines.append("  no coordinator state: this topology id never ran here (check the "
                     "topology id and the root in the URL)")
        return "\n".join(lines)
    last = status["last_committed_txid"]
    lines.append(f"  last committed txid: {last if last is not None else 'none yet'}")
    if last is not None:
        lines.append(f"  committed metadata: {_short(status['committed_meta'])}")
    if status.get("partitions") and status["partitions"] != status["committed_meta"]:
        lines.append(f"  partitions: {_short(status['partitions'])}")
    holder = status["lock_holder"]
    lines.append(f"  lock: {'held by ' + holder if holder else 'free (no driver running)'}")
    control = status.get("control") or {}
    if control.get("state") == "inactive":
        lines.append(f"  deactivated{' by ' + control['by'] if control.get('by') else ''}: no new batches until "
                     "`trident activate`")
    for waiting in status.get("lock_waiting", []):
        lines.append(f"        waiting: {waiting}")
    pending = status["uncommitted"]
    lines.append(f"  uncommitted txids: {len(pending) or 'none'}")
    for u in pending:
        started = f"  commit started by attempt(s) {u['commit_started']}" \
            if u.get("commit_started") else ""
        lines.append(f"    txid {u['txid']}: attempts {u['attempts']}, "
                     f"meta {_short(u['meta'], 80)}{started}")
    if status.get("stale_txids"):
        lines.append(f"  stale metadata of committed txids {status['stale_txids']} "
                     "(dropped at the next start)")
    lines += _format_run(status.get("run"))
    return "\n".join(lines)


def _format_run(run: dict[str, Any] | None) -> list[str]:
    """The lines of the driver's ``status`` record (``StatusRecorder``)."""
    if not isinstance(run, dict):
        return []
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("updated_at", 0)))
    lines = [f"  last run: {'running' if run.get('running') else 'ended'} (as of {when}), "
             f"{plural(run.get('batches', 0), 'batch')} committed, {plural(run.get('attempts', 0), 'attempt')}, "
             f"{run.get('failed_attempts', 0)} failed"]
    if run.get("stopped_because"):
        lines.append(f"    stopped: {run['stopped_because']}")
    for spout in sorted(run.get("acked") or {}):
        lines.append(f"    spout {spout}: acked {run['acked'][spout]}, failed {run['failed'].get(spout, 0)} "
                     f"(timed out {run['timed_out'].get(spout, 0)}), pending {run['pending'].get(spout, 0)}")
    counts = run.get("executed") or {}
    for c in sorted(set(counts) | set(run.get("emitted") or {})):
        lines.append(f"    {c}: executed {counts.get(c, 0)}, emitted {(run.get('emitted') or {}).get(c, 0)}")
    for c, err in sorted((run.get("errors") or {}).items()):
        lines.append(f"    last error in {c} (task {err.get('task')}, txid {err.get('txid')}): {err.get('error')}")
    return lines


class StatusRecorder:
    """Keeps the ``status`` record of a running topology in its coordinator state, for
    ``trident status``: batches, attempts, tuples executed and emitted per component,
    (core topologies) acked, failed and pending spout tuples, and the last error of each
    component with its traceback. A listener of the coordinator's transitions: it writes
    on a failure, at most every ``interval_secs`` on commits, and at the end (``close``).
    ``counts()`` gives the core topology's spout figures when it writes."""

    def __init__(self, state: TransactionalState, kind: str, owner: str, interval_secs: float = 1.0,
                 counts: Any = None, clock: Any = time.monotonic) -> None:
        self.state, self.interval, self.clock, self.counts = state, interval_secs, clock, counts
        self.record: dict[str, Any] = {"kind": kind, "owner": owner, "running": True, "batches": 0,
                                       "attempts": 0, "failed_attempts": 0, "executed": {}, "emitted": {},
                                       "errors": {}, "stopped_because": ""}
        self.last_write = -float("inf")

    def __call__(self, t: Any) -> None:
        """Take one transition; write when it is time."""
        r = self.record
        if t.kind == "launched":
            r["attempts"] += 1
        elif t.kind == "failed":
            f = t.info["failure"]
            r["failed_attempts"] += 1
            kind = getattr(f, "error_type", None) or type(f).__name__.lstrip("_")
            r["errors"][f.component] = {"task": f.task, "txid": t.txid, "attempt": t.attempt,
                                        "error": f"{kind}: {f.message}"[:2000],
                                        "traceback": (f.traceback or "")[-8000:], "at": time.time()}
            self.write()
        elif t.kind == "committed":
            r["batches"] += 1
            r["last_committed"] = t.txid
            for key in ("executed", "emitted"):
                for c, n in t.info.get(key, {}).items():
                    r[key][c] = r[key].get(c, 0) + n
            if self.clock() - self.last_write >= self.interval:
                self.write()
        elif t.kind == "stopped":
            r["stopped_because"] = t.info.get("reason", "")

    def write(self) -> None:
        """Write the record now (a failure to write is logged, never raised: it is a report)."""
        if self.counts is not None:
            self.record.update(self.counts())
        self.record["updated_at"] = time.time()
        self.last_write = self.clock()
        try:
            self.state.set("status", redact(self.record))
        except Exception as e:  # noqa: BLE001 - the status record must not stop a run
            logging.getLogger("trident").debug("writing the status record: %r", e)

    def close(self, error: BaseException | None = None) -> None:
        """The run ended (with ``error``, if it failed): a last write."""
        self.record["running"] = False
        if error is not None and not self.record["stopped_because"]:
            self.record["stopped_because"] = f"error: {type(error).__name__}: {error}"[:2000]
        self.write()
