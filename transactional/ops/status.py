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
import threading
import time
from typing import Any

from state.base import JSON, TransactionalState, open_transactional_state
from transactional.exceptions import TridentError
from transactional.ops.progress import plural
from transactional.redaction import redact, redact_url

__all__ = ["topology_status", "format_status", "topology_list", "format_list", "StatusRecorder", "run_state",
           "STALE_INTERVALS"]


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
         "run": {...} | None,                 # the driver's status record (``StatusRecorder``)
         "run_state": {"state": "running" | "stale" | "dead" | "ended", "why": ..., "age_secs": ...} | None,
         "runs": [...],                       # the last runs, newest first (``StatusRecorder``)
         "control": {...} | None,             # what `trident deactivate|activate|kill|rebalance` asked
         "rebalanced": {...} | None}          # the task counts rebalances gave (transactional.engine.layout)

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
    run = state.get("status")
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
        "run": run,
        "run_state": run_state(run, contenders[0] if contenders else None),
        "runs": [x for x in (state.get("runs") or []) if isinstance(x, dict)],
        "control": state.get("control"),
        "rebalanced": state.get("rebalanced"),
    }


def topology_ids(coordination_url: str, *, auth: str | None = None, connect_timeout: float = 10.0) -> list[str]:
    """The ids of the topologies under the coordination root."""
    if coordination_url.startswith("zk:"):
        from state.zookeeper import topology_ids as zk_ids

        return list(zk_ids(coordination_url, auth=auth, connect_timeout=connect_timeout))
    from state.base import MemoryTransactionalState

    return list(MemoryTransactionalState.topology_ids())


def topology_list(coordination_url: str, *, auth: str | None = None, connect_timeout: float = 10.0,
                  only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every topology under the coordination root (``trident list``), or those of
    ``only``: its id, last committed txid, lock holder (the driver running it, None when
    none does), its state (``active``/``inactive``, from ``trident deactivate|activate``)
    and its last run's (``run``: ``running``, ``stale``, ``dead``, ``ended``, None
    without a status record; ``run_state``). Raises ``TridentError`` naming an id of
    ``only`` that never ran there."""
    ids = topology_ids(coordination_url, auth=auth, connect_timeout=connect_timeout)
    if only:
        unknown = [t for t in only if t not in ids]
        if unknown:
            msg = (f"no topology {', '.join(map(repr, unknown))} under {coordination_url}: it never ran there "
                   f"(check the id and the root in the URL; there: {', '.join(ids) or 'none'})")
            raise TridentError(msg)
        ids = [t for t in ids if t in only]
    out = []
    for tid in ids:
        st = topology_status(coordination_url, tid, auth=auth, connect_timeout=connect_timeout)
        run = st.get("run") or {}
        rs = st.get("run_state") or {}
        out.append({"topology_id": tid, "last_committed_txid": st["last_committed_txid"],
                    "lock_holder": st["lock_holder"], "state": (st.get("control") or {}).get("state", "active"),
                    "kind": run.get("kind"), "uncommitted": len(st["uncommitted"]), "run": rs.get("state")})
    return out


def format_list(rows: list[dict[str, Any]], url: str) -> str:
    """``topology_list``'s rows as a table."""
    if not rows:
        return f"no topology under {redact_url(url)}"
    head = ("TOPOLOGY", "KIND", "LAST TXID", "STATE", "RUN", "DRIVER")
    table = [head] + [(r["topology_id"], r["kind"] or "?", "-" if r["last_committed_txid"] is None
                       else str(r["last_committed_txid"]), r["state"], r.get("run") or "-",
                       r["lock_holder"] or "(not running)")
                      for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table)


