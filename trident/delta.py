"""Exactly once into a Delta Lake table (``deltalake``, delta-rs): ``DeltaStateFactory``
(docs/states.md, "Delta Lake").

>>> from transactional import Fields
>>> f = DeltaStateFactory("/data/counts", Fields("word", "n", types={"word": "string", "n": "int64"}),
...                       mode="add", key_fields=["word"], create=True)
>>> f.name, f.app_id("wc:counts", 1)
('delta:/data/counts', 'trident:wc:counts:task1')

**Mechanism.** Each task writes each txid it has rows for as **one Delta commit** that
carries Delta's own idempotent-write marker, the ``txn`` action (``appId`` =
``trident:<topology>:<state>:task<i>``, ``version`` = the txid), and the driver's epoch as
a second ``txn`` (``trident:<topology>:<state>:epoch``). Before writing txid ``t`` the task
reads both from the table's log:

* the epoch newer than the driver's: ``LeadershipLostError`` (a stale driver writes
  nothing). Every commit writes the epoch ``txn``, and Delta refuses a commit whose
  ``txn`` an other commit wrote since its read: a driver paused between the check and its
  commit is refused by the table itself;
* its txid newer than ``t``: ``StateAheadError``;
* its txid equal to ``t``: an earlier attempt of ``t`` was committed and the driver died
  before recording it. The replay (with an opaque spout perhaps another batch) replaces
  it in one commit: ``append`` overwrites the rows of ``(trident_txid, trident_partition)``
  (Delta's ``replaceWhere``); ``upsert``/``add`` rebuild the keys from the values before
  ``t`` kept in each row (``trident.lakehouse``) and take back keys the earlier attempt
  wrote and the replay does not.

Rows are written by ``MERGE`` for ``upsert`` (replace by key) and ``add`` (add the
non-key columns), by append for ``append``. Delta's conflict check refuses a commit that
a concurrent writer invalidated (a compaction, a delete); the task reads the table again
and retries (``max_commit_retries``), then fails the txid, which the driver replays.

**Reading.** Any Delta reader sees each txid once (Spark, DuckDB's ``delta_scan``,
``deltalake``). ``trident_txid`` says which txid wrote a row; ``read_as_of(t)`` is the
table as of a txid ``t`` the coordinator recorded, for a cut across sinks
(docs/states.md, "One cut across sinks").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from state.errors import ConfigError
from transactional.extras import missing_extra
from trident import lakehouse as lh
from trident.operation import BaseStateUpdater, TridentCollector, TridentTuple
from trident.state import EPOCH, TOPOLOGY_ID, StateFactory

try:
    import deltalake  # noqa: F401 - checked at import: a missing extra is one line naming it
except ModuleNotFoundError as e:
    raise missing_extra(e, "trident.delta") from None

__all__ = ["DeltaStateFactory", "DeltaState", "DeltaUpdater"]

META_STATE, META_TXID, META_TASK = "trident.state", "trident.txid", "trident.task"


class DeltaStateFactory(StateFactory):
    """A Delta Lake table as a Trident state (module docstring).

    ``table_uri``: a local path or a URI delta-rs knows (``file://``, ``s3://``, ``az://``,
    ``gs://`` ...; ``storage_options`` as delta-rs takes them). ``fields``: the columns in
    the order of each row's values -- ``Fields`` with declared ``types`` or a
    ``pyarrow.Schema`` (needed for ``create=True``; else the table's own columns).
    ``mode``: ``"append"``, ``"upsert"`` (replace by ``key_fields``) or ``"add"`` (add the
    non-key columns by key). ``create``: create a missing table (else a missing table is
    an error). ``state_id``: the name in the ``txn`` app ids (default
    ``<topology>:<table's last path part>``)."""

    opaque_safe = True

    def __init__(self, table_uri: str, fields: Any = None, *, mode: str = "append", key_fields: Sequence[str] = (),
                 storage_options: dict[str, str] | None = None, create: bool = False, state_id: str | None = None,
                 max_commit_retries: int = 20) -> None:
        self.table_uri = str(table_uri)
        self.fields = fields
        self.mode = mode
        self.key_fields = list(key_fields)
        self.storage_options = dict(storage_options or {})
        self.create = create
        self.state_id = state_id
        self.max_commit_retries = max_commit_retries
        lh.check_mode(self.name, mode, self.key_fields, None if fields is None else list(_names(fields)))

    @property
    def name(self) -> str:
        """``delta:<table_uri>``."""
        return f"delta:{self.table_uri}"

    @staticmethod
    def app_id(state_id: str, task: int | str) -> str:
        """The ``txn`` app id of a task's commits (``task="epoch"``: the driver's epoch)."""
        return f"trident:{state_id}:{task if task == 'epoch' else f'task{task}'}"

    def scratch(self, namespace: str) -> DeltaStateFactory:
        """The same state on a scratch table beside this one (``<table_uri>-<namespace>``),
        created when missing: for ``trident verify``."""
        return DeltaStateFactory(f"{self.table_uri.rstrip('/')}-{namespace}", self.fields, mode=self.mode,
                                 key_fields=self.key_fields, storage_options=self.storage_options, create=True,
                                 state_id=self.state_id, max_commit_retries=self.max_commit_retries)

    def open_table(self) -> Any:
        """The ``DeltaTable``, created when missing and ``create``; ``ConfigError`` when
        missing otherwise, or when the location cannot be written."""
        from deltalake import DeltaTable

        if DeltaTable.is_deltatable(self.table_uri, self.storage_options or None):
            return DeltaTable(self.table_uri, storage_options=self.storage_options or None)
        if not self.create:
            msg = (f"there is no Delta table at {self.table_uri!r}; pass create=True (with the columns' types: "
                   "Fields(..., types={...}) or a pyarrow.Schema) or create it first")
            raise ConfigError(msg)
        schema = lh.table_schema(lh.user_schema(self.name, self.fields), self.mode, self.key_fields)
        try:
            return DeltaTable.create(self.table_uri, schema, mode="ignore", storage_options=self.storage_options or None)
        except Exception as e:  # noqa: BLE001 - delta-rs raises OSError and its own errors alike
            msg = (f"{self.name}: the table cannot be created at {self.table_uri!r} ({type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else e}); give a location this process may write")
            raise ConfigError(msg) from None

    def user_schema(self, dt: Any) -> Any:
        """The stream's columns: the declared ``fields``, else the table's own."""
        import pyarrow as pa

        if self.fields is not None:
            return lh.user_schema(self.name, self.fields)
        have = pa.schema(dt.schema().to_arrow())
        return pa.schema([f for f in have if not f.name.startswith("trident_")])

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> DeltaState:
        """Open (or create) the table and check its schema against the stream's."""
        import pyarrow as pa

        dt = self.open_table()
        user = self.user_schema(dt)
        lh.check_mode(self.name, self.mode, self.key_fields, user.names)
        lh.check_schema(f"{self.name}", pa.schema(dt.schema().to_arrow()),
                        lh.table_schema(user, self.mode, self.key_fields))
        sid = self.state_id or f"{conf.get(TOPOLOGY_ID, 'trident')}:{self.table_uri.rstrip('/').rsplit('/', 1)[-1]}"
        return DeltaState(self, dt, user, sid, partition_index, conf.get(EPOCH))

    # -- reading ---------------------------------------------------------------------------

    def _table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.table_uri, storage_options=self.storage_options or None)

    def commits(self, dt: Any = None) -> list[tuple[int, int]]:
        """``(table version, txid)`` of every commit of this state up to ``dt``'s version
        (default: the latest), newest first, from the commits' ``trident.txid`` metadata."""
        dt = dt or self._table()
        v = dt.version()
        return [(int(h["version"]), int(h[META_TXID])) for h in dt.history() if META_TXID in h and h["version"] <= v]

    def committed_txid(self) -> int:
        """The newest txid written to the table (0: none): how far the sink has got."""
        return max((t for _, t in self.commits()), default=0)

    def read_as_of(self, txid: int, columns: Sequence[str] | None = None) -> Any:
        """The user's columns (a ``pyarrow.Table``) as of txid ``txid``, a txid the
        coordinator recorded (``trident.cut.committed_txid``): one snapshot of the table,
        rows of ``txid + 1`` read as their values before it (``trident.lakehouse.AS_OF_SQL``
        is the same as a query any Delta reader can run)."""
        t = lh.as_of(self.name, self._table().to_pyarrow_table(), txid, self.mode, self.key_fields)
        return t.select(list(columns)) if columns else t


def _names(fields: Any) -> list[str]:
    return list(fields.names if hasattr(fields, "names") and not isinstance(fields, tuple) else fields)


class DeltaState(lh.TableState):
    """One task's commits to the table (module docstring): rows of a batch (``add_rows``)
    written at ``commit(txid)`` as one Delta commit carrying the txid."""

    kind = "delta"

    def __init__(self, factory: DeltaStateFactory, dt: Any, user: Any, state_id: str, partition: int,
                 epoch: int | None) -> None:
        from deltalake.exceptions import CommitFailedError

        super().__init__(factory, user, state_id, partition, epoch)
        self.conflict = CommitFailedError
        self.dt = dt
        self.app = factory.app_id(state_id, partition)
        self.epoch_app = factory.app_id(state_id, "epoch")

    def markers(self) -> tuple[int | None, int | None]:
        """The ``txn`` versions of this task and of the epoch, from the latest version."""
        self.dt.update_incremental()
        return self.dt.transaction_version(self.app), self.dt.transaction_version(self.epoch_app)

    def _commit_properties(self, txid: int) -> Any:
        from deltalake import CommitProperties, Transaction

        txns = [Transaction(self.app, txid)]
        if self.epoch is not None:
            txns.append(Transaction(self.epoch_app, self.epoch))
        meta = {META_STATE: self.state_id, META_TXID: str(txid), META_TASK: str(self.partition)}
        return CommitProperties(custom_metadata=meta, app_transactions=txns, max_commit_retries=0)

    def write(self, table: Any, txid: int, replay: bool) -> None:
        """One Delta commit (module docstring)."""
        import pyarrow as pa
        from deltalake import write_deltalake

        props = self._commit_properties(txid)
        if self.f.mode == "append":
            data = table.append_column(lh.TXID, pa.array([txid] * table.num_rows, pa.int64())) \
                        .append_column(lh.PARTITION, pa.array([self.partition] * table.num_rows, pa.int32()))
            if replay:
                where = f"{lh.TXID} = {txid} AND {lh.PARTITION} = {self.partition}"
                write_deltalake(self.dt, data, mode="overwrite", predicate=where, commit_properties=props)
            else:
                write_deltalake(self.dt, data, mode="append", commit_properties=props)
            return
        self._merge(table, txid, replay, props)

    def _merge(self, table: Any, txid: int, replay: bool, props: Any) -> None:
        """``MERGE`` by key, keeping each row's value before ``txid`` (trident.lakehouse)."""
        keys = self.f.key_fields
        values = [c for c in table.column_names if c not in keys]
        add = self.f.mode == "add"
        t, p = str(txid), str(self.partition)
        on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
        m = self.dt.merge(table, on, source_alias="s", target_alias="t", commit_properties=props)

        def new(base: str, c: str) -> str:
            return f"coalesce({base}, 0) + s.{_q(c)}" if add else f"s.{_q(c)}"
        # a replay reaching a key its earlier attempt wrote: from the value before txid
        m = m.when_matched_update({**{_q(c): new(f"t.{_q(lh.prev(c))}", c) for c in values}, lh.PARTITION: p},
                                  predicate=f"t.{lh.TXID} = {t}")
        m = m.when_matched_update({**{_q(lh.prev(c)): f"t.{_q(c)}" for c in values},
                                   **{_q(c): new(f"t.{_q(c)}", c) for c in values},
                                   lh.TXID: t, lh.PARTITION: p, lh.PREV_EXISTS: "true"})
        m = m.when_not_matched_insert({**{_q(c): f"s.{_q(c)}" for c in table.column_names},
                                       lh.TXID: t, lh.PARTITION: p, lh.PREV_EXISTS: "false"})
        if replay:
            # keys the earlier attempt wrote and this one does not: back to their value before txid
            mine = f"t.{lh.TXID} = {t} AND t.{lh.PARTITION} = {p}"
            m = m.when_not_matched_by_source_delete(predicate=f"{mine} AND NOT t.{lh.PREV_EXISTS}")
            m = m.when_not_matched_by_source_update({_q(c): f"t.{_q(lh.prev(c))}" for c in values}, predicate=mine)
        m.execute()


def _q(name: str) -> str:
    return name if name.isidentifier() and name.lower() == name else f"`{name}`"


class DeltaUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``DeltaStateFactory``: each tuple's values are a
    row, in the order of the state's columns."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add the tuples as rows of this batch."""
        state.add_rows(tuples)
