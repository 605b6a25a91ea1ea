"""A topology's recorded layout, and the txid written with an earlier one (docs/operations.md,
"Changing a running topology").

The coordinator keeps, with its other records (``transactional.engine.store``), the
layout the committed txids were written with::

    layout   {"components": {<id>: {"kind", "class", "tasks", "inputs": [[source, stream,
              grouping, [fields]]], "committer", "core", "layout": {...}}}}

``layout`` of a stage: the states it uses (``trident.runtime.bolt.TridentBolt.layout_info``:
kind, key fields, value version); of a spout: its class, whether it is opaque, its source
(``transactional.topology.spout_layout``).

**A new version** (``check``, at every run of a known id and by ``trident upgrade``):
the topology is compared with the recorded layout before anything is written, and an
unsafe change is refused (``transactional.engine.changes``).

**A txid written with another task count.** A driver killed after a state wrote txid
``t`` and before ``t`` was recorded leaves ``t`` pending with its commit begun
(``commit_started`` in ``meta/<t>``). Each task of a user state (PostgreSQL, Parquet,
Kafka, any ``StateFactory``) undoes or skips only what *it* wrote of ``t``, by its
``partition_index`` of ``num_partitions``: a replay of ``t`` with another task count
would leave the old tasks' parts beside the new ones (or skip records by the old
partition layout). So a run whose recorded task counts differ from the topology's, and
that finds such a txid, first replays the pending txids with the recorded counts
(``replay_tasks``: the same tasks, partitions and routing that wrote them), then
records the new layout (``record``) before the new counts write anything.
"""

from __future__ import annotations

import logging
from typing import Any

from state.base import TransactionalState
from state.errors import ConfigError
from transactional.engine.changes import SAFE, Change, classify, refuse_unsafe
from transactional.topology import ComponentSpec, Topology

log = logging.getLogger("trident")

LAYOUT = "layout"


def component_layout(c: ComponentSpec) -> dict[str, Any]:
    """What the layout keeps of one component."""
    return {"kind": c.kind, "class": c.class_name, "tasks": c.parallelism,
            "inputs": [[s.source, s.stream, s.grouping, list(s.fields)] for s in c.inputs],
            "committer": c.committer, "core": c.core, "layout": dict(c.layout)}


def layout_of(topology: Topology) -> dict[str, Any]:
    """The layout record of ``topology`` (module docstring). An input on a Trident stage's
    Arrow stream (a direct stream) is recorded with the grouping the stage routes it by."""
    comps = {c.id: component_layout(c) for c in topology.components}
    for c in comps.values():
        for inp in c["inputs"]:
            routed = (comps.get(inp[0], {}).get("layout") or {}).get("arrow_outs", {}).get(inp[1])
            if inp[2] == "direct" and routed is not None:
                inp[2], inp[3] = routed[0], list(routed[1])
    for cid, c in comps.items():
        c["routing"] = _routing(comps, cid, set())
    return {"components": comps}


def _routing(comps: dict[str, Any], cid: str, seen: set[str]) -> list[list[Any]]:
    """The groupings that decide which task of ``cid`` a tuple reaches: its inputs, where
    a local one (a fused Trident stage) is replaced by its source's."""
    out: list[list[Any]] = []
    seen.add(cid)
    for src, _stream, grouping, fields in comps[cid]["inputs"]:
        if grouping in ("local_or_shuffle", "local") and src not in seen and comps[src]["kind"] == "bolt":
            out += _routing(comps, src, seen)
        else:
            out.append([src, _stream, grouping, fields])
    return out


def recorded(state: TransactionalState) -> dict[str, Any] | None:
    """The layout recorded with the coordinator's state, None before the first run that records one."""
    rec = state.get(LAYOUT)
    return dict(rec) if isinstance(rec, dict) else None


def record(state: TransactionalState, topology: Topology) -> None:
    """Record ``topology``'s layout (once it is the one the next commits are written with)."""
    new = layout_of(topology)
    if state.get(LAYOUT) != new:
        state.set(LAYOUT, new)