def retrying_text(retry: dict[str, Any]) -> str:
    """"retrying txid 4 (attempt 2 of 5) because pace: FailedException: ..." of a status
    record's (or the status page's) ``retrying``."""
    of = f" of {retry['max_attempts']}" if retry.get("max_attempts") else ""
    return f"retrying txid {retry['txid']} (attempt {retry['attempt']}{of}) because {retry['because']}"


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
    asked = control.get("rebalance")
    if isinstance(asked, dict) and asked.get("id") != (status.get("rebalanced") or {}).get("id"):
        import time

        wait = float(asked.get("not_before") or 0) - time.time()
        lines.append(f"  rebalance: to {', '.join(f'{c}={n}' for c, n in (asked.get('tasks') or {}).items())} asked by "
                     f"{asked.get('by')}, in progress" + (f" (no new batches for {wait:.0f} s more)" if wait > 0 else
                                                          " (after the commit under way)"))
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
    lines += _format_run(status.get("run"), status.get("run_state"))
    return "\n".join(lines)


def verify_text(v: dict[str, Any]) -> str:
    """What the status says of a run of ``trident verify`` (its ``verify`` record).

    >>> verify_text({"of": "words", "fault": "kill at commit.before", "file": "w.py"})
    "verify run: a scratch copy of topology 'words' under fault 'kill at commit.before' (trident verify w.py), not a production run"
    """
    return (f"verify run: a scratch copy of topology {v.get('of')!r} under fault {v.get('fault')!r} "
            f"(trident verify {v.get('file')}), not a production run")


def _format_run(run: dict[str, Any] | None, rs: dict[str, Any] | None = None) -> list[str]:
    """The lines of the driver's ``status`` record (``StatusRecorder``) and ``run_state``."""
    if not isinstance(run, dict):
        return []
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("updated_at", 0)))
    state = (rs or {}).get("state") or ("running" if run.get("running") else "ended")
    lines = [f"  last run: {state.upper() if state in ('stale', 'dead') else state} (as of {when}), "
             f"{plural(run.get('batches', 0), 'batch')} committed, {plural(run.get('attempts', 0), 'attempt')}, "
             f"{run.get('failed_attempts', 0)} failed"]
    if state in ("stale", "dead"):
        lines.append(f"    {state}: {(rs or {}).get('why')}")
    if isinstance(run.get("verify"), dict):
        lines.append(f"    {verify_text(run['verify'])}")
    retry = run.get("retrying")
    if run.get("running") and isinstance(retry, dict):
        lines.append(f"    {retrying_text(retry)}")
    if run.get("stopped_because"):
        lines.append(f"    stopped: {run['stopped_because']}")
    for spout in sorted(run.get("acked") or {}):
        lines.append(f"    spout {spout}: acked {run['acked'][spout]}, failed {run['failed'].get(spout, 0)} "
                     f"(timed out {run['timed_out'].get(spout, 0)}), pending {run['pending'].get(spout, 0)}")
    counts = run.get("executed") or {}
    for c in sorted(set(counts) | set(run.get("emitted") or {})):
        lines.append(f"    {c}: executed {counts.get(c, 0)}, emitted {(run.get('emitted') or {}).get(c, 0)}")
    for c, err in sorted((run.get("errors") or {}).items()):
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(err["at"])) if err.get("at") else "?"
        lines.append(f"    last error in {c} (task {err.get('task')}, txid {err.get('txid')}, at {at}): "
                     f"{err.get('error')}")
    return lines


#: a status record not written for this many of its intervals is ``stale``
STALE_INTERVALS = 5
#: runs kept in the ``runs`` record (``trident ui``'s history)
RUNS_KEPT = 20
#: what ``run_state`` answers, and what each means
RUN_STATES = {
    "running": "the driver holds the lock and writes its status record",
    "stale": "the driver holds the lock but has not written its status record for {since}: it is hung, "
             "or dying (its lock goes when its ZooKeeper session expires)",
    "dead": "the status record says running but its driver {owner} holds no session (the lock is {lock}): "
            "it died without ending the run; run the topology again to resume",
    "ended": "the run ended",
}


