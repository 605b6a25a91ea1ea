"""One spout executor for the three spout kinds (DESIGN §6).

Driver side, ``SpoutPlanner`` turns any spout into "plan the metadata of txid t";
executor side, ``emit_spout_task`` runs one emitter task of a batch. Partitioned spouts
keep a *partition state* (partition -> its latest metadata) that each planned batch
advances; a batch's metadata holds only the partitions it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transactional.exceptions import TopologyError
from transactional.tuples import TransactionAttempt


@dataclass
class SpoutContext:
    topology_id: str
    component_id: str
    task_index: int
    num_tasks: int


def spout_kind(spout: Any) -> str:
    """"opaque", "partitioned" or "plain"."""
    # imported here: spouts.base imports transactional.tuples, which loads this package
    from spouts.base import (OpaquePartitionedTransactionalSpout, PartitionedTransactionalSpout,
                             TransactionalSpout)

    if isinstance(spout, OpaquePartitionedTransactionalSpout) or (
            isinstance(spout, PartitionedTransactionalSpout) and getattr(spout, "opaque", False)):
        return "opaque"
    if isinstance(spout, PartitionedTransactionalSpout):
        return "partitioned"
    if isinstance(spout, TransactionalSpout) or hasattr(spout, "get_coordinator"):
        return "plain"
    raise TopologyError(f"{type(spout).__name__} is not a transactional spout")


class SpoutPlanner:
    """Driver side of a spout: plans each txid's metadata."""

    def __init__(self, spout: Any, conf: dict, topology_id: str, spout_id: str, parallelism: int) -> None:
        self.kind = spout_kind(spout)
        self.coordinator = spout.get_coordinator(conf, SpoutContext(topology_id, spout_id, 0, parallelism))

    @property
    def partitioned(self) -> bool:
        return self.kind != "plain"

    def plan(self, txid: int, prev_meta: Any, partitions: dict[str, Any] | None) -> tuple[Any, dict | None] | None:
        """``(meta, partition state after it)`` for ``txid``, or None when there is
        nothing to emit now. ``prev_meta`` is txid-1's metadata; ``partitions`` the
        partition state after txid-1."""
        c = self.coordinator
        if not c.is_ready():
            return None
        if not self.partitioned:
            return c.initialize_transaction(txid, prev_meta), None
        partitions = dict(partitions or {})
        meta = {}
        for p in range(c.num_partitions()):
            m = c.plan_partition(p, partitions.get(str(p)))
            if m is not None:
                meta[str(p)] = m
        if not meta:
            return None
        partitions.update(meta)
        return meta, partitions

    def committed(self, txid: int, meta: Any) -> None:
        self.coordinator.committed(txid, meta)

    def close(self) -> None:
        self.coordinator.close()


_EMITTERS: dict[tuple, Any] = {}


def _emitter(run_id: str, spout: Any, conf: dict, ctx: SpoutContext) -> Any:
    key = (run_id, ctx.task_index)
    e = _EMITTERS.get(key)
    if e is None:
        # an earlier run's emitters in this worker are closed and dropped
        for old in [k for k in _EMITTERS if k[0] != run_id]:
            try:
                _EMITTERS.pop(old).close()
            except Exception:  # noqa: BLE001 - closing stale emitters is best effort
                pass
        e = _EMITTERS[key] = [spout.get_emitter(conf, ctx), 0]
    return e


def emit_spout_task(run_id: str, spout: Any, kind: str, conf: dict, ctx: SpoutContext,
                    tx: TransactionAttempt, meta: Any, collector: Any, cleanup_before: int) -> dict | None:
    """Run emitter task ``ctx.task_index`` for batch ``tx``. Returns, for opaque spouts,
    the metadata actually emitted per partition of this task."""
    slot = _emitter(run_id, spout, conf, ctx)
    emitter = slot[0]
    if cleanup_before > slot[1]:
        emitter.cleanup_before(cleanup_before)
        slot[1] = cleanup_before
    if kind == "plain":
        emitter.emit_batch(tx, meta, collector)
        return None
    actual = {}
    for p, m in meta.items():
        if int(p) % ctx.num_tasks == ctx.task_index:
            got = emitter.emit_partition_batch(tx, collector, int(p), m)
            if kind == "opaque":
                actual[p] = m if got is None else got
    return actual if kind == "opaque" else None