def tasks_of(layout: dict[str, Any]) -> dict[str, int]:
    """Component id -> task count of a layout record."""
    return {cid: int(c["tasks"]) for cid, c in (layout.get("components") or {}).items()}


def started_txids(pending: dict[int, Any]) -> list[int]:
    """The pending txids whose commit began (a state may hold part of them)."""
    return sorted(t for t, rec in pending.items() if isinstance(rec, dict) and rec.get("commit_started"))


def replay_tasks(layout: dict[str, Any] | None, topology: Topology, pending: dict[int, Any]) -> dict[str, int] | None:
    """The recorded task counts to replay the pending txids with before ``topology``'s own
    take over (module docstring), or None when no pending txid's commit began or the
    counts are the same."""
    if layout is None or not started_txids(pending):
        return None
    old = tasks_of(layout)
    ids = {c.id for c in topology.components}
    changed = {cid: n for cid, n in old.items() if cid in ids and topology.component(cid).parallelism != n}
    return changed or None


def pending_started(state: TransactionalState) -> int | None:
    """The uncommitted txid whose commit began, if any (read only)."""
    committed = int((state.get("committed") or {}).get("txid") or 0)
    for name in state.children("meta"):
        rec = state.get(f"meta/{name}")
        if int(name) > committed and isinstance(rec, dict) and rec.get("commit_started"):
            return int(name)
    return None


def check(state: TransactionalState, topology: Topology, *, allow_dropped_state: bool = False) -> list[Change]:
    """Compare ``topology`` with the recorded layout (``transactional.engine.changes``):
    every change, classified; ``UpgradeRefusedError`` for unsafe ones. Reads only."""
    old = recorded(state)
    if old is None:
        return []
    committed = int((state.get("committed") or {}).get("txid") or 0)
    changes = classify(old, layout_of(topology), committed=committed, allow_dropped_state=allow_dropped_state,
                       pending_txid=pending_started(state))
    refuse_unsafe(changes, topology.topology_id)
    for c in changes:
        if c.level != SAFE:
            log.info("%s: %s", topology.topology_id, c.line())
    return changes


# -- value versions: a state's values migrated as they are read (state/map/migrate.py) ---------

VERSIONS = "versions"


def versions(state: TransactionalState) -> dict[str, list[list[int]]]:
    """State id -> ``[[last txid of a version, that version], ...]`` (oldest first)."""
    rec = state.get(VERSIONS)
    return dict(rec) if isinstance(rec, dict) else {}


def record_versions(state: TransactionalState, topology: Topology) -> dict[str, list[list[int]]]:
    """Before the first commit of ``topology``: for each state whose declared value
    version is above the recorded one, note the last txid the earlier version committed
    (once: a restart notes the same txid again, which changes nothing). Returns every
    state's boundaries."""
    from transactional.engine.changes import states_of

    old = recorded(state)
    rec = versions(state)
    if old is None:
        return rec
    committed = int((state.get("committed") or {}).get("txid") or 0)
    before, now = states_of(old), states_of(layout_of(topology))
    changed = False
    for sid, spec in now.items():
        ov = int(before.get(sid, {}).get("version", spec.get("version", 1)))
        if int(spec.get("version", 1)) > ov and [committed, ov] not in rec.get(sid, []):
            rec[sid] = [*rec.get(sid, []), [committed, ov]]
            changed = True
    if changed:
        state.set(VERSIONS, rec)
    return rec


# -- rebalance: the task counts a running topology was given (``trident rebalance``) ------------

REBALANCED = "rebalanced"


class RebalanceRefusedError(ConfigError):
    """A rebalance a grouping or a state cannot follow; nothing was changed."""


def rebalanced(state: TransactionalState) -> dict[str, Any]:
    """``{"id": <the last request applied>, "tasks": {<component>: {"from": n, "to": m}}}``:
    the task counts rebalances gave, over the ``from`` counts the topology file had."""
    rec = state.get(REBALANCED)
    return dict(rec) if isinstance(rec, dict) else {"id": None, "tasks": {}}


