"""Exactly once into an Apache Iceberg table (``pyiceberg``): ``IcebergStateFactory``
(docs/states.md, "Iceberg").

>>> cat = sql_catalog("/data/lake")
>>> cat["uri"], cat["warehouse"]
('sqlite:////data/lake/catalog.db', 'file:///data/lake')
>>> IcebergStateFactory(cat, "trident.counts").name
'iceberg:trident.counts'

**Mechanism.** Each task writes each txid it has rows for as one Iceberg commit whose
snapshot summary carries ``trident.state``, ``trident.task``, ``trident.txid`` and
``trident.epoch`` (an ``overwrite`` is a delete and an append snapshot, committed at
once, both carrying them). Before writing txid ``t`` the task reads the table's
snapshots: a newer epoch of the state is refused (``LeadershipLostError``), a newer txid
of the task stops the run (``StateAheadError``), and the same txid means an earlier
attempt was committed and the driver died before recording it: the replay replaces it in
one commit -- ``append`` overwrites the rows of ``(trident_txid, trident_partition)``,
``upsert``/``add`` rebuild the keys from the values before ``t`` kept in each row
(``trident.lakehouse``).

The catalog's commit is a compare-and-swap of the table's metadata: a commit based on an
older snapshot is refused. Tables the state creates have ``commit.retry.num-retries=0``
so that pyiceberg does not replay a refused commit on its own; the task reads the table
again, checks the epoch and txid again, and commits (``max_commit_retries``). On a table
created elsewhere with pyiceberg's default retries, the epoch fence is checked before
each commit but not atomically with it (as the Parquet state's).

The catalog is given as its properties (a dict, pickled to executors): ``sql_catalog(dir)``
for a local SQL catalog on SQLite; any pyiceberg catalog (REST, Glue, Hive ...) in
production, e.g. ``{"name": "prod", "type": "rest", "uri": ...}``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from state.errors import ConfigError
from transactional.extras import missing_extra
from trident import lakehouse as lh
from trident.operation import BaseStateUpdater, TridentCollector, TridentTuple
from trident.state import EPOCH, TOPOLOGY_ID, StateFactory

try:
    import pyiceberg  # noqa: F401 - checked at import: a missing extra is one line naming it
except ModuleNotFoundError as e:
    raise missing_extra(e, "trident.iceberg") from None

__all__ = ["IcebergStateFactory", "IcebergState", "IcebergUpdater", "sql_catalog"]

P_STATE, P_TASK, P_TXID, P_EPOCH = "trident.state", "trident.task", "trident.txid", "trident.epoch"
NO_RETRIES = {"commit.retry.num-retries": "0"}


def sql_catalog(directory: str, name: str = "trident") -> dict[str, str]:
    """The properties of a local SQL catalog: SQLite at ``<directory>/catalog.db``, data
    and metadata under ``directory``."""
    d = str(directory).rstrip("/")
    return {"name": name, "type": "sql", "uri": f"sqlite:///{d}/catalog.db", "warehouse": f"file://{d}"}


class IcebergStateFactory(StateFactory):
    """An Iceberg table as a Trident state (module docstring). ``catalog``: the catalog's
    properties (``sql_catalog(dir)``, or a dict with ``name`` and pyiceberg's properties)
    or the name of one configured in ``.pyiceberg.yaml``; ``table``:
    ``namespace.table``; ``fields``: ``Fields`` with declared ``types`` or a
    ``pyarrow.Schema`` (needed for ``create=True``; else the table's own columns);
    ``mode``: ``"append"``, ``"upsert"`` or ``"add"`` (by ``key_fields``)."""

    opaque_safe = True

    def __init__(self, catalog: dict[str, str] | str, table: str, fields: Any = None, *, mode: str = "append",
                 key_fields: Sequence[str] = (), create: bool = False, state_id: str | None = None,
                 max_commit_retries: int = 20) -> None:
        self.catalog = catalog
        self.table = table
        self.fields = fields
        self.mode = mode
        self.key_fields = list(key_fields)
        self.create = create
        self.state_id = state_id
        self.max_commit_retries = max_commit_retries
        if "." not in table:
            msg = f"Iceberg table {table!r}: name it namespace.table, e.g. 'trident.{table}'"
            raise ConfigError(msg)
        lh.check_mode(self.name, mode, self.key_fields, None if fields is None else list(_names(fields)))

    @property
    def name(self) -> str:
        """``iceberg:<namespace.table>``."""
        return f"iceberg:{self.table}"

    def scratch(self, namespace: str) -> IcebergStateFactory:
        """The same state on a scratch table beside this one (``<table>_<namespace>``),
        created when missing: for ``trident verify``."""
        return IcebergStateFactory(self.catalog, f"{self.table}_{namespace}", self.fields, mode=self.mode,
                                   key_fields=self.key_fields, create=True, state_id=self.state_id,
                                   max_commit_retries=self.max_commit_retries)

    def load_catalog(self) -> Any:
        """The pyiceberg catalog."""
        from pyiceberg.catalog import load_catalog

        if isinstance(self.catalog, str):
            return load_catalog(self.catalog)
        props = dict(self.catalog)
        return load_catalog(props.pop("name", "trident"), **props)

    def open_table(self) -> Any:
        """The table, created when missing and ``create``; ``ConfigError`` otherwise."""
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

        cat = self.load_catalog()
        try:
            return cat.load_table(self.table)
        except NoSuchTableError:
            if not self.create:
                msg = (f"there is no Iceberg table {self.table!r} in the catalog; pass create=True (with the columns' "
                       "types: Fields(..., types={...}) or a pyarrow.Schema) or create it first")
                raise ConfigError(msg) from None
        schema = lh.table_schema(lh.user_schema(self.name, self.fields), self.mode, self.key_fields)
        try:
            try:
                cat.create_namespace(self.table.rsplit(".", 1)[0])
            except NamespaceAlreadyExistsError:
                pass
            return cat.create_table(self.table, schema=schema, properties=NO_RETRIES)
        except TableAlreadyExistsError:
            return cat.load_table(self.table)
        except OSError as e:
            msg = f"{self.name}: the table cannot be created ({e}); give a warehouse location this process may write"
            raise ConfigError(msg) from None

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> IcebergState:
        """Open (or create) the table and check its schema against the stream's."""
        import pyarrow as pa

        tbl = self.open_table()
        have = pa.schema(tbl.schema().as_arrow())
        user = (lh.user_schema(self.name, self.fields) if self.fields is not None
                else pa.schema([f for f in have if not f.name.startswith("trident_")]))
        lh.check_mode(self.name, self.mode, self.key_fields, user.names)
        lh.check_schema(self.name, have, lh.table_schema(user, self.mode, self.key_fields))
        sid = self.state_id or f"{conf.get(TOPOLOGY_ID, 'trident')}:{self.table}"
        return IcebergState(self, tbl, user, sid, partition_index, conf.get(EPOCH))

    # -- reading ---------------------------------------------------------------------------

    def snapshots(self, tbl: Any = None) -> list[tuple[int, int]]:
        """``(snapshot id, txid)`` of every snapshot this state wrote, oldest first."""
        tbl = tbl or self.load_catalog().load_table(self.table)
        return [(s.snapshot_id, int(s.summary[P_TXID])) for s in tbl.metadata.snapshots
                if s.summary is not None and P_TXID in s.summary.additional_properties]

    def committed_txid(self) -> int:
        """The newest txid written to the table (0: none): how far the sink has got."""
        return max((t for _, t in self.snapshots()), default=0)

    def read_as_of(self, txid: int, columns: Sequence[str] | None = None) -> Any:
        """The user's columns (a ``pyarrow.Table``) as of txid ``txid``, a txid the
        coordinator recorded: one snapshot of the table, rows of ``txid + 1`` read as their
        values before it (``trident.lakehouse.AS_OF_SQL``)."""
        tbl = self.load_catalog().load_table(self.table)
        t = lh.as_of(self.name, tbl.scan().to_arrow(), txid, self.mode, self.key_fields)
        return t.select(list(columns)) if columns else t


def _names(fields: Any) -> list[str]:
    return list(fields.names if hasattr(fields, "names") and not isinstance(fields, tuple) else fields)


class IcebergState(lh.TableState):
    """One task's commits to the table (module docstring)."""

    kind = "iceberg"

    def __init__(self, factory: IcebergStateFactory, tbl: Any, user: Any, state_id: str, partition: int,
                 epoch: int | None) -> None:
        from pyiceberg.exceptions import CommitFailedException

        super().__init__(factory, user, state_id, partition, epoch)
        self.conflict = CommitFailedException
        self.tbl = tbl

    def markers(self) -> tuple[int | None, int | None]:
        """This task's last txid and the state's newest epoch, from the snapshot summaries."""
        self.tbl.refresh()
        stored_epoch, stored = 0, None
        for s in self.tbl.metadata.snapshots:
            p = s.summary.additional_properties if s.summary is not None else {}
            if p.get(P_STATE) != self.state_id:
                continue
            stored_epoch = max(stored_epoch, int(p.get(P_EPOCH) or 0))
            if p.get(P_TASK) == str(self.partition):
                stored = int(p[P_TXID])
        return stored, stored_epoch

    def write(self, table: Any, txid: int, replay: bool) -> None:
        """One catalog commit (module docstring)."""
        with warnings.catch_warnings():   # "Delete operation did not match any records": a first write
            warnings.filterwarnings("ignore", "Delete operation did not match", UserWarning)
            self._write(table, txid, replay)

    def _write(self, table: Any, txid: int, replay: bool) -> None:
        import pyarrow as pa

        And, EqualTo = _expr("And"), _expr("EqualTo")  # noqa: N806 - pyiceberg's names
        props = {P_STATE: self.state_id, P_TASK: str(self.partition), P_TXID: str(txid),
                 P_EPOCH: str(self.epoch or 0)}
        mine = And(EqualTo(lh.TXID, txid), EqualTo(lh.PARTITION, self.partition))
        if self.f.mode == "append":
            data = table.append_column(lh.TXID, pa.array([txid] * table.num_rows, pa.int64())) \
                        .append_column(lh.PARTITION, pa.array([self.partition] * table.num_rows, pa.int32()))
            data = data.cast(pa.schema(self.tbl.schema().as_arrow()))
            if replay:
                self.tbl.overwrite(data, overwrite_filter=mine, snapshot_properties=props)
            else:
                self.tbl.append(data, snapshot_properties=props)
            return
        where = _keys_in(self.f.key_fields, table)
        if replay:
            where = _expr("Or")(where, mine) if table.num_rows else mine
        old = self.tbl.scan(row_filter=where).to_arrow().to_pylist()
        rows = opaque_rows(table.to_pylist(), old, self.f.key_fields, self.f.mode == "add", txid, self.partition)
        data = pa.Table.from_pylist(rows, schema=pa.schema(self.tbl.schema().as_arrow()))
        self.tbl.overwrite(data, overwrite_filter=where, snapshot_properties=props)


def _expr(name: str) -> Any:
    """A pyiceberg expression class (typed loosely: its constructors take positional terms)."""
    from pyiceberg import expressions

    return getattr(expressions, name)


def _keys_in(keys: Sequence[str], table: Any) -> Any:
    And, EqualTo, In, Or = (_expr(n) for n in ("And", "EqualTo", "In", "Or"))  # noqa: N806 - pyiceberg's names
    if len(keys) == 1:
        return In(keys[0], set(table.column(keys[0]).to_pylist()))
    rows = table.select(list(keys)).to_pylist()
    expr: Any = None
    for r in rows:
        one: Any = None
        for k in keys:
            one = EqualTo(k, r[k]) if one is None else And(one, EqualTo(k, r[k]))
        expr = one if expr is None else Or(expr, one)
    return expr


def opaque_rows(batch: list[dict[str, Any]], old: list[dict[str, Any]], keys: Sequence[str], add: bool, txid: int,
                partition: int) -> list[dict[str, Any]]:
    """The rows that replace ``old`` (the batch's keys and the rows this task wrote in an
    earlier attempt of ``txid``): Trident's ``OpaqueValue`` rule in each row -- a row of
    ``txid`` is rebuilt from its value before ``txid``; a row the earlier attempt wrote
    and the batch does not is put back (or dropped when that attempt inserted it).

    >>> opaque_rows([{"w": "a", "n": 2}], [{"w": "a", "n": 5, "trident_txid": 3, "trident_partition": 0,
    ...     "trident_prev_n": None, "trident_prev_exists": False}], ["w"], True, 4, 0)[0]["n"]
    7
    """
    by_key = {tuple(r[k] for k in keys): r for r in old}
    out = []
    for s in batch:
        values = [c for c in s if c not in keys]
        r = by_key.pop(tuple(s[k] for k in keys), None)
        if r is None:
            new = {**s, **{lh.prev(c): None for c in values}, lh.PREV_EXISTS: False}
        elif r[lh.TXID] == txid:
            base = {c: r[lh.prev(c)] for c in values} if r[lh.PREV_EXISTS] else {c: None for c in values}
            new = {**r, **{c: ((base[c] or 0) + s[c]) if add else s[c] for c in values}}
        else:
            new = {**r, **{lh.prev(c): r[c] for c in values},
                   **{c: ((r[c] or 0) + s[c]) if add else s[c] for c in values}, lh.PREV_EXISTS: True}
        out.append({**new, lh.TXID: txid, lh.PARTITION: partition})
    for r in by_key.values():            # written by the earlier attempt of txid, not by this one
        if r[lh.PREV_EXISTS]:
            out.append({**r, **{c: r[lh.prev(c)] for c in r if lh.prev(c) in r}})
    return out


class IcebergUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``IcebergStateFactory``: each tuple's values are
    a row, in the order of the state's columns."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add the tuples as rows of this batch."""
        state.add_rows(tuples)
