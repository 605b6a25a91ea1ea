"""Managing a running topology through its coordinator state, as ``storm deactivate``,
``storm activate`` and ``storm kill`` do (docs/operations.md).

The record ``control`` under the topology's root holds what the operator asked::

    control   {"state": "active" | "inactive",
               "kill": {"owner": "<the driver's lock owner>", "by": "<who>", "at": <unix time>} | null,
               "rebalance": {"id", "tasks": {<component>: n}, "by", "at", "not_before": <unix time>} | null}

``trident deactivate|activate|kill TOPOLOGY --coordination zk://...`` writes it
(``request``); the driver that holds the topology's lock watches it (``RunControl``, a
ZooKeeper watch) and tells its coordinator: ``inactive`` stops emitting new txids (those
in flight go on to their commit, and the run waits -- whatever ``idle_timeout_secs``
says -- until ``active`` again; a driver started while the record says ``inactive``
starts deactivated, as Storm keeps a topology's status); ``kill`` names the driver it is
meant for, which stops after the commit under way and releases the lock (the next run
emits the cancelled txids again). A kill of a topology no driver runs is refused.
``rebalance`` (``trident rebalance ID -e component=N [-w SECS]``, Storm's ``rebalance``):
the driver stops emitting at once, waits ``SECS`` (the txids in flight commit), stops
after the commit under way, and goes on with the new task counts (``transactional.engine.
layout``: recorded in one write, so a driver killed at any point runs the old counts or
the new ones; a request no driver finished is finished by the next start).

>>> from state.base import MemoryTransactionalState
>>> MemoryTransactionalState("control-doctest").set("committed", {"txid": 1, "meta": None, "partitions": None})
>>> request("memory://", "control-doctest", "deactivate", by="ops")["state"]
'inactive'
>>> MemoryTransactionalState.reset("control-doctest")
"""

from __future__ import annotations

import getpass
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from state.base import TransactionalState, open_transactional_state
from transactional.exceptions import StateCorruptError, TridentError
from transactional.ops.status import topology_ids
from transactional.redaction import redact_url

__all__ = ["request", "RunControl", "ACTIONS", "CONTROL"]

CONTROL = "control"
ACTIONS = ("deactivate", "activate", "kill", "rebalance")
log = logging.getLogger("trident")


def _who() -> str:
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in this environment
        user = "?"
    return f"{user}@{socket.gethostname()}"


def _unknown(coordination: str, topology_id: str, known: list[str]) -> TridentError:
    listed = ", ".join(repr(t) for t in known) or "none"
    return TridentError(f"no topology {topology_id!r} under {redact_url(coordination)}: it never ran there (check "
                        f"the id and the root in the URL); the topologies there: {listed}")


def request(coordination: str, topology_id: str, action: str, *, auth: str | None = None,
            connect_timeout: float = 10.0, by: str | None = None, tasks: dict[str, int] | None = None,
            wait: float = 0.0) -> dict[str, Any]:
    """Ask the driver of ``topology_id`` to ``deactivate``, ``activate``, ``kill`` or
    ``rebalance`` (to ``tasks``, after ``wait`` seconds); returns ``{"topology_id",
    "action", "state", "lock_holder"}``. Raises ``TridentError`` for an unknown topology
    (naming the ids there; nothing is written, so a mistyped id leaves no entry behind in
    ``trident list``), for a kill when no driver holds the lock, and for a rebalance its
    layout refuses."""
    if action not in ACTIONS:
        msg = f"unknown action {action!r}; use one of {', '.join(ACTIONS)}"
        raise TridentError(msg)
    options: dict[str, Any] = {}
    if coordination.startswith("zk:"):
        options = {"auth": auth, "connect_timeout": connect_timeout}
    known = topology_ids(coordination, auth=auth, connect_timeout=connect_timeout)
    if topology_id not in known:       # refused before anything is opened: opening would create its node
        raise _unknown(coordination, topology_id, known)
    state = open_transactional_state(coordination, topology_id, **options)
    try:
        holder = state.lock_holder()
        if holder is None and state.get("committed") is None and not state.children("meta") \
                and state.get(CONTROL) is None:
            raise _unknown(coordination, topology_id, [t for t in known if t != topology_id])
        rec = dict(state.get(CONTROL) or {"state": "active", "kill": None})
        if action == "kill":
            if holder is None:
                msg = f"no driver runs topology {topology_id!r} now (its lock is free): nothing to kill"
                raise TridentError(msg)
            rec["kill"] = {"owner": holder, "by": by or _who(), "at": time.time()}
        elif action == "rebalance":
            rec["rebalance"] = _rebalance_request(state, topology_id, tasks or {}, wait, by)
        else:
            rec["state"] = "inactive" if action == "deactivate" else "active"
            rec["by"] = by or _who()
        state.set(CONTROL, rec)
        return {"topology_id": topology_id, "action": action, "state": rec["state"], "lock_holder": holder}
    finally:
        state.close()