def run_state(run: Any, lock_holder: str | None, now: float | None = None) -> dict[str, Any] | None:
    """Whether the driver of status record ``run`` (``StatusRecorder``) is alive, from
    the lock's holder now and the record's age: ``{"state": "running" | "stale" | "dead"
    | "ended", "why": "...", "age_secs": ...}``, None when there is no record.

    A record that says running is ``dead`` when its driver does not hold the lock (its
    session is gone: the driver was killed, or lost ZooKeeper), ``stale`` when it has not
    been written for ``STALE_INTERVALS`` of its interval (a driver writes it every
    interval, busy or idle).

    >>> rec = {"running": True, "owner": "h:1:a", "updated_at": 100.0, "interval_secs": 1.0}
    >>> [run_state(rec, h, now)["state"] for h, now in (("h:1:a", 101.0), ("h:1:a", 106.0), (None, 101.0))]
    ['running', 'stale', 'dead']
    """
    if not isinstance(run, dict):
        return None
    now = time.time() if now is None else now
    age = max(0.0, now - float(run.get("updated_at") or 0.0))
    out: dict[str, Any] = {"age_secs": round(age, 1)}
    if not run.get("running"):
        out["state"] = "ended"
    elif run.get("owner") != lock_holder:
        out["state"] = "dead"
    elif age > STALE_INTERVALS * float(run.get("interval_secs") or 1.0):
        out["state"] = "stale"
    else:
        out["state"] = "running"
    lock = f"held by {lock_holder}" if lock_holder else "free"
    out["why"] = RUN_STATES[out["state"]].format(since=f"{age:.0f} s", owner=run.get("owner"), lock=lock)
    return out


def _summary(record: dict[str, Any], died: bool = False) -> dict[str, Any]:
    """A run's line in the ``runs`` record."""
    keys = ("owner", "kind", "started_at", "updated_at", "batches", "first_committed", "last_committed",
            "attempts", "failed_attempts", "stopped_because", "spark_ui", "verify")
    out = {k: record.get(k) for k in keys}
    out["errors"] = {c: {k: e.get(k) for k in ("task", "txid", "attempt", "error", "at")}
                     for c, e in (record.get("errors") or {}).items()}
    out["ended"] = "died" if died else ("running" if record.get("running") else "ended")
    if died and not out["stopped_because"]:
        out["stopped_because"] = "the driver died (no last write)"
    return out


