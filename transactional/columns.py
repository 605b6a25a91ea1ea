"""Batches as columns: a spout emitter hands a whole share of a batch to its consumer as
one ``pyarrow.RecordBatch`` instead of one tuple per row (docs/trident.md, "The columnar
path").

An emitter asks its collector ``columnar(stream)``: True when every consumer of the stream
takes columns (Trident's stages do) and runs in the emitter's own tasks (no shuffle in
between). Then ``collector.emit_columns(batch, stream)`` passes the batch on as it is: no
tuple is built, checked or pickled. Otherwise the emitter emits rows as before;
``emit_rows`` does either for a list of rows, building the batch of Python rows with the
column types the spout's ``Fields`` declare (``Fields("w", "n", types={"n": "int64"})``;
docs/trident.md, "Declared column types") and inferring the others. Nothing here imports
pyarrow before it is used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from transactional.exceptions import ColumnTypeError
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


#: Python types a column of rows may hold to become an Arrow column as it is (each comes
#: back from Arrow as the same type and value); None is a null in any of them.
_PLAIN = {str: "string", int: "int64", float: "float64", bool: "bool_", bytes: "binary"}


def rows_batch(rows: Sequence[tuple[Any, ...]], fields: Sequence[str]) -> Any:
    """A record batch of Python ``rows`` (columns ``fields``) built once, or None when an
    undeclared column's values would not come back from Arrow as they are: more than one
    type in a column (ints mixed with floats, ...), tuples, lists, dicts, objects, ints
    beyond 64 bits. One ``set(map(type, ...))`` per column decides; no tuple is built per
    row.

    A column whose type ``fields`` declares (``Fields(..., types={"n": "int64"})``) is
    built with that type and nothing inferred: ints mixed with None, ints declared
    ``float64``, a column of None only, datetimes declared ``timestamp[ms]`` all become
    columns. A value that does not fit its declared type raises ``ColumnTypeError``
    naming the field, the type and the value (never a silent fall back to rows, never a
    float or Decimal truncated to an integer, nor a datetime to a coarser timestamp)."""
    import pyarrow as pa

    if not rows:
        return None
    cols = list(zip(*rows, strict=True))
    if len(cols) != len(fields):
        return None
    declared = getattr(fields, "types", None) or {}
    arrays: list[Any] = []
    inferred = True
    for name, col in zip(fields, cols, strict=True):
        t = declared.get(name)
        if t is not None:               # declared: always built, so a bad value always raises
            arrays.append(declared_column(col, t, name))
            continue
        if not inferred:
            continue
        kinds = set(map(type, col))
        kinds.discard(type(None))
        plain = _PLAIN.get(kinds.pop()) if len(kinds) == 1 else None
        try:
            if plain is not None:
                arrays.append(pa.array(col, getattr(pa, plain)()))
                continue
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        inferred = False
    return pa.RecordBatch.from_arrays(arrays, names=list(fields)) if inferred else None


def declared_column(col: Sequence[Any], arrow_type: Any, field: str) -> Any:
    """The values ``col`` of ``field`` as an Arrow array of its declared ``arrow_type``
    (a ``pyarrow.DataType``), or ``ColumnTypeError`` naming the field, the type and the
    first value that does not fit it."""
    import pyarrow as pa

    try:
        arr = pa.array(col, type=arrow_type)
    except (OverflowError, TypeError, ValueError, pa.ArrowException) as e:
        raise _misfit(col, arrow_type, field, _first_misfit(col, arrow_type, e)) from None
    lossy = _lossy(col, arrow_type)
    if lossy is not None:
        raise _misfit(col, arrow_type, field, lossy)
    return arr


def _lossy(col: Sequence[Any], arrow_type: Any) -> tuple[int, str] | None:
    """The first value Arrow converts to ``arrow_type`` without an error but changed (a
    float or Decimal with a fraction to an integer, a datetime finer than a timestamp's
    unit), as ``(row, why)``; None when there is none. Only a column holding such values
    is scanned."""
    import datetime
    import decimal

    import pyarrow as pa

    kinds = set(map(type, col))
    if pa.types.is_integer(arrow_type) and kinds & {float, decimal.Decimal}:
        for i, v in enumerate(col):
            if isinstance(v, (float, decimal.Decimal)) and v != int(v):
                return i, "it has a fraction, which an integer type would drop"
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit in ("s", "ms") and datetime.datetime in kinds:
        step = 1_000_000 if arrow_type.unit == "s" else 1_000
        for i, v in enumerate(col):
            if isinstance(v, datetime.datetime) and v.microsecond % step:
                return i, f"it is finer than the type's unit ({arrow_type.unit}), which would drop the rest"
    return None


def _first_misfit(col: Sequence[Any], arrow_type: Any, error: BaseException) -> tuple[int, str]:
    """``(row, why)`` of the first value of ``col`` Arrow cannot convert to ``arrow_type``
    (the error path only: one conversion per value until it fails)."""
    import pyarrow as pa

    for i, v in enumerate(col):
        try:
            pa.array([v], type=arrow_type)
        except (OverflowError, TypeError, ValueError, pa.ArrowException) as e:
            return i, str(e)
    return -1, str(error)


def _misfit(col: Sequence[Any], arrow_type: Any, field: str, where: tuple[int, str]) -> ColumnTypeError:
    """The ``ColumnTypeError`` of value ``where = (row, why)`` of ``col``."""
    i, why = where
    value = f"{col[i]!r} ({type(col[i]).__name__}, row {i} of the batch)" if i >= 0 else "a value"
    msg = (f"spout field {field!r} is declared {arrow_type} (Fields(..., types={{{field!r}: {str(arrow_type)!r}}})) "
           f"but holds {value}, which does not fit it: {why}. Fix the data, or declare the type its values "
           f"have (or leave {field!r} undeclared: its type is then inferred, and a batch whose values Arrow "
           f"would change goes row by row)")
    return ColumnTypeError(msg)


def emit_rows(collector: Any, tx: TransactionAttempt, rows: Any, fields: Sequence[str],
              stream: str = "default") -> None:
    """Emit ``rows`` (a list of value tuples, or a pyarrow table or record batch with
    columns ``fields``) on ``stream`` of ``collector``. When every consumer takes
    columns, Arrow data goes as it is and Python rows as one record batch built here,
    once (``rows_batch``: the columns ``fields`` declares types of built with those
    types, the others with plain values of one type per column); otherwise, and for rows
    whose undeclared values Arrow would change (ints mixed with floats, tuples,
    objects), one ``(tx, *row)`` tuple per row. A value that does not fit its declared
    type raises ``ColumnTypeError`` (a ``SpoutError``: the run stops, naming the
    spout and the txid)."""
    columnar = getattr(collector, "columnar", None) is not None and collector.columnar(stream)
    if is_arrow(rows) and columnar:
        for b in record_batches(rows, fields):
            collector.emit_columns(b, stream)
        return
    if columnar and not is_arrow(rows):
        b = rows_batch(rows, fields)
        if b is not None:
            collector.emit_columns(b, stream)
            return
    emit = collector.emit
    for row in (rows_of(rows) if is_arrow(rows) else rows):
        emit((tx, *row), stream)