def _rebalance_request(state: TransactionalState, topology_id: str, tasks: dict[str, int], wait: float,
                       by: str | None) -> dict[str, Any]:
    """The ``rebalance`` entry, checked against the recorded layout first."""
    import uuid

    from transactional.engine import layout

    rec = layout.recorded(state)
    if rec is None:
        msg = f"topology {topology_id!r} has no recorded layout yet: run it once (trident run) before a rebalance"
        raise TridentError(msg)
    if not tasks:
        msg = "trident rebalance: give at least one -e COMPONENT=N"
        raise TridentError(msg)
    layout.check_rebalance(rec, tasks, topology_id)
    now = time.time()
    return {"id": uuid.uuid4().hex[:12], "tasks": dict(tasks), "by": by or _who(), "at": now,
            "not_before": now + max(0.0, float(wait))}


class RunControl:
    """The driver's side: watches ``control`` and turns what changed into coordinator
    calls (``actions``). A backend that cannot watch is read at most every ``poll_secs``.

    The record is only ever read here, in the driver's thread: the watch (a kazoo
    ``DataWatch`` runs its callback on kazoo's thread, after a read of its own that may
    still be on its way) only notes that it changed. So what the driver saw never goes
    back to an older record, and ``value(fresh=True)`` -- the engine asks for it after
    every commit -- sees every request written before it: a kill that arrives during a
    commit stops the run right after that commit, not one or more commits later."""

    def __init__(self, state: TransactionalState, owner: str, poll_secs: float = 1.0,
                 clock: Any = time.monotonic, wake: Callable[[], None] | None = None) -> None:
        self.state, self.owner, self.poll_secs, self.clock = state, owner, poll_secs, clock
        self._stale = threading.Event()          # set from the backend's thread: read the record again
        self._stale.set()
        #: called when the watch says the record changed: wakes the idle driver (``Engine.wakeup``)
        self._wake = wake
        self._value: Any = None
        self._next_poll = 0.0
        self.watching = state.watch(CONTROL, self._changed)
        #: the rebalance that stopped this run (the engine goes on with its task counts)
        self.rebalance: dict[str, Any] | None = None
        #: the id of the last rebalance applied (``layout.rebalanced``): not asked again
        self.applied = ""

    def _changed(self, value: Any) -> None:
        """The watch's callback (the backend's thread): the record changed; ``value`` reads it."""
        self._stale.set()
        if self._wake is not None:
            self._wake()

    def value(self, fresh: bool = False) -> dict[str, Any]:
        """The ``control`` record: read now when ``fresh``, when the watch said it changed,
        or (a backend that cannot watch) every ``poll_secs``; else as last read."""
        if fresh or self._stale.is_set() or (not self.watching and self.clock() >= self._next_poll):
            self._stale.clear()                  # before the read: a change during it is read next time
            self._next_poll = self.clock() + self.poll_secs
            try:
                self._value = self.state.get(CONTROL)
            except StateCorruptError as e:
                log.warning("%s", e)
                self._value = None
        v = self._value
        return v if isinstance(v, dict) else {}

    def actions(self, coord: Any, now: float, fresh: bool = False) -> list[Any]:
        """The coordinator's answer to what the operator asked since the last call
        (``fresh``: read the record now, see ``value``)."""
        rec = self.value(fresh)
        by = str(rec.get("by") or "")
        out: list[Any] = []
        if rec.get("state") == "inactive" and not coord.paused:
            log.info("%s deactivated%s: no new batches until `trident activate`", self.state.topology_id,
                     f" by {by}" if by else "")
            out += coord.deactivate(now, by)
        elif rec.get("state", "active") == "active" and coord.paused:
            log.info("%s activated%s", self.state.topology_id, f" by {by}" if by else "")
            out += coord.activate(now, by)
        kill = rec.get("kill")
        if isinstance(kill, dict) and kill.get("owner") == self.owner and coord.stopped is None:
            log.info("%s killed by %s: stopping after the commit under way", self.state.topology_id, kill.get("by"))
            out += coord.kill(now, str(kill.get("by") or ""))
        return out + self._rebalance(rec, coord, now)

    def _rebalance(self, rec: dict[str, Any], coord: Any, now: float) -> list[Any]:
        """A rebalance asked: no new txids, then (after its wait) stop after the commit under
        way; the engine goes on with the new task counts (``self.rebalance``)."""
        req = rec.get("rebalance")
        if not isinstance(req, dict) or req.get("id") in (self.applied, None) or coord.stopped is not None:
            return []
        if time.time() < float(req.get("not_before") or 0):
            if coord.paused:
                return []
            log.info("%s: rebalance to %s asked by %s: no new batches while it waits", self.state.topology_id,
                     req.get("tasks"), req.get("by"))
            return list(coord.deactivate(now, str(req.get("by") or "")))
        log.info("%s: rebalance to %s: stopping after the commit under way", self.state.topology_id, req.get("tasks"))
        self.rebalance = req
        return list(coord.kill(now, str(req.get("by") or ""), reason="rebalance"))
