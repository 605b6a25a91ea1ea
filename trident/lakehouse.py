"""What the Delta Lake and Iceberg states share (docs/states.md, "Lakehouse tables").

Both keep the same columns next to the user's, so that any reader of the table can tell
which txid wrote a row, and a replayed txid can be taken back by the table itself:

* ``trident_txid`` (int64): the txid that last wrote the row;
* ``trident_partition`` (int32): the state task that wrote it;
* ``upsert``/``add`` tables only, for each non-key column ``c``: ``trident_prev_c``, its
  value before ``trident_txid`` wrote it, and ``trident_prev_exists`` (bool, false when
  that txid inserted the row): Trident's ``OpaqueValue`` kept in the row, so a replay of
  the txid (with an opaque spout perhaps another batch) rebuilds from the value before.

>>> from transactional import Fields
>>> table_schema(Fields("word", "n", types={"word": "string", "n": "int64"}), "add", ["word"]).names
['word', 'n', 'trident_txid', 'trident_partition', 'trident_prev_n', 'trident_prev_exists']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from state.errors import ConfigError, LeadershipLostError, StateAheadError, StateUnavailableError, UnstorableValueError
from transactional.engine.faults import crash_point
from trident.state import State

__all__ = ["TXID", "PARTITION", "PREV_EXISTS", "MODES", "prev", "user_schema", "table_schema", "check_schema",
           "check_mode", "batch_table", "dedupe", "trident_columns", "as_of", "AS_OF_SQL", "TableState"]

#: The query any reader of the table runs for its rows as of txid ``:t`` (an ``add``/``upsert``
#: table; an ``append`` table: ``WHERE trident_txid <= :t``), ``c`` standing for each value column
AS_OF_SQL = ("SELECT k, CASE WHEN trident_txid <= :t THEN c ELSE trident_prev_c END AS c FROM table "
             "WHERE trident_txid <= :t OR trident_prev_exists")

TXID, PARTITION, PREV_EXISTS = "trident_txid", "trident_partition", "trident_prev_exists"
MODES = ("append", "upsert", "add")


def prev(column: str) -> str:
    """The column keeping ``column``'s value before the row's txid."""
    return f"trident_prev_{column}"


def trident_columns(names: Sequence[str]) -> bool:
    """Whether any of ``names`` is one of the state's own (``trident_*``) columns."""
    return any(n.startswith("trident_") for n in names)


def check_mode(what: str, mode: str, key_fields: Sequence[str], columns: Sequence[str] | None) -> None:
    """``ConfigError`` for an unknown mode, or keys missing for ``upsert``/``add``."""
    if mode not in MODES:
        msg = f"{what}: mode {mode!r} is not one of {list(MODES)}"
        raise ConfigError(msg)
    if mode != "append" and not key_fields:
        msg = f"{what}: mode {mode!r} needs key_fields (the columns a row is found by), e.g. key_fields=['word']"
        raise ConfigError(msg)
    if columns is not None:
        missing = [k for k in key_fields if k not in columns]
        if missing:
            msg = f"{what}: key field(s) {missing} are not among the columns {list(columns)}"
            raise ConfigError(msg)


def user_schema(what: str, fields: Any) -> Any:
    """A ``pyarrow.Schema`` from a ``pyarrow.Schema`` or ``Fields`` whose every field has a
    declared type (``Fields("w", "n", types={"w": "string", "n": "int64"})``)."""
    import pyarrow as pa

    if isinstance(fields, pa.Schema):
        return fields
    types = getattr(fields, "types", {}) or {}
    untyped = [f for f in fields if f not in types]
    if untyped:
        msg = (f"{what}: creating the table needs every column's type; declare them: "
               f"Fields({', '.join(repr(f) for f in fields)}, types={ {f: 'string' for f in untyped} }) "
               "(or pass a pyarrow.Schema)")
        raise ConfigError(msg)
    return pa.schema([(f, types[f]) for f in fields])


