"""Exactly once into a PostgreSQL table (psycopg 3): ``PostgresStateFactory`` (docs/states.md).

>>> f = PostgresStateFactory("postgresql://127.0.0.1:5432/app", "word_counts",
...                          {"word": "text", "count": "bigint"}, key_columns=["word"])
>>> f.create_table_sql()
'CREATE TABLE "word_counts" ("word" text, "count" bigint, PRIMARY KEY ("word"))'

Use it with ``partition_persist(factory, Fields(...), PostgresUpdater())`` (each tuple a
row: its fields in the order of ``columns``), from a committer with
``context.state(factory).add_rows(rows)``, and query it with
``state_query(topology.new_static_state(factory), Fields("word"), PostgresLookup(),
Fields("count"))``.

**Mechanism.** Every task's batch is written in **one SQL transaction** that also moves
the task's row of the guard table ``trident_txids(state, part, txid, epoch)`` to
``(txid, epoch)`` -- the data and the txid are visible together or not at all:

1. the state's fence row (``part = -1``) is raised to this driver's epoch, or the
   transaction is refused when a newer driver raised it (``LeadershipLostError``: a stale
   driver writes nothing);
2. the task's guard row is locked: a stored txid *newer* than the batch's stops the run
   (``StateAheadError``); *equal* means an earlier attempt of this txid was committed
   and the driver died before recording it: that attempt is **undone** first -- an
   ``append`` table's rows of ``(trident_txid, trident_partition)`` deleted, an
   ``upsert`` table's rows put back from the undo rows kept for the last txid
   (``trident_undo``) -- so the replay, with a transactional spout the same batch and with
   an opaque one perhaps another, counts once;
3. the rows go in with ``COPY`` (upsert: ``COPY`` into a temporary table, then one
   ``INSERT ... SELECT ... ON CONFLICT (keys) DO UPDATE``); an upsert first keeps the rows
   it overwrites in ``trident_undo`` (only the last txid's: older ones are deleted);
4. the guard row takes ``(txid, epoch)``; ``COMMIT``.

Checks before anything is written (``make_state``): the server is reachable, the table
exists (or ``create_table=True``; else the error gives the ``CREATE TABLE``), every
column exists, the key columns are the table's primary key or a unique index (upsert),
and each value is one psycopg can send (``UnstorableValueError`` naming column and value);
an upsert key value is not NULL (a NULL never equals itself: neither ``ON CONFLICT`` nor
the undo would find the row again, and a replay would double it).

**Names.** Every table and column name is quoted, in one place (``sql_name``): a name is
used exactly as written -- ``WordCounts`` is the table ``"WordCounts"``, ``order`` a
column like any other. What PostgreSQL cannot hold is refused when the factory is made:
an empty name, a NUL, more than 63 bytes (PostgreSQL would cut it short), more than
``schema.table``.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from state.errors import (
    ConfigError,
    LeadershipLostError,
    StateAheadError,
    StateRefusedError,
    StateUnavailableError,
    UnstorableValueError,
)
from state.redaction import redact_dsn, remember, remember_environment, secrets_in
from transactional.extras import missing_extra
from trident.operation import BaseQueryFunction, BaseStateUpdater, TridentCollector, TridentTuple
from trident.postgres_scratch import create_scratch, drop_scratch, read_scratch
from trident.postgres_sql import (
    check_ident,
    json_values,
    refusal,
    regclass,
    same_type,
    sql_name,
    sql_names,
    timestamp_at,
)
from trident.state import EPOCH, TOPOLOGY_ID, State, StateFactory

try:
    import psycopg  # noqa: F401 - checked at import: a missing extra is one line naming it
except ModuleNotFoundError as e:
    raise missing_extra(e, "trident.postgres") from None

__all__ = ["PostgresStateFactory", "PostgresState", "PostgresUpdater", "PostgresLookup", "GUARD_TABLE", "UNDO_TABLE"]

GUARD_TABLE = "trident_txids"
UNDO_TABLE = "trident_undo"
TXID_COLUMN = "trident_txid"
PARTITION_COLUMN = "trident_partition"
EXPIRES_COLUMN = "trident_expires_at"
#: rows deleted per commit by the sweep of a state with a TTL
SWEEP_ROWS = 10_000


class PostgresStateFactory(StateFactory):
    """A table of a PostgreSQL database as a Trident state (see the module docstring).

    ``dsn``: a libpq connection string or ``postgresql://`` URL. ``table``: the table
    (``schema.table`` allowed). ``columns``: the column names in the order of each row's
    values, or a mapping ``name -> SQL type`` (needed for ``create_table``). ``mode``:
    ``"upsert"`` (``key_columns`` required: a row replaces the row with its key) or
    ``"append"`` (each row added; the table also has ``trident_txid bigint`` and
    ``trident_partition int`` columns, which say which batch wrote a row). ``add_columns``
    (upsert): numbers a row *adds* to its key's stored row (``count = count + new``: a
    running total, exactly once) instead of replacing them. ``state_id``:
    the name of this state's guard rows (default ``<topology id>:<table>``).
    ``batch_size``: rows per ``COPY`` chunk. ``ttl_secs``: a row not written for that long,
    by the txids' recorded times, is gone -- the table has a ``trident_expires_at
    timestamptz`` column that each write sets (txid time + TTL), an upsert counts an
    expired row as absent, ``PostgresLookup`` skips it, and each commit of task 0 deletes
    up to ``SWEEP_ROWS`` rows expired more than ``ttl_grace_secs`` ago (docs/states.md).
    """

    opaque_safe = True

    def __init__(self, dsn: str, table: str, columns: Sequence[str] | Mapping[str, str], *,
                 key_columns: Sequence[str] = (), mode: str = "upsert", add_columns: Sequence[str] = (),
                 create_table: bool = False,
                 state_id: str | None = None, batch_size: int = 10_000, connect_timeout: float = 5.0,
                 ttl_secs: float | None = None, ttl_grace_secs: float = 600.0) -> None:
        self.dsn = dsn
        _remember_dsn(dsn)
        self.table = check_ident(table, "table", qualified=True)
        self.types: dict[str, str] = dict(columns) if isinstance(columns, Mapping) else {}
        self.columns = [check_ident(c, "column") for c in (list(columns) if not isinstance(columns, Mapping)
                                                            else list(columns.keys()))]
        if not self.columns:
            msg = f"PostgresStateFactory({table!r}): name at least one column"
            raise ConfigError(msg)
        if mode not in ("upsert", "append"):
            msg = f"PostgresStateFactory({table!r}): mode is 'upsert' or 'append', not {mode!r}"
            raise ConfigError(msg)
        self.mode = mode
        self.key_columns = [check_ident(c, "key column") for c in key_columns]
        if mode == "upsert" and not self.key_columns:
            msg = (f"PostgresStateFactory({table!r}) in upsert mode needs key_columns (the columns a row "
                   "replaces another by); or use mode='append'")
            raise ConfigError(msg)
        missing = [k for k in self.key_columns if k not in self.columns]
        if missing:
            msg = f"PostgresStateFactory({table!r}): key columns {missing} are not among the columns {self.columns}"
            raise ConfigError(msg)
        self.add_columns = [c for c in add_columns]
        bad = [c for c in self.add_columns if c not in self.columns or c in self.key_columns or mode != "upsert"]
        if bad:
            msg = (f"PostgresStateFactory({table!r}): add_columns {bad} must be non-key columns of an upsert "
                   f"(the numbers a row adds to its key's row)")
            raise ConfigError(msg)
        self.create_table = create_table
        from state.map.ttl import Ttl

        ttl = Ttl.of(ttl_secs, "write", ttl_grace_secs)
        self.ttl_ms = None if ttl is None else ttl.ms
        self.ttl_grace_ms = 0 if ttl is None else ttl.grace_ms
        self.state_id = state_id
        self.batch_size = batch_size
        self.connect_timeout = connect_timeout

    @property
    def name(self) -> str:
        """``postgres:<table>``."""
        return f"postgres:{self.table}"

    def create_table_sql(self) -> str:
        """The ``CREATE TABLE`` this state needs (types ``<type>`` where not given)."""
        return str(self._create_table().as_string())

    def _create_table(self) -> Any:
        from psycopg import sql

        cols = [sql_name(c) + sql.SQL(f" {self.types.get(c, '<type>')}") for c in self.columns]
        if self.ttl_ms is not None:
            cols.append(sql.SQL("{} timestamptz").format(sql_name(EXPIRES_COLUMN)))
        if self.mode == "append":
            cols += [sql.SQL("{} bigint NOT NULL").format(sql_name(TXID_COLUMN)),
                     sql.SQL("{} int NOT NULL").format(sql_name(PARTITION_COLUMN))]
        else:
            cols.append(sql.SQL("PRIMARY KEY ({})").format(sql_names(self.key_columns)))
        return sql.SQL("CREATE TABLE {} ({})").format(sql_name(self.table, qualified=True), sql.SQL(", ").join(cols))

    def connect(self) -> Any:
        """A new connection (``psycopg.connect``), or ``StateUnavailableError`` naming the server."""
        import psycopg

        _remember_dsn(self.dsn)
        # a scratch copy (``scratch``): every unqualified name resolves in its own schema
        extra: dict[str, Any] = {} if self.scratch_of is None else {"options": f"-c search_path={self.scratch_of[1]}"}
        try:
            return psycopg.connect(self.dsn, connect_timeout=max(1, int(self.connect_timeout)), autocommit=True,
                                   **extra)
        except psycopg.ProgrammingError:       # libpq's message would quote a piece of the string
            msg = (f"the connection string for table {self.table!r} is not one libpq can read; quote a value "
                   "holding spaces or quotes ('A B', with \\' and \\\\ escaped inside) or use a "
                   "postgresql:// URL with the password percent-encoded")
            raise ConfigError(msg) from None
        except psycopg.OperationalError as e:
            refused = refusal(str(e))
            if refused:
                msg = (f"PostgreSQL at {redact_dsn(self.dsn)} refused the connection for table {self.table!r}: "
                       f"{refused}. Fix the connection string (the database, the role or its password); "
                       "retrying cannot help")
                raise StateRefusedError(msg) from None
            msg = (f"PostgreSQL for table {self.table!r} cannot be reached at {redact_dsn(self.dsn)}: "
                   f"{str(e).strip().splitlines()[0] if str(e).strip() else e!r}. Start the server or fix the "
                   "connection string")
            raise StateUnavailableError(msg) from None

    def check(self, conf: dict[str, Any]) -> None:
        """Before any batch (the driver calls it at start): the server answers and takes the
        credentials, the table exists (or is created with ``create_table``) with every column
        of the declared type and, for an upsert, the key's unique index (a verify run's scratch
        copy: its schema made first, as ``make_state`` does)."""
        if self.scratch_of is not None:
            self._create_scratch()
        conn = self.connect()
        try:
            self.prepare_schema(conn)
        finally:
            conn.close()

    def make_state(self, conf: dict[str, Any], metrics: Any, partition_index: int, num_partitions: int) -> PostgresState:
        """Connect, check the schema (creating the table when asked), return the state."""
        if self.scratch_of is not None:
            self._create_scratch()
        conn = self.connect()
        try:
            self.prepare_schema(conn)
        except BaseException:
            conn.close()
            raise
        sid = self.state_id or f"{conf.get(TOPOLOGY_ID, 'trident')}:{self.table}"
        return PostgresState(self, conn, sid, partition_index, conf.get(EPOCH))

    # -- trident verify's scratch copies (trident.state.StateFactory.scratch) --

    #: on a scratch copy: (the real table, the scratch schema)
    scratch_of: tuple[str, str] | None = None

    def scratch(self, namespace: str) -> PostgresStateFactory:
        """A copy writing into the schema ``trident_<namespace>`` of the same database: the
        table created there like the real one (``LIKE ... INCLUDING ALL``), the guard
        tables beside it; the real table and guard tables are only read (for ``LIKE``)."""
        schema = "trident_" + re.sub(r"[^a-z0-9_]", "_", namespace.lower())[:54]
        c = copy.copy(self)
        c.scratch_of = (self.table, schema)
        c.table = self.table.rsplit(".", 1)[-1]
        return c

    def _create_scratch(self) -> None:
        create_scratch(self)

    def read_scratch(self) -> dict[Any, Any] | None:
        """The scratch table's rows: upsert ``{key: other columns}``, append ``{row: count}``."""
        return read_scratch(self)

    def drop_scratch(self) -> None:
        """``DROP SCHEMA ... CASCADE`` of the scratch schema."""
        drop_scratch(self)

    def prepare_schema(self, conn: Any) -> None:
        """The guard tables, and the table checked (or created with ``create_table``)."""
        from psycopg import sql

        with conn.transaction():
            conn.execute(f"CREATE TABLE IF NOT EXISTS {GUARD_TABLE} (state text NOT NULL, part int NOT NULL, "
                         "txid bigint NOT NULL, epoch bigint, PRIMARY KEY (state, part))")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {UNDO_TABLE} (state text NOT NULL, part int NOT NULL, "
                         "txid bigint NOT NULL, key jsonb NOT NULL, old jsonb)")
            exists = conn.execute("SELECT to_regclass(%s)", (regclass(self.table),)).fetchone()[0]
            if exists is None:
                if not self.create_table:
                    folded = conn.execute("SELECT to_regclass(%s)", (self.table,)).fetchone()[0]
                    hint = (f" (names are used as written; a table {folded} exists: name it {str(folded)!r})"
                            if folded is not None else "")
                    msg = (f"table {self.table!r} does not exist{hint}; create it:\n  {self.create_table_sql()};\n"
                           "or pass create_table=True (with columns as a mapping name -> SQL type)")
                    raise ConfigError(msg)
                if len(self.types) != len(self.columns):
                    msg = (f"create_table=True needs every column's SQL type: pass columns as a mapping, e.g. "
                           f"{ {c: 'text' for c in self.columns} }")
                    raise ConfigError(msg)
                conn.execute(self._create_table())
                if self.ttl_ms is not None:      # the sweep's and the readers' index
                    conn.execute(sql.SQL("CREATE INDEX ON {} ({})").format(sql_name(self.table, qualified=True),
                                                                          sql_name(EXPIRES_COLUMN)))
        have = {r[0]: r[1] for r in conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped", (regclass(self.table),))}
        need = (self.columns + ([TXID_COLUMN, PARTITION_COLUMN] if self.mode == "append" else [])
                + ([EXPIRES_COLUMN] if self.ttl_ms is not None else []))
        missing = [c for c in need if c not in have]
        if missing:
            msg = (f"table {self.table!r} has no column(s) {missing} (it has {sorted(have)}); this state writes "
                   f"{need}. Add them (ALTER TABLE {regclass(self.table)} ADD COLUMN ...) or name the table's "
                   "columns")
            raise ConfigError(msg)
        for c, t in self.types.items():
            if t.split("(")[0].strip().lower() != have[c].split("(")[0].strip().lower() and not same_type(t, have[c]):
                msg = (f"column {c!r} of table {self.table!r} is {have[c]}, but this state declares it {t}; "
                       "make them agree")
                raise ConfigError(msg)
        if self.mode == "upsert":
            uniques = [set(r[0]) for r in conn.execute(
                "SELECT array_agg(a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisunique "
                "GROUP BY i.indexrelid", (regclass(self.table),))]
            if set(self.key_columns) not in uniques:
                msg = (f"upsert into {self.table!r} needs a primary key or unique index on {self.key_columns}; "
                       f"add one: ALTER TABLE {regclass(self.table)} ADD PRIMARY KEY "
                       f"({sql_names(self.key_columns).as_string()})")
                raise ConfigError(msg)


def _remember_dsn(dsn: str) -> None:
    """The DSN's password (every form libpq reads) and ``PGPASSWORD`` masked wherever
    they show up later (``state.redaction``), in this process."""
    remember(secrets_in(dsn))
    remember_environment()


class PostgresState(State):
    """One task's view of the table: rows added in a batch (``add_rows``) are written at
    ``commit(txid)`` in one SQL transaction with the guard row (module docstring)."""

    def __init__(self, factory: PostgresStateFactory, conn: Any, state_id: str, partition: int,
                 epoch: int | None) -> None:
        self.f = factory
        self.conn = conn
        self.state_id = state_id
        self.partition = partition
        self.epoch = epoch
        self.rows: list[tuple[Any, ...]] = []
        self.txid: int | None = None
        #: the txid's recorded time (ms; ``begin_time``): what a TTL is decided by
        self.time_ms: int | None = None
        self._dumpable: dict[tuple[int, type], None] = {}
        self._key_idx = [factory.columns.index(k) for k in factory.key_columns]

    def begin_time(self, time_ms: int) -> None:
        """The txid's recorded time (the engine calls it before ``begin_commit``): a row
        written now expires at it + ``ttl_secs``, one whose expiry is at or before it is
        gone; the same on every replay of the txid."""
        self.time_ms = time_ms

    def begin_commit(self, txid: int) -> None:
        """Start batch ``txid``: nothing buffered."""
        self.txid, self.rows = txid, []

    def add_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        """Rows (values in the order of ``columns``) of this batch, checked sendable now."""
        n = len(self.f.columns)
        for r in rows:
            r = tuple(r)
            if len(r) != n:
                msg = (f"a row for table {self.f.table!r} has {len(r)} values {r!r}; the state writes "
                       f"{n} columns {self.f.columns}")
                raise UnstorableValueError(msg)
            self._check_values(r)
            if self.f.mode == "upsert" and any(r[i] is None for i in self._key_idx):
                nulls = [self.f.columns[i] for i in self._key_idx if r[i] is None]
                msg = (f"table {self.f.table!r}: key column(s) {nulls} of row {r!r} are None; an upsert key "
                       "cannot be NULL (NULL never equals NULL: a replay could not find the row it wrote and "
                       "would add it twice). Filter such rows out or give them a key value before the state")
                raise UnstorableValueError(msg)
            self.rows.append(r)

    def _check_values(self, r: tuple[Any, ...]) -> None:
        from psycopg.adapt import PyFormat, Transformer

        for i, v in enumerate(r):
            k = (i, type(v))
            if k in self._dumpable or v is None:
                continue
            try:
                Transformer(self.conn).get_dumper(v, PyFormat.TEXT)
            except Exception as e:  # noqa: BLE001 - psycopg's own message follows
                msg = (f"table {self.f.table!r} column {self.f.columns[i]!r}: psycopg cannot send {v!r} "
                       f"({type(v).__name__}: {e}); turn it into a str, number, bytes, date or a JSON-able "
                       "value before the state")
                raise UnstorableValueError(msg) from None
            self._dumpable[k] = None

    def commit(self, txid: int) -> None:
        """Write the batch with its txid and epoch in one SQL transaction (module docstring)."""
        import psycopg

        rows, self.rows = self.rows, []
        try:
            with self.conn.transaction():
                self._fence()
                stored = self._lock_guard()
                if stored is not None and stored > txid:
                    msg = (f"table {self.f.table!r} (state {self.state_id!r}, partition {self.partition}) holds "
                           f"txid {stored}, newer than the batch's {txid}: another topology writes it, or the "
                           "topology id was reused. Use another state_id or table")
                    raise StateAheadError(msg)
                if stored == txid:
                    self._undo(txid)
                if rows:
                    self._write(rows, txid)
                if self.f.ttl_ms is not None and self.partition == 0:
                    self._sweep()
                self.conn.execute(f"UPDATE {GUARD_TABLE} SET txid = %s, epoch = %s WHERE state = %s AND part = %s",
                                  (txid, self.epoch, self.state_id, self.partition))
        except psycopg.errors.DataError as e:
            msg = (f"table {self.f.table!r}: PostgreSQL refused a value of txid {txid}: "
                   f"{str(e).strip().splitlines()[0]}; nothing of the batch was written. Make the values "
                   "match the columns' types")
            raise UnstorableValueError(msg) from None
        except psycopg.OperationalError as e:
            msg = f"PostgreSQL at {redact_dsn(self.f.dsn)} failed during txid {txid}: {e}"
            self._reconnect()
            raise StateUnavailableError(msg) from None

    def _reconnect(self) -> None:
        try:
            self.conn.close()
        finally:
            try:
                self.conn = self.f.connect()
            except StateUnavailableError:
                pass

    def _fence(self) -> None:
        if self.epoch is None:
            return
        row = self.conn.execute(
            f"INSERT INTO {GUARD_TABLE} AS g (state, part, txid, epoch) VALUES (%s, -1, 0, %s) "
            "ON CONFLICT (state, part) DO UPDATE SET epoch = EXCLUDED.epoch WHERE g.epoch <= EXCLUDED.epoch "
            "RETURNING epoch", (self.state_id, self.epoch)).fetchone()
        if row is None:
            msg = (f"table {self.f.table!r}: a newer driver (epoch above {self.epoch}) writes state "
                   f"{self.state_id!r}; this driver lost its lock and writes nothing")
            raise LeadershipLostError(msg)

    def _lock_guard(self) -> int | None:
        self.conn.execute(f"INSERT INTO {GUARD_TABLE} (state, part, txid, epoch) VALUES (%s, %s, 0, %s) "
                          "ON CONFLICT DO NOTHING", (self.state_id, self.partition, self.epoch))
        row = self.conn.execute(f"SELECT txid FROM {GUARD_TABLE} WHERE state = %s AND part = %s FOR UPDATE",
                                (self.state_id, self.partition)).fetchone()
        return None if row is None or row[0] == 0 else int(row[0])

    def _undo(self, txid: int) -> None:
        """Take back what the committed earlier attempt of ``txid`` wrote."""
        from psycopg import sql

        t = sql_name(self.f.table, qualified=True)
        if self.f.mode == "append":
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s AND {} = %s").format(
                t, sql_name(TXID_COLUMN), sql_name(PARTITION_COLUMN)), (txid, self.partition))
            return
        match = sql.SQL(" AND ").join(
            sql.SQL("{} = (u.key->>{})::{}").format(sql_name(k), sql.Literal(k), sql.SQL(self._type(k)))
            for k in self.f.key_columns)
        self.conn.execute(sql.SQL("DELETE FROM {} USING {} u WHERE u.state = %s AND u.part = %s "
                                  "AND u.txid = %s AND {}").format(t, sql_name(UNDO_TABLE), match),
                          (self.state_id, self.partition, txid))
        self.conn.execute(sql.SQL("INSERT INTO {} SELECT (jsonb_populate_record(NULL::{}, u.old)).* FROM {} u "
                                  "WHERE u.state = %s AND u.part = %s AND u.txid = %s AND u.old IS NOT NULL").format(
                              t, t, sql_name(UNDO_TABLE)), (self.state_id, self.partition, txid))

    def _type(self, col: str) -> str:
        cache = self.__dict__.setdefault("_types", {})
        if col not in cache:
            cache[col] = self.conn.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attname = %s", (regclass(self.f.table), col)).fetchone()[0]
        return str(cache[col])

    def _write(self, rows: list[tuple[Any, ...]], txid: int) -> None:
        from psycopg import sql

        f, conn, t = self.f, self.conn, sql_name(self.f.table, qualified=True)
        exp = () if f.ttl_ms is None else (timestamp_at(self._now_ms() + f.ttl_ms),)
        names = f.columns + ([EXPIRES_COLUMN] if exp else [])
        cols = sql_names(names)
        if f.mode == "append":
            copy = sql.SQL("COPY {} ({}, {}, {}) FROM STDIN").format(
                t, cols, sql_name(TXID_COLUMN), sql_name(PARTITION_COLUMN))
            with conn.cursor().copy(copy) as cp:
                for r in rows:
                    cp.write_row((*json_values(r), *exp, txid, self.partition))
            return
        # upsert: the last row of each key wins (as applying them in order would); the
        # add_columns of a key's rows are summed
        kidx = [f.columns.index(k) for k in f.key_columns]
        last: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        aidx = [f.columns.index(c) for c in f.add_columns]
        for r in rows:
            k = tuple(r[i] for i in kidx)
            old = last.get(k)
            if old is not None and aidx:
                r = tuple((v + old[i]) if i in aidx else v for i, v in enumerate(r))
            last[k] = r
        conn.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS trident_stage (LIKE {} INCLUDING DEFAULTS) "
                             "ON COMMIT DELETE ROWS").format(t))
        with conn.cursor().copy(sql.SQL("COPY trident_stage ({}) FROM STDIN").format(cols)) as cp:
            for r in last.values():
                cp.write_row((*json_values(r), *exp))
        join = sql.SQL(" AND ").join(sql.SQL("t.{} = s.{}").format(sql_name(k), sql_name(k)) for k in f.key_columns)
        keyobj = sql.SQL(", ").join(sql.SQL("{}, s.{}").format(sql.Literal(k), sql_name(k)) for k in f.key_columns)
        # Step 3a. the rows about to be overwritten (NULL: the key is new), for an undo of this txid
        conn.execute(f"DELETE FROM {UNDO_TABLE} WHERE state = %s AND part = %s", (self.state_id, self.partition))
        conn.execute(sql.SQL("INSERT INTO {} (state, part, txid, key, old) SELECT %s, %s, %s, "
                             "jsonb_build_object({}), to_jsonb(t.*) FROM trident_stage s LEFT JOIN {} t ON {}").format(
                         sql_name(UNDO_TABLE), keyobj, t, join), (self.state_id, self.partition, txid))
        # Step 3b. the upsert
        # an expired row (TTL) counts as absent: its add_columns start from the batch's numbers
        add = ("{c} = CASE WHEN {t}.{e} <= {now} THEN EXCLUDED.{c} ELSE {t}.{c} + EXCLUDED.{c} END" if exp
               else "{c} = {t}.{c} + EXCLUDED.{c}")
        now = sql.Literal(timestamp_at(self._now_ms()))
        sets = [sql.SQL(add if c in f.add_columns else "{c} = EXCLUDED.{c}").format(
                    c=sql_name(c), t=t, e=sql_name(EXPIRES_COLUMN), now=now) for c in names if c not in f.key_columns]
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(sets)) if sets else sql.SQL("DO NOTHING")
        conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM trident_stage ON CONFLICT ({}) {}").format(
            t, cols, cols, sql_names(f.key_columns), action))

    def lookup(self, keys: Sequence[Any]) -> list[tuple[Any, ...] | None]:
        """The committed rows (all columns) of ``keys`` (one value each, or a tuple of the
        key columns' values), None where absent: one query."""
        from psycopg import sql

        if not keys:
            return []
        f = self.f
        kcols = f.key_columns or f.columns[:1]
        ks = [k if isinstance(k, (tuple, list)) else (k,) for k in keys]
        one = sql.SQL("({})").format(sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql_name(c)) for c in kcols))
        where = sql.SQL(" OR ").join([one] * len(ks))
        params = [v for k in ks for v in k]
        kidx = [f.columns.index(c) for c in kcols]
        if f.ttl_ms is not None:          # an expired row is gone
            where = sql.SQL("({}) AND ({} IS NULL OR {} > {})").format(
                where, sql_name(EXPIRES_COLUMN), sql_name(EXPIRES_COLUMN), sql.Literal(timestamp_at(self._now_ms())))
        query = sql.SQL("SELECT {} FROM {} WHERE {}").format(sql_names(f.columns), sql_name(f.table, qualified=True), where)
        with self.conn.transaction():
            found = {tuple(r[i] for i in kidx): tuple(r) for r in self.conn.execute(query, params)}
        return [found.get(tuple(k)) for k in ks]

    def _now_ms(self) -> int:
        """The txid's recorded time; the wall clock for a state used outside the engine."""
        return self.time_ms if self.time_ms is not None else int(time.time() * 1000)

    def _sweep(self) -> None:
        """Delete up to ``SWEEP_ROWS`` rows that expired more than the grace before the
        txid's time (in the commit's transaction: a replay redoes it)."""
        from psycopg import sql

        t, e = sql_name(self.f.table, qualified=True), sql_name(EXPIRES_COLUMN)
        self.conn.execute(sql.SQL("DELETE FROM {} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {} WHERE {} < %s "
                                  "LIMIT %s))").format(t, t, e),
                          (timestamp_at(self._now_ms() - self.f.ttl_grace_ms), SWEEP_ROWS))

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