def rebalanced_tasks(state: TransactionalState, built: Topology) -> dict[str, int]:
    """The task counts rebalances gave the components of ``built`` (as its file builds it)
    whose count in the file is still the one they were rebalanced from (a changed
    ``parallelism_hint`` in the file wins)."""
    ids = {c.id for c in built.components}
    return {c: int(r["to"]) for c, r in rebalanced(state)["tasks"].items()
            if c in ids and built.component(c).parallelism == int(r["from"])}


def record_rebalanced(state: TransactionalState, built: Topology, request_id: str, tasks: dict[str, int]) -> None:
    """The durable step of a rebalance (one write): from now on the topology runs with
    ``tasks``, also after a restart."""
    rec = rebalanced(state)
    given = dict(rec["tasks"])
    for c, n in tasks.items():
        given[c] = {"from": built.component(c).parallelism, "to": int(n)}
    state.set(REBALANCED, {"id": request_id, "tasks": given})


def check_rebalance(rec: dict[str, Any], tasks: dict[str, Any], topology_id: str) -> None:
    """Refuse (``RebalanceRefusedError``: the component, both counts, the reason) a
    rebalance of layout ``rec`` to ``tasks`` that a grouping or a state cannot follow."""
    comps = rec.get("components") or {}
    for cid, n in sorted(tasks.items()):
        c = comps.get(cid)
        if c is None:
            msg = (f"topology {topology_id!r} has no component {cid!r}; its components are "
                   f"{', '.join(sorted(comps))} (`trident describe FILE` shows them)")
            raise RebalanceRefusedError(msg)
        old = int(c["tasks"])
        why = _cannot_move(c, n)
        if why:
            msg = (f"rebalance of {cid!r} in topology {topology_id!r} from {old} to {n!r} task(s) refused: {why}; "
                   "nothing was changed")
            raise RebalanceRefusedError(msg)


def _cannot_move(c: dict[str, Any], n: Any) -> str:
    """Why component ``c`` cannot run with ``n`` tasks (empty: it can)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return "a task count is an int >= 1"
    groupings = {i[2] for i in c.get("routing") or c.get("inputs") or []}
    if (c.get("layout") or {}).get("windows") and n != int(c["tasks"]) and not windows_stay(c):
        return (f"it keeps windows per task and its inputs are {' and '.join(sorted(groupings)) or 'no'} groupings "
                "(a window's tuples would be split between tasks)")
    placed = groupings <= {"fields"} or groupings == {"global"}
    if c.get("core") == "swindowed" and n != int(c["tasks"]) and not placed:
        return (f"it is a stateful windowed bolt whose inputs are {' and '.join(sorted(groupings))} groupings, "
                "which do not say which task a held tuple belongs to (its windows' tuples are moved with their "
                "keys: give it a fields or a global grouping)")
    if c.get("core") in ("stateful", "swindowed") and not placed:
        return (f"it is a stateful bolt whose inputs are {' and '.join(sorted(groupings))} groupings, which do not "
                "say which task a key belongs to")
    return ""


def windows_stay(c: dict[str, Any]) -> bool:
    """Whether the open windows of window stage ``c`` (a layout record's component) stay
    where they are under any task count: every tuple reaches it by a global grouping, so the
    routing that places its tuples places every window's key on task 0, with any number of
    tasks; its tasks 1.. never held a tuple (docs/windows.md, "Rebalancing")."""
    routing = c.get("routing") or c.get("inputs") or []
    return bool(routing) and all(i[2] == "global" for i in routing)


#: the record of the operator's requests (``transactional.ops.control`` writes it)
CONTROL_RECORD = "control"


def pending_rebalance(state: TransactionalState) -> dict[str, Any] | None:
    """The rebalance asked (``trident rebalance``, in the ``control`` record) and not yet
    applied (``rebalanced``'s id differs), if any."""
    req = (state.get(CONTROL_RECORD) or {}).get("rebalance")
    if isinstance(req, dict) and req.get("id") != rebalanced(state).get("id"):
        return req
    return None