def table_schema(user: Any, mode: str, key_fields: Sequence[str]) -> Any:
    """The table's schema: the user's columns, then the state's."""
    import pyarrow as pa

    if not isinstance(user, pa.Schema):
        user = user_schema("table_schema", user)
    extra = [pa.field(TXID, pa.int64()), pa.field(PARTITION, pa.int32())]
    if mode != "append":
        extra += [pa.field(prev(f.name), f.type) for f in user if f.name not in key_fields]
        extra += [pa.field(PREV_EXISTS, pa.bool_())]
    return pa.schema(list(user) + extra)


def check_schema(what: str, have: Any, want: Any) -> None:
    """``ConfigError`` naming both schemas when the table's (``have``) lacks a column of
    the stream's (``want``, the table schema this state writes) or types it otherwise."""
    have_t = {f.name: f.type for f in have}
    bad = [f for f in want if f.name not in have_t or not _same(have_t[f.name], f.type)]
    if bad:
        def show(s: Any) -> str:
            return ", ".join(f"{f.name}: {f.type}" for f in s)
        msg = (f"{what}: the table's schema does not match the stream's: column(s) "
               f"{[f.name for f in bad]} differ.\n  table:  {show(have)}\n  stream: {show(want)}\n"
               "Write to a new table, or declare the stream's types as the table has them")
        raise ConfigError(msg)


def _same(a: Any, b: Any) -> bool:
    import pyarrow as pa

    def norm(t: Any) -> Any:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        return t
    return bool(norm(a) == norm(b)) or (pa.types.is_timestamp(a) and pa.types.is_timestamp(b))


