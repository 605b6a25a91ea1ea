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
from typing import Any

from state.base import JSON, TransactionalState, open_transactional_state

__all__ = ["topology_status", "format_status"]


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
         "lock_waiting": ["host2:77:ef34gh"]} # drivers queued for the lock

    Raises ``StateUnavailableError`` (naming the address) when ZooKeeper cannot be reached
    within ``connect_timeout``, ``ConfigError`` for a bad URL.
    """
    options: dict[str, Any] = {}
    if coordination_url.startswith("zk:"):
        options = {"auth": auth, "connect_timeout": connect_timeout, "read_only": True}
    state = open_transactional_state(coordination_url, topology_id, **options)
    try:
        return _read(state, coordination_url, topology_id)
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
    }


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
    return "\n".join(lines)
