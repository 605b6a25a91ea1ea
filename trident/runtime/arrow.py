"""Arrow helpers of the columnar path: IPC buffers, batches of rows, and Count/Sum as
Arrow hash aggregations whose sums are exact or raise ``SumOverflow``."""

from __future__ import annotations

from typing import Any

from trident.runtime.op import GLOBAL_KEY


def to_ipc(batch: Any) -> bytes:
    """A batch or table as one Arrow IPC stream buffer."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write(batch)
    buf: bytes = sink.getvalue().to_pybytes()
    return buf


def from_ipc(buf: bytes) -> Any:
    """The table of an Arrow IPC stream buffer."""
    import pyarrow as pa

    return pa.ipc.open_stream(pa.py_buffer(buf)).read_all()


def _as_batch(out: Any, what: str) -> Any:
    import pyarrow as pa

    if isinstance(out, pa.Table):
        return out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([], out.schema)
    if isinstance(out, pa.RecordBatch):
        return out
    msg = f"{what} returned {type(out).__name__}; return a pyarrow.RecordBatch or Table"
    raise TypeError(msg)


def _concat(batches: list[Any]) -> Any:
    import pyarrow as pa

    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def _acc_batch(acc: dict[Any, Any], group: list[str], out: str) -> Any:
    """A dict of partials (key: one group value, a tuple of several, or ``()``) as a record
    batch ``(*group, out)``. Raises ``SumOverflow`` for a partial beyond Arrow's integers."""
    import pyarrow as pa

    try:
        values = pa.array(list(acc.values()))
    except OverflowError:
        big = [(k, v) for k, v in acc.items() if isinstance(v, int) and not -2 ** 63 <= v < 2 ** 63]
        if not big:
            raise
        raise SumOverflow(*big[0], "int64") from None
    if len(group) == 1:
        cols = [pa.array(list(acc)), values]
    else:
        keys = list(zip(*acc, strict=True)) if group else []
        cols = [pa.array(list(c)) for c in keys] + [values]
    return pa.RecordBatch.from_arrays(cols, names=[*group, out])


class SumOverflow(ArithmeticError):
    """A sum of ``key``'s group (``()`` for no group) is ``value``, beyond ``type``."""

    def __init__(self, key: Any, value: Any, type: str) -> None:
        super().__init__(key, value, type)
        self.key, self.value, self.type = key, value, type


def _sum_range(t: Any) -> tuple[Any, Any] | None:
    """The values a sum of Arrow type ``t`` holds, ``[low, high)``; None when it cannot
    wrap (floating point: it overflows to infinity, as Python's floats do)."""
    import pyarrow as pa

    if pa.types.is_signed_integer(t):
        return -2 ** 63, 2 ** 63
    if pa.types.is_unsigned_integer(t):
        return 0, 2 ** 64
    if pa.types.is_decimal(t):
        import decimal

        bound = decimal.Decimal(10) ** (t.precision - t.scale)
        return -bound, bound
    return None


def _check_sums(t: Any, group: list[str], column: str, type: Any) -> None:
    """Raise ``SumOverflow`` if Arrow's sums of ``column`` per ``group`` (or in all), of
    Arrow type ``type``, wrapped. Arrow adds integers modulo 2**64, so a sum whose true
    value is in range is exact; whether it is, in three steps from cheap to exact: rows
    times the largest magnitude (one ``min_max``: clears almost every batch), a float64
    sum of the magnitudes (per group), then, for a batch near the bounds, Python's exact
    sums."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = _sum_range(type)
    if rng is None:
        return
    low, high = rng
    bound = min(-low, high) if low else high
    col = t.column(column)
    mm = pc.min_max(col)
    least, most = mm["min"].as_py(), mm["max"].as_py()
    if least is None or t.num_rows * max(abs(least), abs(most)) < bound:
        return
    limit = float(bound) / 2                    # float64's error stays far below this margin
    mags = pc.abs(pc.cast(col, pa.float64(), safe=False))
    if group:
        est = pa.table([*(t.column(g) for g in group), mags], names=[*group, "m"]) \
            .group_by(group, use_threads=False).aggregate([("m", "sum")]).column("m_sum")
        if not pc.any(pc.greater_equal(est, limit)).as_py():
            return
    elif (pc.sum(mags).as_py() or 0) < limit:
        return
    import decimal

    exact: dict[Any, Any] = {}
    keys = (zip(*(t.column(g).to_pylist() for g in group), strict=True) if group
            else iter(lambda: (), None))
    with decimal.localcontext() as ctx:
        ctx.prec = 400                     # Decimal sums exact, as integers are
        for k, v in zip(keys, t.column(column).to_pylist(), strict=False):
            if v is not None:
                exact[k] = exact.get(k, 0) + v
    for k, v in exact.items():
        if not low <= v < high:
            raise SumOverflow(k[0] if len(k) == 1 else k, v, str(type))


def arrow_group_agg(b: Any, group: list[str], column: str | None, how: str, out: str) -> Any:
    """``group`` columns and ``how`` ("count" of rows, "sum" of ``column``) per group, as
    one record batch ``(*group, out)``; no group: one row. A sum that does not fit its type
    (Arrow would wrap it) raises ``SumOverflow``: the result is exact or there is none."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = pa.Table.from_batches([b]) if isinstance(b, pa.RecordBatch) else b
    assert how == "count" or column is not None
    if not group:
        if how == "count":
            v = pa.array([b.num_rows])
        else:
            total = pc.sum(t.column(column), min_count=0)
            _check_sums(t, group, str(column), total.type)
            v = pa.array([total.as_py()], type=total.type)
        return pa.RecordBatch.from_arrays([v], names=[out])
    if how == "count":
        r = t.group_by(group, use_threads=False).aggregate([([], "count_all")])
        agg_col = "count_all"
    else:
        r = t.group_by(group, use_threads=False).aggregate([(column, "sum")])
        agg_col = f"{column}_sum"
        _check_sums(t, group, str(column), r.column(agg_col).type)
    cols = [r.column(g) for g in group] + [r.column(agg_col)]
    return pa.Table.from_arrays(cols, names=[*group, out]).combine_chunks().to_batches()[0] \
        if r.num_rows else pa.RecordBatch.from_arrays([pa.array([], type=c.type) for c in cols], names=[*group, out])


def _keys_values(b: Any) -> tuple[list[Any], list[Any]]:
    """A ``(group..., value)`` batch as its keys (the group value, a tuple of several, or
    ``GLOBAL_KEY`` for no group) and its values."""
    cols = [c.to_pylist() for c in b.columns]
    keys = cols[0] if len(cols) == 2 else list(zip(*cols[:-1], strict=True)) if cols[:-1] else [GLOBAL_KEY]
    return keys, cols[-1]
