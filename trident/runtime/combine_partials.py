"""A combiner's partial aggregates of several tasks merged before they go on: the records
of a stage ending in a partial aggregation (``PartialProc``: ``group_by(...).aggregate``
or ``persistent_aggregate`` with a ``CombinerAggregator``) that several of its tasks
emitted for one batch become one partial per key and consumer task
(``transactional.engine.combine``).

Count and Sum travel as Arrow IPC buffers and are added in one Arrow hash aggregation
(exact, or ``SumOverflow``: then nothing is merged and the consumer's fold, which adds
Python ints, goes on as before); a user's combiner travels as rows ``(attempt, group...,
partial)`` and is folded with its ``combine`` in the order the records came, as the
consumer would.
"""

from __future__ import annotations

from typing import Any

from trident.runtime.arrow import SumOverflow, _concat, arrow_group_agg, from_ipc, to_ipc
from trident.runtime.op import Op
from trident.runtime.processors import _MISSING

Record = tuple[int, Any]


def combines(ops: list[Op]) -> bool:
    """Whether a stage of ``ops`` ends in a combiner's partial aggregation."""
    return bool(ops) and ops[-1].kind == "partial"


def combine_partials(op: Op, records: list[Record]) -> list[Record]:
    """``records`` (payloads ``(component, stream, task, values)``) with the partials of
    ``op`` merged per consumer task and stream; records of other streams as they are."""
    groups: dict[tuple[int, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r[0], r[1][1]), []).append(r)
    out: list[Record] = []
    for (key, stream), rs in groups.items():
        vals = [v for r in rs for v in r[1][3]]
        if len(vals) < 2 or len(rs[0][1]) != 4:
            out.extend(rs)
            continue
        if stream.startswith("arrow-"):
            merged = _merge_buffers(vals)
        elif stream == "default":
            merged = _merge_rows(op, vals)
        else:
            merged = None
        if merged is None:
            out.extend(rs)
            continue
        comp, _, _, _ = rs[0][1]
        out.append((key, (comp, stream, min(r[1][2] for r in rs), merged)))
    return out


def _merge_buffers(vals: list[Any]) -> list[Any] | None:
    """Arrow buffers of partials ``(attempt, buffer)`` as one buffer summed per key; None
    when a sum leaves Arrow's integers."""
    batches = [b for _, buf in vals for b in from_ipc(buf).to_batches() if b.num_rows]
    if not batches:
        return None
    b = _concat(batches)
    names = list(b.schema.names)
    try:
        summed = arrow_group_agg(b, names[:-1], names[-1], "sum", names[-1])
    except SumOverflow:
        return None
    return [(vals[0][0], to_ipc(summed))]


def _merge_rows(op: Op, vals: list[Any]) -> list[Any]:
    """Rows ``(attempt, group..., partial)`` folded per group with the combiner."""
    combine = op.fn.combine
    acc: dict[Any, Any] = {}
    for v in vals:
        k = v[:-1]
        old = acc.get(k, _MISSING)
        acc[k] = v[-1] if old is _MISSING else combine(old, v[-1])
    return [(*k, p) for k, p in acc.items()]
