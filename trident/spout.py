"""``FixedBatchSpout``: Storm's test spout of Trident, as a transactional spout."""

from __future__ import annotations

from typing import Any

from spouts.base import PartitionedCoordinator, PartitionedEmitter, PartitionedTransactionalSpout
from transactional.columns import emit_rows
from transactional.tuples import Fields, TransactionAttempt


class _Coordinator(PartitionedCoordinator):
    def __init__(self, size: int, take: int, cycle: bool) -> None:
        self.size, self.take, self.cycle = size, take, cycle

    def num_partitions(self) -> int:
        return 1

    def plan_partition(self, partition: int, last_meta: Any) -> Any:
        start = last_meta["end"] if last_meta else 0
        end = start + self.take if self.cycle else min(start + self.take, self.size)
        return {"start": start, "end": end} if end > start else None


class _Emitter(PartitionedEmitter):
    def __init__(self, rows: list[tuple[Any, ...]], fields: Fields) -> None:
        self.rows = rows
        self.fields = fields

    def emit_partition_batch(self, tx: TransactionAttempt, collector: Any, partition: int, meta: Any) -> Any:
        rows, n = self.rows, len(self.rows)
        start, end = meta["start"], meta["end"]
        if start // n == (end - 1) // n:             # within one cycle: a slice
            part = rows[start % n:(end - 1) % n + 1]
        else:
            part = [rows[i % n] for i in range(start, end)]
        # one record batch for consumers that take columns, else a tuple per row
        emit_rows(collector, tx, part, self.fields)
        return meta


class FixedBatchSpout(PartitionedTransactionalSpout):
    """Emits ``values`` in batches of at most ``max_batch_size`` tuples, in order (with
    ``cycle=True``, forever, starting over at the end). Transactional: a replayed batch
    holds the same tuples. For consumers that take columns each batch is one Arrow
    record batch; the column types ``fields`` declare (``Fields("w", "n", types={"n":
    "int64"})``) are used as they are, the others inferred
    (``transactional.columns.rows_batch``).

    >>> s = FixedBatchSpout(Fields("sentence"), 2, ("the cow",), ("jumped over",), ("the moon",))
    >>> c = s.get_coordinator({}, None); c.plan_partition(0, None), c.plan_partition(0, {"end": 2})
    ({'start': 0, 'end': 2}, {'start': 2, 'end': 3})
    """

    #: ``trident verify``: a fresh run of the topology reads the same data (docs/verify.md)
    replayable: bool | str = True

    def __init__(self, fields: Fields, max_batch_size: int, *values: Any, cycle: bool = False) -> None:
        if not isinstance(max_batch_size, int) or max_batch_size < 1:
            msg = f"max_batch_size must be an int >= 1; got {max_batch_size!r}"
            raise ValueError(msg)
        self.fields = fields if isinstance(fields, Fields) else Fields(fields)
        self.rows = [v if isinstance(v, tuple) else tuple(v) if isinstance(v, list) else (v,) for v in values]
        bad = [r for r in self.rows if len(r) != len(self.fields)]
        if bad:
            msg = f"FixedBatchSpout values must have {len(self.fields)} fields {list(self.fields)}; got {bad[:3]}"
            raise ValueError(msg)
        if cycle and not self.rows:
            msg = "FixedBatchSpout(cycle=True) needs at least one value"
            raise ValueError(msg)
        self.max_batch_size = max_batch_size
        self.cycle = cycle

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> PartitionedCoordinator:
        """One partition, ``max_batch_size`` tuples per batch."""
        return _Coordinator(len(self.rows), self.max_batch_size, self.cycle)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> PartitionedEmitter:
        """Emits the planned range of ``values``."""
        return _Emitter(self.rows, self.fields)

    def declare_output_fields(self, declarer: Any) -> None:
        """The TransactionAttempt field, then ``fields`` (with their declared types)."""
        declarer.declare(Fields("tx", *self.fields, types=self.fields.types))