class StatusRecorder:
    """Keeps the ``status`` record of a running topology in its coordinator state, for
    ``trident status``, ``trident list`` and ``trident ui``: batches, attempts, tuples
    executed and emitted per component and the seconds their tasks ran, (core topologies)
    acked, failed and pending spout tuples, the last error of each component with its
    traceback and time, the txid being retried (``retrying``), and the topology's graph.
    A listener of the coordinator's transitions: it writes on a failure, at most every
    ``interval_secs`` on commits, and at the end (``close``); with ``heartbeat`` a thread
    also writes it every ``interval_secs`` while nothing happens, so that a record not
    written for ``STALE_INTERVALS`` intervals means a hung driver (``run_state``).
    ``counts()`` gives the core topology's spout figures when it writes.

    It also keeps the ``runs`` record, the last ``RUNS_KEPT`` runs of the topology id
    (this one first, then those before; a run whose driver died without its last write
    is marked ``died``)."""

    def __init__(self, state: TransactionalState, kind: str, owner: str, interval_secs: float = 1.0,
                 counts: Any = None, clock: Any = time.monotonic, *, graph: dict[str, Any] | None = None,
                 spouts: tuple[str, ...] = (), max_attempts: int | None = None, spark_ui: Any = None,
                 heartbeat: bool = False, verify: dict[str, Any] | None = None) -> None:
        self.state, self.interval, self.clock, self.counts = state, interval_secs, clock, counts
        self.spark_ui = spark_ui
        self.record: dict[str, Any] = {"kind": kind, "owner": owner, "running": True, "batches": 0,
                                       "attempts": 0, "failed_attempts": 0, "executed": {}, "emitted": {},
                                       "busy_secs": {}, "errors": {}, "stopped_because": "",
                                       "started_at": time.time(), "interval_secs": interval_secs,
                                       "spouts": list(spouts), "max_attempts": max_attempts,
                                       "retrying": None, "first_committed": None, "last_committed": None}
        if graph is not None:
            self.record["graph"] = graph
        if verify is not None:      # a run of `trident verify` under a scratch id (verify_text)
            self.record["verify"] = verify
        self.last_write = -float("inf")
        self._lock = threading.RLock()
        self._runs: list[dict[str, Any]] | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        if heartbeat:
            self._beat = threading.Thread(target=self._heartbeat, name=f"trident-status-{owner}", daemon=True)
            self._beat.start()

    def __call__(self, t: Any) -> None:
        """Take one transition; write when it is time."""
        with self._lock:
            self._take(t)

    def _take(self, t: Any) -> None:
        r = self.record
        if t.kind == "launched":
            r["attempts"] += 1
        elif t.kind == "failed":
            self._failed(t)
        elif t.kind == "committed":
            self._committed(t)
        elif t.kind == "stopped":
            r["stopped_because"] = t.info.get("reason", "")

    def _failed(self, t: Any) -> None:
        r = self.record
        f = t.info["failure"]
        r["failed_attempts"] += 1
        kind = getattr(f, "error_type", None) or type(f).__name__.lstrip("_")
        error = f"{kind}: {f.message}"[:2000]
        r["errors"][f.component] = {"task": f.task, "txid": t.txid, "attempt": t.attempt,
                                    "error": error, "traceback": (f.traceback or "")[-8000:], "at": time.time()}
        if getattr(f, "kind", "error") != "fatal":
            r["retrying"] = {"txid": t.txid, "attempt": t.attempt + 1, "max_attempts": r["max_attempts"],
                             "because": f"{f.component}: {error}"[:500], "at": time.time()}
        self.write()

    def _committed(self, t: Any) -> None:
        r = self.record
        r["batches"] += 1
        r["last_committed"] = t.txid
        if r["first_committed"] is None:
            r["first_committed"] = t.txid
        if (r.get("retrying") or {}).get("txid") == t.txid:
            r["retrying"] = None
        for key in ("executed", "emitted", "busy_secs"):
            for c, n in t.info.get(key, {}).items():
                r[key][c] = r[key].get(c, 0) + n
        if self.clock() - self.last_write >= self.interval:
            self.write()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.interval / 2):
            with self._lock:
                if self.clock() - self.last_write >= self.interval and self.record["running"]:
                    self.write()

    def write(self) -> None:
        """Write the record now (a failure to write is logged, never raised: it is a report)."""
        with self._lock:
            try:
                if self.counts is not None:
                    self.record.update(self.counts())
                if self.spark_ui is not None and not self.record.get("spark_ui"):
                    self.record["spark_ui"] = self.spark_ui() if callable(self.spark_ui) else self.spark_ui
            except Exception as e:  # noqa: BLE001 - a figure it cannot read is left out
                logging.getLogger("trident").debug("reading the status figures: %r", e)
            self.record["updated_at"] = time.time()
            self.last_write = self.clock()
            try:
                if self._runs is None:
                    self._runs = self._previous_runs()
                self.state.set("status", redact(self.record))
                self.state.set("runs", redact([_summary(self.record), *self._runs][:RUNS_KEPT]))
            except Exception as e:  # noqa: BLE001 - the status record must not stop a run
                logging.getLogger("trident").debug("writing the status record: %r", e)

    def _previous_runs(self) -> list[dict[str, Any]]:
        """The runs before this one: the ``runs`` record, with the run of the ``status``
        record left there (by a driver that died without its last write) added."""
        runs = [x for x in (self.state.get("runs") or []) if isinstance(x, dict)]
        prev = self.state.get("status")
        if isinstance(prev, dict) and prev.get("owner") != self.record["owner"]:
            line = _summary(prev, died=bool(prev.get("running")))
            runs = [line if x.get("owner") == prev.get("owner") else x for x in runs]
            if not any(x.get("owner") == prev.get("owner") for x in runs):
                runs.insert(0, line)
        return runs

    def close(self, error: BaseException | None = None) -> None:
        """The run ended (with ``error``, if it failed): a last write."""
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)
        with self._lock:
            self.record["running"] = False
            if error is not None and not self.record["stopped_because"]:
                self.record["stopped_because"] = f"error: {type(error).__name__}: {error}"[:2000]
            self.write()
