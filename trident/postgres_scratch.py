"""``trident verify``'s scratch copies of a PostgreSQL state (``PostgresStateFactory.scratch``,
docs/verify.md): a schema of the same database holding a table made ``LIKE`` the real one,
read back for the comparison and dropped afterwards. The real table is only read."""

from __future__ import annotations

import copy
import json
from typing import Any

from trident.postgres_sql import quote_ident, regclass

__all__ = ["create_scratch", "drop_scratch", "read_scratch"]


def create_scratch(factory: Any) -> None:
    """The scratch schema, and in it the table like the real one (the real one resolved on a
    connection of the real search path)."""
    real, schema = factory.scratch_of or ("", "")
    plain = copy.copy(factory)
    plain.scratch_of = None
    q = quote_ident
    with plain.connect() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))   # tasks create it at once
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        row = conn.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = "
                           "c.relnamespace WHERE c.oid = to_regclass(%s)", (regclass(real),)).fetchone()
        if row is not None:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.{q(factory.table)} "
                         f"(LIKE {q(row[0])}.{q(row[1])} INCLUDING ALL)")


def read_scratch(factory: Any) -> dict[Any, Any] | None:
    """The scratch table's rows: upsert ``{key: other columns}``, append ``{row: count}``;
    None for a factory that is not a scratch copy."""
    if factory.scratch_of is None:
        return None
    q = quote_ident
    conn = factory.connect()
    try:
        if conn.execute("SELECT to_regclass(%s)", (f"{factory.scratch_of[1]}.{q(factory.table)}",)).fetchone()[0] \
                is None:
            return {}
        cols = ", ".join(q(c) for c in factory.columns)
        rows = [tuple(_hashable(v) for v in r) for r in conn.execute(f"SELECT {cols} FROM {q(factory.table)}")]
    finally:
        conn.close()
    if factory.mode == "append":
        out: dict[Any, Any] = {}
        for r in rows:
            out[r] = out.get(r, 0) + 1
        return out
    kidx = [factory.columns.index(k) for k in factory.key_columns]
    vidx = [i for i in range(len(factory.columns)) if i not in kidx]
    return {_pick(r, kidx): _pick(r, vidx) if vidx else 1 for r in rows}


def drop_scratch(factory: Any) -> None:
    """``DROP SCHEMA ... CASCADE`` of the scratch schema."""
    if factory.scratch_of is not None:
        conn = factory.connect()
        try:
            conn.execute(f"DROP SCHEMA IF EXISTS {factory.scratch_of[1]} CASCADE")
        finally:
            conn.close()


def _pick(r: tuple[Any, ...], idx: list[int]) -> Any:
    """The value at ``idx`` of ``r`` (one index), else the tuple of those values."""
    return r[idx[0]] if len(idx) == 1 else tuple(r[i] for i in idx)


def _hashable(v: Any) -> Any:
    """A column's value as a key (json/jsonb values as sorted JSON text)."""
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v