def batch_table(what: str, schema: Any, rows: Iterable[Sequence[Any]], txid: int) -> Any:
    """The batch's rows as a ``pyarrow.Table`` of ``schema`` (the user's columns), or
    ``UnstorableValueError`` naming the column and the value, before anything is written."""
    import pyarrow as pa

    rows = [tuple(r) for r in rows]
    n = len(schema)
    for r in rows:
        if len(r) != n:
            msg = f"{what}: a row has {len(r)} values {r!r}; the state writes {n} columns {schema.names}"
            raise UnstorableValueError(msg)
    cols = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = []
    for f, c in zip(schema, cols, strict=True):
        try:
            arrays.append(pa.array(list(c), type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            bad = next((v for v in c if not _fits(v, f.type)), "?")
            msg = (f"{what} column {f.name!r} ({f.type}) of txid {txid}: cannot store {bad!r} ({e}); nothing of "
                   "the batch was written")
            raise UnstorableValueError(msg) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def _fits(v: Any, t: Any) -> bool:
    import pyarrow as pa

    try:
        pa.array([v], type=t)
        return True
    except Exception:  # noqa: BLE001 - any refusal means "does not fit"
        return False


def dedupe(table: Any, key_fields: Sequence[str], add: bool) -> Any:
    """One row per key: the last row of a key wins (``add``: the key's rows summed), as
    applying the rows in order would."""
    import pyarrow as pa

    if table.num_rows < 2:
        return table
    values = [c for c in table.column_names if c not in key_fields]
    if add:
        grouped = table.group_by(list(key_fields), use_threads=False).aggregate([(c, "sum") for c in values])
        return grouped.rename_columns(list(key_fields) + values).select(table.column_names).cast(table.schema)
    idx = pa.array(range(table.num_rows), pa.int64())
    last = table.append_column("__i", idx).group_by(list(key_fields), use_threads=False).aggregate([("__i", "max")])
    return table.take(last.column("__i_max").combine_chunks().sort())


def as_of(what: str, table: Any, txid: int, mode: str, key_fields: Sequence[str]) -> Any:
    """The user's columns of ``table`` (one snapshot of the whole table) as of ``txid``,
    when ``txid`` is recorded by the coordinator: rows of ``txid + 1`` (the one txid that
    may be partly written) read as their values before it; a row of a later txid means the
    cut moved while the table was read (``trident.cut.CutMovedError``)."""
    import pyarrow.compute as pc

    from trident.cut import CutMovedError

    user = [c for c in table.column_names if not c.startswith("trident_")]
    if table.num_rows:
        newest = pc.max(table.column(TXID)).as_py()
        if newest is not None and newest > txid + 1:
            msg = f"{what} holds txid {newest}, past {txid + 1}: the cut moved while it was read"
            raise CutMovedError(msg)
    done = pc.less_equal(table.column(TXID), txid)
    if mode == "append":
        return table.filter(done).select(user)
    keep = pc.or_(done, table.column(PREV_EXISTS).fill_null(False))
    t = table.filter(keep)
    done = pc.less_equal(t.column(TXID), txid)
    cols = [t.column(c) if c in key_fields else pc.if_else(done, t.column(c), t.column(prev(c))) for c in user]
    import pyarrow as pa

    return pa.Table.from_arrays(cols, names=user)


class TableState(State):
    """One task's commits to a lake table: rows of a batch (``add_rows``) written at
    ``commit(txid)`` as one table commit carrying the txid. Subclasses (the Delta and
    Iceberg states) give ``kind``, ``conflict`` (the exception of a commit the table's
    conflict check refused), ``markers()`` and ``write(table, txid, replay)``; ``f`` is
    their factory (``name``, ``mode``, ``key_fields``, ``max_commit_retries``)."""

    kind = "table"
    conflict: type[BaseException] = Exception

    def __init__(self, factory: Any, user: Any, state_id: str, partition: int, epoch: int | None) -> None:
        self.f, self.user = factory, user
        self.state_id, self.partition, self.epoch = state_id, partition, epoch
        self.rows: list[Sequence[Any]] = []

    def begin_commit(self, txid: int) -> None:
        """Start batch ``txid``."""
        self.rows = []

    def add_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        """Rows of this batch (values in the order of the state's columns)."""
        self.rows.extend(rows)

    def markers(self) -> tuple[int | None, int | None]:
        """``(txid, epoch)``: this task's last committed txid and the state's newest epoch,
        read from the table's latest version (None: none)."""
        raise NotImplementedError

    def write(self, table: Any, txid: int, replay: bool) -> None:
        """One table commit of ``table`` with the markers of ``txid`` (``replay``: replacing
        the earlier attempt's); raises ``conflict`` when the table refuses it."""
        raise NotImplementedError

    def commit(self, txid: int) -> None:
        """Steps: 1. the batch as an Arrow table (a value a column cannot store stops
        here); 2. read the table's markers: refuse a newer epoch or txid; 3. one table
        commit with the rows and the markers (replacing an earlier attempt of ``txid``);
        refused by the table's conflict check: read again, retry."""
        # Step 1.
        table = batch_table(self.f.name, self.user, self.rows, txid)
        self.rows = []
        if self.f.mode != "append":
            table = dedupe(table, self.f.key_fields, self.f.mode == "add")
        for _ in range(self.f.max_commit_retries + 1):
            # Step 2.
            replay = self.check(txid)
            if table.num_rows == 0 and not replay:
                return                      # nothing to write, nothing to take back
            crash_point(f"{self.kind}.before_commit", txid=txid, task=self.partition)
            # Step 3.
            try:
                self.write(table, txid, replay)
                return
            except self.conflict as e:
                last = e
        msg = (f"{self.f.name}: txid {txid} task {self.partition}: {self.f.max_commit_retries + 1} commits refused by "
               f"concurrent writers ({last}); the txid fails and is replayed")
        raise StateUnavailableError(msg)

    def check(self, txid: int) -> bool:
        """Whether ``txid`` is a replay of a committed attempt; refuses a newer epoch or txid."""
        try:
            stored, stored_epoch = self.markers()
        except OSError as e:
            msg = f"{self.f.name}: the table cannot be read ({e})"
            raise StateUnavailableError(msg) from None
        if self.epoch is not None and stored_epoch is not None and stored_epoch > self.epoch:
            msg = (f"{self.f.name}: a newer driver (epoch {stored_epoch}) writes state {self.state_id!r}; this driver "
                   f"(epoch {self.epoch}) lost its lock and writes nothing")
            raise LeadershipLostError(msg)
        if stored is not None and stored > txid:
            msg = (f"{self.f.name} (state {self.state_id!r}, task {self.partition}) holds txid {stored}, newer than "
                   f"the batch's {txid}: another topology writes it, or the topology id was reused. Use another "
                   "state_id or table")
            raise StateAheadError(msg)
        return bool(stored == txid)
