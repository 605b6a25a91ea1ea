"""Batches as columns: a spout emitter hands a whole share of a batch to its consumer as
one ``pyarrow.RecordBatch`` instead of one tuple per row (docs/trident.md, "The columnar
path").

An emitter asks its collector ``columnar(stream)``: True when every consumer of the stream
takes columns (Trident's stages do) and runs in the emitter's own tasks (no shuffle in
between). Then ``collector.emit_columns(batch, stream)`` passes the batch on as it is: no
tuple is built, checked or pickled. Otherwise the emitter emits rows as before;
``emit_rows`` does either for a list of rows. Nothing here imports pyarrow before it is
used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from transactional.tuples import TransactionAttempt


class ColumnBatch:
    """A share of a batch as columns, in a payload's values where rows would be: the
    attempt and a ``pyarrow.RecordBatch`` whose columns are the stream's fields after the
    attempt. Only components that declared ``accepts_columns`` ever receive one."""

    __slots__ = ("attempt", "batch")

    def __init__(self, attempt: TransactionAttempt, batch: Any) -> None:
        self.attempt = attempt
        self.batch = batch

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def __repr__(self) -> str:
        return f"ColumnBatch({self.attempt!r}, {self.batch.num_rows} rows {self.batch.schema.names})"


def is_arrow(data: Any) -> bool:
    """True for a ``pyarrow.Table`` or ``RecordBatch`` (without importing pyarrow)."""
    return type(data).__module__.startswith("pyarrow") and hasattr(data, "schema") and hasattr(data, "num_rows")


def rows_of(batch: Any) -> Iterable[tuple[Any, ...]]:
    """The rows of a record batch or table, as tuples."""
    if batch.num_rows == 0:
        return ()
    return zip(*[c.to_pylist() for c in batch.columns], strict=True)


def batch_of(rows: Sequence[tuple[Any, ...]], fields: Sequence[str]) -> Any:
    """A record batch of ``rows`` with columns ``fields``."""
    import pyarrow as pa

    cols = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    return pa.RecordBatch.from_arrays([pa.array(c) for c in cols], names=list(fields))


def record_batches(data: Any, fields: Sequence[str]) -> list[Any]:
    """A table's (or a record batch's) non-empty record batches, with columns named ``fields``."""
    import pyarrow as pa

    batches = data.to_batches() if isinstance(data, pa.Table) else [data]
    names = list(fields)
    return [b if b.schema.names == names else pa.RecordBatch.from_arrays(b.columns, names=names)
            for b in batches if b.num_rows]


def emit_rows(collector: Any, tx: TransactionAttempt, rows: Any, fields: Sequence[str],
              stream: str = "default") -> None:
    """Emit ``rows`` (a list of value tuples, or a pyarrow table or record batch with
    columns ``fields``) on ``stream`` of ``collector``. Arrow data goes as columns when
    every consumer takes them; otherwise, and always for Python rows (whose values Arrow
    might convert: ints mixed with floats, tuples, objects), one ``(tx, *row)`` tuple per
    row."""
    if is_arrow(rows) and getattr(collector, "columnar", None) is not None and collector.columnar(stream):
        for b in record_batches(rows, fields):
            collector.emit_columns(b, stream)
        return
    emit = collector.emit
    for row in (rows_of(rows) if is_arrow(rows) else rows):
        emit((tx, *row), stream)
