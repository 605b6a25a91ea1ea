"""A topology's recorded layout, and the txid written with an earlier one (docs/operations.md,
"Changing a running topology").

The coordinator keeps, with its other records (``transactional.engine.store``), the
layout the committed txids were written with::

    layout   {"components": {<id>: {"kind", "class", "tasks", "inputs": [[source, stream,
              grouping, [fields]]], "committer", "core", "layout": {...}}}}

``layout`` of a stage: the states it uses (``trident.runtime.bolt.TridentBolt.layout_info``:
kind, key fields, value version); of a spout: its class, whether it is opaque, its source
(``transactional.topology.spout_layout``).

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
from transactional.topology import ComponentSpec, Topology

log = logging.getLogger("trident")

LAYOUT = "layout"


def component_layout(c: ComponentSpec) -> dict[str, Any]:
    """What the layout keeps of one component."""
    return {"kind": c.kind, "class": c.class_name, "tasks": c.parallelism,
            "inputs": [[s.source, s.stream, s.grouping, list(s.fields)] for s in c.inputs],
            "committer": c.committer, "core": c.core, "layout": dict(c.layout)}


def layout_of(topology: Topology) -> dict[str, Any]:
    """The layout record of ``topology`` (module docstring)."""
    return {"components": {c.id: component_layout(c) for c in topology.components}}


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
