"""In-memory partitioned spouts, for tests and examples (Storm's MemoryTransactionalSpout)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spouts.base import (
    OpaquePartitionedTransactionalSpout,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedTransactionalSpout,
)
from transactional.columns import emit_rows, is_arrow
from transactional.exceptions import TopologyError
from transactional.tuples import Fields, TransactionAttempt


def _partitions(data: Mapping[int, Any] | Any, fields: Fields) -> dict[int, Any]:
    if not isinstance(data, Mapping):
        data = {0: data}
    out: dict[int, Any] = {}
    for p, rows in data.items():
        if not isinstance(p, int) or p < 0:
            msg = f"partition keys must be ints >= 0; got {p!r}"
            raise ValueError(msg)
        if is_arrow(rows):            # a pyarrow table or record batch: kept as columns
            if rows.num_columns != len(fields):
                msg = (f"partition {p} has columns {rows.schema.names}; the spout's fields are "
                       f"{list(fields)}: give one column per field, in order")
                raise ValueError(msg)
            out[p] = _declared(rows, fields, p)
        else:
            out[p] = [r if isinstance(r, tuple) else tuple(r) if isinstance(r, list) else (r,) for r in rows]
    return out


def _declared(data: Any, fields: Fields, partition: int) -> Any:
    """A partition's Arrow data with the column types ``fields`` declare (a safe cast,
    once, here), or ``TopologyError`` naming the partition, the field and the type."""
    if not fields.types:
        return data
    import pyarrow as pa

    schema = data.schema
    want = [fields.types.get(n, t) for n, t in zip(fields, schema.types, strict=True)]
    if want == list(schema.types):
        return data
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    for i, (n, t) in enumerate(zip(fields, want, strict=True)):
        try:
            table = table.set_column(i, schema.names[i], table.column(i).cast(t))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            msg = (f"partition {partition}: column {schema.names[i]!r} (field {n!r}) is {schema.types[i]}, "
                   f"which does not cast to its declared type {t}: {e}. Give the column that type, or "
                   f"declare the type it has")
            raise TopologyError(msg) from None
    return table


class _MemoryCoordinator(PartitionedCoordinator):
    def __init__(self, sizes: dict[int, int], take: int) -> None:
        self.sizes, self.take = sizes, take
        self.more: dict[int, bool] = {}     # partition -> rows left after its last plan

    def num_partitions(self) -> int:
        return max(self.sizes, default=-1) + 1

    def plan_partition(self, partition: int, last_meta: Any) -> Any:
        start = last_meta["end"] if last_meta else 0
        end = min(start + self.take, self.sizes.get(partition, 0))
        self.more[partition] = end < self.sizes.get(partition, 0)
        return {"start": start, "end": end} if end > start else None

    def backlogged(self) -> bool:
        """True when a partition has rows past its last planned batch."""
        return any(self.more.values())


class _MemoryEmitter(PartitionedEmitter):
    def __init__(self, spout: MemoryTransactionalSpout) -> None:
        self.spout = spout

    def emit_partition_batch(self, tx: TransactionAttempt, collector: Any, partition: int, meta: Any) -> Any:
        rows = self.spout.data[partition]
        start, end = meta["start"], meta["end"]
        deliver = getattr(self.spout, "deliver", None)
        if deliver is not None:
            end = max(start, min(end, deliver(tx, partition, start, end)))
        part = rows.slice(start, end - start) if is_arrow(rows) else rows[start:end]
        emit_rows(collector, tx, part, self.spout.fields)
        return {"start": start, "end": end}


class MemoryTransactionalSpout(PartitionedTransactionalSpout):
    """Emits in-memory partitions, ``take_per_batch`` tuples of each per batch.

    ``data`` maps partition -> list of tuples (a plain list is partition 0; a value that
    is not a tuple is a one-field tuple), or partition -> ``pyarrow.Table`` with one
    column per field (pickled as Arrow buffers; each batch is a zero-copy slice, handed
    to consumers that take columns as it is: ``transactional.columns``). Tuples are ``(tx, *row)`` with fields
    ``("tx", *fields)``. Column types ``fields`` declare (``Fields("w", "n", types={"n":
    "int64"})``) are those of the batches built of a partition's rows, without inference
    (``transactional.columns.rows_batch``), and those a partition's table is cast to. A replay emits the same rows: batch metadata is the range
    ``{"start": s, "end": e}`` of each partition.

    >>> s = MemoryTransactionalSpout({0: ["a", "b", "c"], 1: ["d"]}, Fields("word"), 2)
    >>> c = s.get_coordinator({}, None); c.plan_partition(0, None), c.plan_partition(0, {"start": 0, "end": 2})
    ({'start': 0, 'end': 2}, {'start': 2, 'end': 3})
    """

    #: ``trident verify``: a fresh run of the topology reads the same data (docs/verify.md)
    replayable: bool | str = True

    def __init__(self, data: Mapping[int, Sequence[Any]] | Sequence[Any], fields: Fields, take_per_batch: int,
                 tx_field: str = "tx") -> None:
        if not isinstance(take_per_batch, int) or take_per_batch < 1:
            msg = f"take_per_batch must be an int >= 1; got {take_per_batch!r}"
            raise ValueError(msg)
        self.fields = fields if isinstance(fields, Fields) else Fields(fields)
        self.data = _partitions(data, self.fields)
        self.take = take_per_batch
        self.tx_field = tx_field

    def get_coordinator(self, conf: dict[str, Any], context: Any) -> PartitionedCoordinator:
        """A coordinator planning ``take_per_batch`` rows of each partition per batch."""
        return _MemoryCoordinator({p: len(r) for p, r in self.data.items()}, self.take)

    def get_emitter(self, conf: dict[str, Any], context: Any) -> PartitionedEmitter:
        """An emitter reading planned row ranges of the data."""
        return _MemoryEmitter(self)

    def declare_output_fields(self, declarer: Any) -> None:
        """The TransactionAttempt field, then ``fields`` (with their declared types)."""
        declarer.declare(Fields(self.tx_field, *self.fields, types=self.fields.types))

    def __len__(self) -> int:
        return sum(len(r) for r in self.data.values())


class OpaqueMemoryTransactionalSpout(MemoryTransactionalSpout, OpaquePartitionedTransactionalSpout):
    """An opaque in-memory spout: like ``MemoryTransactionalSpout``, but an emitter may
    deliver less than planned. ``deliver(tx, partition, start, end) -> actual_end``
    (picklable; runs in Spark tasks) decides, e.g. to model a broker that is down during
    the first attempt of txid 2: ``lambda tx, p, s, e: s + 1 if tx == (2, 1) else e``.
    The stream goes on exactly where each partition's last batch ended.
    """

    opaque = True

    def __init__(self, data: Mapping[int, Sequence[Any]] | Sequence[Any], fields: Fields, take_per_batch: int,
                 deliver: Callable[[TransactionAttempt, int, int, int], int] | None = None,
                 tx_field: str = "tx") -> None:
        super().__init__(data, fields, take_per_batch, tx_field)
        self.deliver = deliver
