"""One cut across sinks: every sink of a topology read as of the same txid (docs/states.md,
"One cut across sinks").

A txid that writes a Redis map, a PostgreSQL table and a Delta table becomes visible in
each at its own moment: the tasks' commits land one after the other, and only then does
the driver record the txid. The **coordinator's commit record is the cut**: ``C`` =
``committed_txid(coordination, topology)`` is a txid every sink holds in full, and each
sink can be read *as of* ``C`` whatever it holds of ``C + 1`` (the only txid that can be
partly written when ``C`` is the last recorded):

* a Redis (or memory) map: each value keeps the one before its txid (``prev``): a value
  ``C + 1`` wrote reads as its ``prev`` (``read_map_as_of``);
* a PostgreSQL ``append`` table: ``WHERE trident_txid <= C``; an ``upsert`` table: the
  rows a task's ``C + 1`` overwrote come back from ``trident_undo`` (``read_postgres_as_of``);
* a Delta or Iceberg table: one snapshot, the rows ``C + 1`` wrote read as their
  ``trident_prev_*`` values (``DeltaStateFactory.read_as_of``,
  ``IcebergStateFactory.read_as_of``; ``trident.lakehouse.AS_OF_SQL`` for any reader).
  (Not time travel by the commits' txids: delta-rs labels ``history()`` versions from the
  loaded snapshot, which a concurrent commit can shift.)

A sink that already holds ``C + 2`` moved on while it was read (``C + 1`` was recorded
meanwhile): the read raises ``CutMovedError`` and ``read_cut`` starts again from the new
``C``. No sink is ever locked and no write waits for a reader: the cost is on the reader
(one coordinator read and one read per sink, retried when the driver overtakes it).

>>> from trident.cut import CutMovedError
>>> issubclass(CutMovedError, Exception)
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from state.errors import ConfigError, StateError
from state.map.backing import BackingCapabilities, Closing, Scanning

__all__ = ["CutMovedError", "committed_txid", "read_cut", "read_map_as_of", "read_postgres_as_of",
           "map_committed_txid", "postgres_committed_txid"]


class CutMovedError(StateError):
    """A sink holds a txid past ``C + 1`` while read as of ``C``: read the cut again."""


def committed_txid(coordination: str, topology_id: str) -> int:
    """The cut: the last txid the coordinator recorded for ``topology_id`` (0: none)."""
    from state.base import last_committed_txid

    return last_committed_txid(coordination, topology_id)


def read_cut(coordination: str, topology_id: str, readers: Mapping[str, Callable[[int], Any]],
             attempts: int = 20) -> tuple[int, dict[str, Any]]:
    """``(C, {name: reader(C)})``: every reader run as of the same recorded txid ``C``;
    when one raises ``CutMovedError`` the cut is read again (at most ``attempts`` times)."""
    for _ in range(attempts):
        c = committed_txid(coordination, topology_id)
        try:
            return c, {name: read(c) for name, read in readers.items()}
        except CutMovedError:
            continue
    msg = f"topology {topology_id!r}: the driver overtook {attempts} reads of the cut in a row"
    raise CutMovedError(msg)


def _moved(what: str, stored: int, txid: int) -> CutMovedError:
    return CutMovedError(f"{what} holds txid {stored}, past {txid + 1}: the cut moved while it was read")


def read_map_as_of(url: str, namespace: str, txid: int) -> dict[Any, Any]:
    """The values of a map (``<topology_id>:<state name>``) at ``url`` as of ``txid``:
    ``{key: value}``, keys absent then left out. Opaque and transactional maps."""
    from state.map.openers import open_map_backing
    from state.map.rules import OpaqueValue, TransactionalValue

    backing: Any = open_map_backing(url, namespace)
    try:
        out = {}
        for k, s in _scan(backing).items():
            v: Any = OpaqueValue.from_stored(k, s) if "curr" in s else TransactionalValue.from_stored(k, s)
            if v.txid > txid + 1 or (v.txid > txid and isinstance(v, TransactionalValue) and not v.has_prev):
                msg = f"map {namespace!r} key {k!r}"
                raise _moved(msg, v.txid, txid)
            value = v.committed(txid)
            if value is not None:
                out[k] = value
        return out
    finally:
        if BackingCapabilities.of(backing).closing:
            cast(Closing, backing).close()


def map_committed_txid(url: str, namespace: str) -> int:
    """The newest txid a map's values hold (0: none): how far the sink has got."""
    from state.map.openers import open_map_backing

    return max((int(s["txid"]) for s in _scan(open_map_backing(url, namespace)).values()), default=0)


def _scan(backing: Any) -> dict[Any, Any]:
    """Every stored ``key -> value`` of a map backing (``Scanning``: Redis SCAN, the memory
    backing's dict; the backing's own ``~written`` entries left out)."""
    if not BackingCapabilities.of(backing).scanning:
        msg = f"backing {type(backing).__name__} cannot list its keys (state.map.backing.Scanning)"
        raise ConfigError(msg)
    return dict(cast(Scanning, backing).scan())


def read_postgres_as_of(factory: Any, txid: int, state_id: str) -> list[tuple[Any, ...]]:
    """The rows (``factory.columns``) of a ``PostgresStateFactory``'s table as of ``txid``,
    in one REPEATABLE READ transaction; ``state_id``: the state's (default
    ``<topology_id>:<table>``)."""
    import psycopg

    from trident.postgres import GUARD_TABLE, PARTITION_COLUMN, TXID_COLUMN, UNDO_TABLE

    cols = factory.columns
    sel = ", ".join(f'"{c}"' for c in cols)
    table = ".".join(f'"{p}"' for p in factory.table.split("."))
    with psycopg.connect(factory.dsn, autocommit=True) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with conn.transaction():
            guards = conn.execute(f"SELECT part, txid FROM {GUARD_TABLE} WHERE state = %s AND part >= 0",
                                  (state_id,)).fetchall()
            for part, t in guards:
                if t > txid + 1:
                    msg = f"table {factory.table!r} part {part}"
                    raise _moved(msg, t, txid)
            if factory.mode == "append":
                return [tuple(r) for r in conn.execute(
                    f"SELECT {sel} FROM {table} WHERE {TXID_COLUMN} <= %s ORDER BY {TXID_COLUMN}, {PARTITION_COLUMN}",
                    (txid,))]
            kidx = [cols.index(k) for k in factory.key_columns]
            rows = {tuple(r[i] for i in kidx): tuple(r) for r in conn.execute(f"SELECT {sel} FROM {table}")}
            for part, t in guards:
                if t != txid + 1:
                    continue
                for key, old in conn.execute(f"SELECT key, old FROM {UNDO_TABLE} WHERE state = %s AND part = %s "
                                             "AND txid = %s", (state_id, part, t)):
                    k = tuple(key[c] for c in factory.key_columns)
                    rows.pop(k, None)
                    if old is not None:
                        rows[k] = tuple(old[c] for c in cols)
            return sorted(rows.values())


def postgres_committed_txid(factory: Any, state_id: str) -> int:
    """The newest txid a ``PostgresStateFactory``'s table holds (0: none)."""
    import psycopg

    from trident.postgres import GUARD_TABLE

    with psycopg.connect(factory.dsn) as conn:
        row = conn.execute(f"SELECT max(txid) FROM {GUARD_TABLE} WHERE state = %s AND part >= 0", (state_id,)).fetchone()
    return int(row[0] or 0) if row else 0