class PostgresUpdater(BaseStateUpdater):
    """``partition_persist``'s updater for ``PostgresStateFactory``: each tuple's values are
    a row, in the order of the factory's ``columns``."""

    def update_state(self, state: Any, tuples: list[TridentTuple], collector: TridentCollector) -> None:
        """Add the tuples as rows of this batch."""
        state.add_rows(tuples)


class PostgresLookup(BaseQueryFunction):
    """``state_query``'s function for ``PostgresStateFactory``: the tuple's fields are the
    key (the factory's ``key_columns``); emits the values of ``columns`` of its row (Nones
    where the key has no row).

    >>> PostgresLookup(["count"]).columns
    ['count']
    """

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)

    def batch_retrieve(self, state: Any, tuples: list[TridentTuple]) -> list[Any]:
        """The rows of the tuples' keys, in one query."""
        self._idx = [state.f.columns.index(c) for c in self.columns]
        rows: list[Any] = state.lookup([tuple(t) if len(t) > 1 else t[0] for t in tuples])
        return rows

    def execute(self, tuple: TridentTuple, result: Any, collector: TridentCollector) -> None:
        """Emit the row's ``columns``."""
        collector.emit(tuple_of(result, self._idx))


def tuple_of(row: tuple[Any, ...] | None, idx: list[int]) -> tuple[Any, ...]:
    """The values at ``idx`` of ``row``; Nones for no row."""
    return (None,) * len(idx) if row is None else tuple(row[i] for i in idx)
